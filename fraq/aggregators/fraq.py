"""FRAQ: exact weighted stacking, then coordinate-space recompression (the paper's Section 3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

import fraq
from fraq._defaults import DEFAULTS, UNMEASURED, Column
from fraq._plan import check_options
from fraq._recompress import finish_started, read_started, recompress_checked, start_checked_all
from fraq._validation import NonFiniteError
from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import REINITIALIZE, Downlink, Factors
from fraq.backends import AUTO
from fraq.flops import fraq_model

__all__ = ["DEFAULT_TAU", "Fraq", "READS", "READS_DEFAULTS"]

DEFAULT_TAU = 0.95
"""FRAQ's energy threshold when neither ``tau`` nor ``rank`` is given (the paper's higher setting)."""


class Fraq(Aggregator):
    r"""Stack (:func:`fraq.stack`), recompress (:func:`fraq.recompress`), broadcast, merge.

    :math:`B_g A_g` is a best rank-p approximation of :math:`\sum_k a_k s_k B_k A_k`,
    with p chosen per module by the energy rule (``tau``) or fixed (``rank``). The global
    adapter is stored with alpha_g = p, so its scale is 1 and merging applies exactly
    :math:`B_g A_g`; clients merge it into their frozen base weights and start fresh
    adapters (the paper's Algorithm 1). Heterogeneous client ranks are native.

    Downlink per client and module: (m + n) p parameters.
    Flops per module: :func:`fraq.recompress`'s, on the path of fewer FLOPs at the module's
    shape (:func:`fraq.flops.cheapest_path`): about (2d + D) r^2 for LoRA stacks, and
    linear in r once the stacked rank r = sum_k r_k passes d (many clients).

    Args:
        tau: energy threshold in (0, 1] (default :data:`DEFAULT_TAU` = 0.95, the paper's
            higher setting; it also reports 0.80).
        rank: fixed rank p instead of ``tau`` (give one of the two).
        backend: basis backend name (:data:`fraq.BACKENDS`), or ``"auto"`` (default): the
            device's default (:data:`fraq._defaults.DEFAULTS`).
        eig_dtype: dtype of the r x r eigenproblem, float32 or float64 (see :func:`fraq.recompress`).
        gram: the Gram's form, one of :data:`fraq._gram.GRAMS` (default: recompress's).
        eigensolver: the eigenproblem's route (:mod:`fraq._eigen`; default ``"auto"``).
        pipeline: stepwise or static (:data:`fraq._plan.PIPELINES`; default ``"auto"``).
        reads: when the host reads a shape group's static pass (:data:`READS`; default
            ``"auto"``, the device's entry in :data:`fraq._defaults.DEFAULTS`); under
            ``"call"`` the groups that share a stacked rank also share one r x r stage.

    The options are checked once, here, by :func:`fraq.recompress`'s own
    :func:`~fraq._plan.check_options` (same rules, same messages), and held as
    :attr:`options`.
    """

    name = "fraq"
    client_init = REINITIALIZE
    display_name = "FRAQ"
    paper_order = 8  # its row in the paper's Tables 1-3
    downlink_rule = "(m + n) p"
    flop_model = staticmethod(fraq_model)
    energy_rule = True
    checks_finite = False  # Group.stacked does
    from_stacks = True  # reads each group only through Group.stacked(): a RoundBuffer's stacks feed it
    finite_output = True  # see Aggregator.finite_output
    basis_backend = True

    def __init__(self, *, tau: float | None = None, rank: int | None = None, backend: str = AUTO,
                 eig_dtype: torch.dtype | None = None, gram: str | None = None, eigensolver: str = "auto",
                 pipeline: str = "auto", reads: str = "auto"):
        if not isinstance(reads, str) or reads not in READS:
            raise ValueError(f"reads(={reads!r}) must be one of {list(READS)}")
        if tau is None and rank is None:
            tau = DEFAULT_TAU
        self.options = check_options(tau=tau, rank=rank, backend=backend, eig_dtype=eig_dtype,
                                     gram="auto" if gram is None else gram, eigensolver=eigensolver,
                                     pipeline=pipeline)
        self.tau = self.options.tau
        self.rank = self.options.rank
        self.gram = gram
        self.backend = backend
        self.eig_dtype = eig_dtype
        self.eigensolver = eigensolver
        self.pipeline = pipeline
        self.reads = reads

    def capped(self, limit: int) -> Fraq:
        """A fixed ``rank`` above ``limit`` is capped there: a module whose stack or shape
        allows fewer components keeps min(rank, limit) (``tau`` needs no cap)."""
        if self.rank is None or self.rank <= limit:
            return self
        return Fraq(rank=limit, backend=self.backend, eig_dtype=self.eig_dtype, gram=self.gram,
                    eigensolver=self.eigensolver, pipeline=self.pipeline, reads=self.reads)

    def _groups(self, groups: list[Group], state) -> GroupOutput:
        """Every group's output; under ``reads="call"`` every group is checked, its static pass
        queued with the r x r stage run once over the groups that share the stacked rank
        (:func:`fraq._recompress.start_checked_all`), and one host read serves them all. The
        results are the per-group calls' (the same operations on each matrix, the r x r ones in
        one batch); a group whose verdicts fail runs the stepwise pipeline on its own stacks,
        as it would alone, and a NaN or Inf there is named by client and module."""
        device = groups[0].spec.device if groups else None
        if len(groups) < 2 or _reads(self.reads, device) != "call":
            return super()._groups(groups, state)
        started = start_checked_all(self.options, [g.stacked(scan=False) for g in groups])
        out: GroupOutput = {}
        for g, st, host in zip(groups, started, read_started(started)):
            try:
                res = finish_started(st, host)
            except NonFiniteError:
                g.name_non_finite((st.B, st.A))
                raise
            out.update(_outputs(g, res))
        return out

    def _group(self, group: Group, state) -> GroupOutput:
        # One host read per group: recompress's own check finds a NaN or Inf in the stacks,
        # and only then are the uploads scanned to name the client and module.
        Bst, Ast = group.stacked(scan=False)
        try:
            res = recompress_checked(self.options, Bst, Ast)
        except NonFiniteError:
            group.name_non_finite((Bst, Ast))
            raise
        return _outputs(group, res)

    def aggregate_batch(self, Bs: Sequence[torch.Tensor], As: Sequence[torch.Tensor], *, rank: int | None = None,
                        tau: float | None = None, weights=None, scales=None
                        ) -> tuple[torch.Tensor, torch.Tensor, int | torch.Tensor]:
        """``(B_g, A_g, p)`` for one batch of equal-shape modules: :func:`fraq.stack` then
        :func:`fraq.recompress` at ``rank`` or ``tau`` (default: the instance's setting)."""
        options = self.options if tau is None and rank is None else self.options.cut(tau=tau, rank=rank)
        Bst, Ast = fraq.stack(Bs, As, weights, scales)
        res = recompress_checked(options, Bst, Ast)
        return res.B, res.A, res.rank


READS = ("auto", "group", "call")
"""Values of FRAQ's ``reads``: ``"group"`` reads each shape group's static pass as its
group finishes (one host read per group); ``"call"`` queues every group's pass first, the
r x r stage (eigenproblem, energy rule, verdicts) run once over the groups that share the
stacked rank, and reads them all in one host read per call (:meth:`Fraq._groups`);
``"auto"`` is the device's entry in :data:`fraq._defaults.DEFAULTS`. Without the static
pipeline (the stepwise one, or a group whose verdicts fail) a group reads as that pipeline
does, either way."""

READS_DEFAULTS: Mapping[str, str] = Column("reads")
"""Device type -> what ``reads="auto"`` runs: a read-only view of the ``reads`` column of
:data:`fraq._defaults.DEFAULTS`, where each entry's evidence is."""


def _reads(reads: str, device: torch.device | None) -> str:
    """``reads`` with ``"auto"`` resolved for ``device`` (:data:`fraq._defaults.DEFAULTS`)."""
    if reads != "auto":
        return reads
    kind = None if device is None else device.type
    return (DEFAULTS[kind] if kind in DEFAULTS else UNMEASURED).reads


def _outputs(group: Group, res) -> GroupOutput:
    """A group's result as each module's Downlink (one global adapter) and rank."""
    ranks = res.rank_list()  # the call's own read: none of its own here
    out: GroupOutput = {}
    for mod, B, A, p in zip(group.specs, group.split_prefixes(res.B, ranks, -1), group.split_prefixes(res.A, ranks, -2),
                            ranks):
        out[mod.name] = (Downlink(sent=(B, A), merge=(Factors(B, A, 1.0),)), p)
    return out
