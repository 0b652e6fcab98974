"""What a :func:`fraq.recompress` call computes: the caller's checked options, then the plan.

:class:`Options` is what a caller asks, checked before any shape is known (the whole-model
aggregator checks its options once, at construction); :class:`Plan` is what one call
runs, fixed once from the options and the factors' shapes by the FLOP counts of
:func:`fraq.flops.cheapest_path`: the basis (the backend's, or the identity when r >= d),
the Gram form, and the dtypes of each step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from fraq._defaults import DEFAULTS, UNMEASURED, Column
from fraq._eigen import check_eigensolver
from fraq._gram import GRAMS
from fraq._static import applies
from fraq._validation import check_eig_dtype, check_rank, check_tau, compute_dtype
from fraq.backends import AUTO, REGISTRY, resolve_backend
from fraq.backends.base import Backend, identity_basis
from fraq.flops import cheapest_path

__all__ = ["PIPELINES", "PIPELINE_DEFAULTS", "Options", "Plan", "check_options"]

PIPELINES = ("auto", "stepwise", "static")
"""Values of ``recompress(pipeline=...)``: ``"stepwise"`` runs the steps of :mod:`fraq._recompress`
and decides each verdict on the host as it comes; ``"static"`` runs one pass at fixed shapes
with one host read (:mod:`fraq._static`) where it applies (a backend with a static pass,
``cholesky``, on float32 data with a factored Gram: :func:`fraq._static.applies`) and the
stepwise pipeline elsewhere or where its verdicts fail; ``"auto"`` is the device's entry in
:data:`fraq._defaults.DEFAULTS`."""

PIPELINE_DEFAULTS: Mapping[str, str] = Column("pipeline")
"""Device type -> the pipeline ``"auto"`` runs: a read-only view of the ``pipeline`` column
of :data:`fraq._defaults.DEFAULTS`, where each entry's evidence is."""


@dataclass(frozen=True)
class Options:
    """What a caller asks of :func:`recompress`, checked, before any shape is known.

    The whole-model aggregator (:class:`fraq.aggregators.Fraq`) checks its options with
    :func:`check_options` once, at construction, and hands them as they are to every call
    (:func:`fraq._recompress.recompress_checked`).

    Attributes:
        tau, rank: the energy threshold or the fixed rank (exactly one is set).
        backend: a registered name or ``"auto"`` (resolved per device by :class:`Plan`).
        eig_dtype: the eigensolver's dtype.
        gram: the requested Gram form (:data:`GRAMS`).
        eigensolver: the eigenproblem's route (:data:`fraq._eigen.EIGENSOLVERS`).
        pipeline: :data:`PIPELINES`.
    """

    tau: float | None
    rank: int | None
    backend: str = AUTO
    eig_dtype: torch.dtype = torch.float64
    gram: str = "auto"
    eigensolver: str = "auto"
    pipeline: str = "auto"

    def cut(self, *, tau=None, rank=None) -> Options:
        """These options cutting by ``tau`` or at ``rank`` instead (exactly one), checked as
        :func:`check_options` checks them."""
        if (tau is None) == (rank is None):
            raise ValueError(f"pass exactly one of tau and rank, got tau={tau!r}, rank={rank!r}")
        return replace(self, tau=None if tau is None else check_tau(tau),
                       rank=None if rank is None else check_rank(rank, None))


def check_options(*, tau=None, rank=None, backend: str = AUTO, eig_dtype=None, gram: str = "auto",
                  eigensolver: str = "auto", pipeline: str = "auto", limit: int | None = None) -> Options:
    """:class:`Options` from :func:`recompress`'s arguments, or the error naming the argument
    and its value; ``limit`` caps a fixed rank (min(d, r) of a call; None: any rank >= 1)."""
    if (tau is None) == (rank is None):
        raise ValueError(f"pass exactly one of tau and rank, got tau={tau!r}, rank={rank!r}")
    if tau is not None:
        tau = check_tau(tau)
    else:
        rank = check_rank(rank, limit)
    if backend != AUTO:
        resolve_backend(backend, "cpu")  # the name's check and message; "auto" resolves per device
    if not isinstance(gram, str) or gram not in GRAMS:
        raise ValueError(f"gram(={gram!r}) must be one of {list(GRAMS)}")
    if not isinstance(pipeline, str) or pipeline not in PIPELINES:
        raise ValueError(f"pipeline(={pipeline!r}) must be one of {list(PIPELINES)}")
    edt = torch.float64 if eig_dtype is None else check_eig_dtype(eig_dtype)
    return Options(tau=tau, rank=rank, backend=backend, eig_dtype=edt, gram=gram,
                   eigensolver=check_eigensolver(eigensolver), pipeline=pipeline)


@dataclass(frozen=True)
class Plan:
    """What a call computes, fixed once from its checked options and its shapes.

    Attributes:
        tau, rank: the energy threshold or the fixed rank (exactly one is set).
        backend: the basis backend's resolved name (``result.backend``).
        basis_fn: the basis of X this call runs: the backend's, or the identity (r >= d).
        fast_basis_fn: the same with its verdict left pending (the backend's registered
            ``deferred``), else ``basis_fn``: the first pass's basis.
        identity: the basis is I_d (:func:`fraq.flops.cheapest_path`).
        factored: the first pass forms the Gram factored.
        guard: a factored Gram is checked for cancelling clients (``gram="auto"``).
        equilibrate: X's columns are equilibrated against Y's rows before the basis
            (:func:`fraq._range.equilibrate`): a backend not invariant to column scaling.
        gram: the requested Gram form (:data:`GRAMS`), recorded in ``info``.
        out_dtype, cdt, edt: the result's dtype, the compute dtype, the eigensolver's.
        eigensolver: the eigenproblem's route, checked against the factors' device.
        static: the call runs :mod:`fraq._static` first (:data:`PIPELINES`).
    """

    tau: float | None
    rank: int | None
    backend: str
    basis_fn: Backend
    fast_basis_fn: Backend
    identity: bool
    factored: bool
    guard: bool
    equilibrate: bool
    gram: str
    out_dtype: torch.dtype
    cdt: torch.dtype
    edt: torch.dtype
    eigensolver: str = "auto"
    static: bool = False

    @classmethod
    def of(cls, options: Options, B: torch.Tensor, A: torch.Tensor) -> Plan:
        """The plan of checked ``options`` on factors B (*, m, r), A (*, r, n): the path of
        fewer FLOPs at (d, D, r) (:func:`fraq.flops.cheapest_path`; ``p`` is the fixed rank,
        or 0 under the energy rule, which enters only the O(p) terms)."""
        m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
        d, D = min(m, n), max(m, n)
        name = resolve_backend(options.backend, B.device, B.dtype)
        path = cheapest_path(d, D, r, min(options.rank or 0, d, r), form=options.gram)
        spec = REGISTRY[name]
        basis_fn = identity_basis if path.identity else spec.fn
        fast = basis_fn if path.identity or spec.deferred is None else spec.deferred
        eigensolver = check_eigensolver(options.eigensolver, B.device)
        pipeline = options.pipeline
        if pipeline == "auto":
            pipeline = (DEFAULTS[B.device.type] if B.device.type in DEFAULTS else UNMEASURED).pipeline
        static = pipeline == "static" and applies(name, B.dtype, path.identity, path.factored, eigensolver)
        return cls(tau=options.tau, rank=options.rank, backend=name, basis_fn=basis_fn, fast_basis_fn=fast,
                   identity=path.identity, factored=path.factored, guard=options.gram == "auto" and path.factored,
                   equilibrate=not (path.identity or spec.scale_invariant),
                   gram=options.gram, out_dtype=B.dtype, cdt=compute_dtype(B.dtype), edt=options.eig_dtype,
                   eigensolver=eigensolver, static=static)

    def workspace_bytes(self, d: int, D: int, r: int) -> int:
        """Bytes one matrix's pass holds beside its inputs, what the CPU chunks are sized by:
        the oriented factor and its basis (2 d r), H^T (D s) or Y Y^T (r^2), in the compute dtype."""
        s = min(d, r)
        work = (d * r if self.identity else 2 * d * r) + (r * r if self.factored else D * s)
        return (torch.finfo(self.cdt).bits // 8) * work

