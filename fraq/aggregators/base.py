"""The aggregator interface, its state, and the checks of a round's uploads.

:meth:`Aggregator.aggregate` validates a round's uploads once, groups the modules that
share a shape, per-client ranks, scales and dtype (:mod:`fraq.aggregators.group`), and
hands each group to the method's ``_group``.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import torch

from fraq.aggregators.group import Group, ModuleSpec, _make_groups
from fraq.aggregators.layer import ClientLayer, Seeds
from fraq.aggregators.aggregation_result import AggregationResult
from fraq.aggregators.payload import ClientUpdate, Downlink
from fraq.aggregators.round_buffer import RoundBuffer
from fraq.aggregators.validation import detached, validated
from fraq._stack import normalized_weights
from fraq._validation import maybe_non_finite

__all__ = ["Aggregator", "AggregatorState", "Group", "ModuleSpec"]


class AggregatorState(ABC):
    """A stateful method's server state between rounds (``result.state``), and its record.

    A checkpoint stores the state as :meth:`to_record`: tensors, numbers, strings, lists
    and dicts only, so it loads with ``torch.load(weights_only=True)``; :meth:`from_record`
    reads it back. ``aggregator`` is the registry name of the method that made it; the
    method names its state class in :attr:`Aggregator.state_type`.
    """

    aggregator: ClassVar[str]

    @abstractmethod
    def to_record(self) -> dict:
        """The state as plain data (see the class docstring)."""

    @classmethod
    @abstractmethod
    def from_record(cls, record: dict) -> AggregatorState:
        """The state :meth:`to_record` wrote; a KeyError, TypeError or ValueError if damaged."""


GroupOutput = dict[str, tuple[Downlink | tuple[Downlink, ...], int | tuple[int, ...]]]
"""module name -> (one Downlink shared by every client, or one per client; rank(s))."""


class Aggregator(ABC):
    """A server-side federated LoRA aggregation rule for a whole model.

    Subclasses set the class attributes and implement ``_group``; stateful methods also
    override ``_check_state``, ``_prepare`` and ``_finish`` and name their
    :class:`AggregatorState`. What is peculiar to a method is asked of it, never decided
    by its name: its clients' layer (:meth:`client_layer`), what they train each round
    (:meth:`trained_factors`), what its result can be written as (:attr:`not_an_adapter`,
    :attr:`no_delta`), a cap on a fixed output rank (:meth:`capped`), and its state's
    record (:attr:`state_type`).

    Class attributes:
        name: registry name.
        client_init: :data:`~fraq.aggregators.payload.WARM_START` or
            :data:`~fraq.aggregators.payload.REINITIALIZE`.
        heterogeneous_ranks: False when every client must have the same rank and scale
            per module (methods that average factors).
        single_matrix: True when clients upload ``(None, A_k)`` (FLoRG).
        alternating_freeze: True when clients train only B in odd rounds and only A in
            even rounds (LoRA-A^2, :meth:`trained_factors`).
        rank_budgets: True when every client holds the global rank max r_k and uploads
            only its r_k most important components (LoRA-A^2,
            ``ClientUpdate.upload_rank``).
        checks_finite: False when the method validates finiteness in :func:`fraq.stack`,
            so the inputs are scanned once, not twice.
        finite_output: True when the method's own steps already refuse a result that holds an
            inf or NaN (FLoRA's downlink is its screened stacks; FRAQ's recompress refuses
            non-finite stacks and a result its dtype cannot hold); every other method's
            downlinks are screened once after the round (:func:`_refuse_non_finite_output`).
        from_stacks: True when the method reads each group only through
            :meth:`Group.stacked` (in the uploads' dtype, weighted and scaled) and keeps
            the default ``_prepare``: a :class:`~fraq.aggregators.RoundBuffer` then fills
            those stacks as uploads arrive and hands them over without re-stacking
            (FRAQ, FLoRA). Any other method is given the round's uploads as a list.
        state_type: the :class:`AggregatorState` subclass of ``result.state``, or None
            for a stateless method.
        not_an_adapter: why the method's result cannot be written as one peft LoRA
            adapter from independently trained client adapters, or None when it can.
        no_delta: why it cannot be written as a dense weight delta either, or None.
        dense_factorization: True when the server factorizes a dense matrix per module
            (FlexLoRA's SVD of the m x n aggregate, FLoRG's eigensolver of a min(m, n)
            square Gram): O(m n min(m, n)) per module, minutes for a whole LLaMA model on
            a CPU, so a benchmark may time one module per shape and extrapolate.
        partial_first_round: True when the first round skips a step that every later
            round runs (FLoRG: no previous basis to align to), so a benchmark of a
            steady-state round passes the first round's ``result.state`` on.
        basis_backend: True when the method runs :func:`fraq.recompress`, whose basis
            backend (:data:`fraq.BACKENDS`) and Gram form decide its FLOP count.
        energy_rule: True when the method cuts its output rank by an energy threshold
            ``tau`` (a sweep then passes every method the same ``tau``); False when it has
            a rank rule of its own (FlexLoRA: each client's rank).
        nested: True when the method's rank-p result is the first p columns of B_g and
            rows of A_g of its rank-P result for any P >= p (a truncated SVD), so a sweep
            over p can decompose once at the largest p and cut.
        kernel_variants: the values of the method's ``kernel`` option other than its
            default (:mod:`fraq.aggregators._kernel`: ``("fraq",)`` for a method whose
            dense SVD also runs on FRAQ's kernel); the suites run each variant beside the
            default (``flexlora:kernel=fraq``) and the report compares the two. An
            instance on such a kernel says so by its own ``dense_factorization``.

    What a report shows of the method, written into every result by the benchmarks
    (:meth:`describe`), so the analysis needs no list of methods of its own:

        display_name: the name in tables and legends (the paper's spelling for the
            paper's methods); None: ``name``.
        paper_order: the method's row in the paper's Tables 1-3 (1 = FLoRA, the first;
            8 = FRAQ, the last); None for a method the paper does not compare, shown
            after the paper's. Tables list rows by it, legends the paper's method first
            (the reverse).
        downlink_rule: what one client receives per module, in parameters, as a formula
            in m, n, the client ranks r_k and the output rank p (the table in
            :mod:`fraq.aggregators`); None when not stated.
        flop_model: ``f(d, D, r, p, *, model, **path) -> float``, the analytic FLOPs of
            one d x D module (d <= D) of stacked rank r aggregated to rank p, with
            ``model`` ``"table5"`` (the paper's formulas) or ``"full"`` (the routines the
            code calls) and, for a :attr:`basis_backend` method, ``backend``, ``steps``,
            ``factored``, ``identity`` (:func:`fraq.aggregators.analytic_flops`, which checks the
            arguments and calls it); None for a method without one (its FLOP columns
            are then empty).
    """

    name: ClassVar[str]
    client_init: ClassVar[str]
    heterogeneous_ranks: ClassVar[bool] = True
    single_matrix: ClassVar[bool] = False
    alternating_freeze: ClassVar[bool] = False
    rank_budgets: ClassVar[bool] = False
    checks_finite: ClassVar[bool] = True
    from_stacks: ClassVar[bool] = False
    finite_output: ClassVar[bool] = False
    state_type: ClassVar[type[AggregatorState] | None] = None
    not_an_adapter: ClassVar[str | None] = None
    no_delta: ClassVar[str | None] = None
    dense_factorization: ClassVar[bool] = False
    partial_first_round: ClassVar[bool] = False
    basis_backend: ClassVar[bool] = False
    energy_rule: ClassVar[bool] = False
    nested: ClassVar[bool] = False
    kernel_variants: ClassVar[tuple[str, ...]] = ()
    display_name: ClassVar[str | None] = None
    paper_order: ClassVar[int | None] = None
    downlink_rule: ClassVar[str | None] = None
    flop_model: ClassVar[Callable[..., float] | None] = None

    @classmethod
    def describe(cls) -> dict:
        """What a result records of the method: ``name``, ``display_name`` (``name`` when
        the class gives none), ``paper_order``, ``downlink_rule`` and ``flop_model`` (True
        when the class has one), plain JSON values.

        Raises:
            TypeError: an attribute of the wrong type, naming the class, the attribute
                and its value.
        """
        checks = (("display_name", cls.display_name, str), ("paper_order", cls.paper_order, int),
                  ("downlink_rule", cls.downlink_rule, str))
        for attr, value, kind in checks:
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise TypeError(f"{cls.__qualname__}.{attr}(={value!r}) must be None or a {kind.__name__}")
        if cls.flop_model is not None and not callable(cls.flop_model):
            raise TypeError(f"{cls.__qualname__}.flop_model(={cls.flop_model!r}) must be None or callable")
        return {"name": cls.name, "display_name": cls.display_name or cls.name, "paper_order": cls.paper_order,
                "downlink_rule": cls.downlink_rule, "flop_model": cls.flop_model is not None}

    def aggregate(self, updates: Sequence[ClientUpdate], state: object | None = None, *,
                  batched: bool = True) -> AggregationResult:
        """Aggregate one round of uploads.

        Args:
            updates: one :class:`ClientUpdate` per client, all with the same modules.
            state: the previous round's ``result.state`` (stateful methods), or None for
                the first round.
            batched: aggregate equal-shape modules in batched kernels (default) or one
                module at a time.

        Returns:
            :class:`AggregationResult`.
        """
        if not isinstance(batched, bool):
            raise TypeError(f"batched(={batched!r}) must be a bool")
        updates, specs, grad = validated(updates, single_matrix=self.single_matrix,
                                          check_values=self.checks_finite)
        if grad:  # aggregation works on values: no autograd graph
            updates = [detached(u) for u in updates]
        self._check_ranks(specs)
        state = self._check_state(state, specs)
        weights = normalized_weights([u.weight for u in updates], len(updates))
        updates, state = self._prepare(updates, specs, state)
        groups = _make_groups(updates, specs, weights, batched, checked=self.checks_finite)
        return self._aggregate_groups(specs, groups, state, len(updates))

    def open_round(self, shapes: Mapping[str, tuple[int, int]], *, clients: int, ranks,
                   dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> RoundBuffer:
        """A :class:`~fraq.aggregators.RoundBuffer` that takes this round's ``clients``
        uploads one at a time, as they arrive, and aggregates them with this method.

        ``shapes`` is module name -> (m, n); ``ranks`` is an int (every client, every
        module), a sequence of ``clients`` ints (client k's rank for every module), or a
        mapping module -> either of those; the storage is preallocated in ``dtype`` on
        ``device``. See :class:`~fraq.aggregators.RoundBuffer` for the rules and the
        memory it holds."""
        return RoundBuffer(self, shapes, clients=clients, ranks=ranks, dtype=dtype, device=device)

    def _check_ranks(self, specs: Sequence[ModuleSpec]) -> None:
        """Refuse mixed ranks or scales in a module for a method that averages factors."""
        if self.heterogeneous_ranks:
            return
        for spec in specs:
            if len(set(spec.ranks)) > 1 or len(set(spec.scales)) > 1:
                raise ValueError(
                    f"{self.name} averages factors, so every client needs the same rank and LoRA scale "
                    f"per module; module {spec.name!r} has ranks {list(spec.ranks)} and scales "
                    f"{list(spec.scales)} (use flora, flexlora, florist or fraq for mixed ranks)")

    def _aggregate_groups(self, specs: Sequence[ModuleSpec], groups: list[Group], state: object | None,
                          K: int) -> AggregationResult:
        """The result of a round whose uploads are checked, prepared and grouped: every
        group through :meth:`_groups`, the per-client downlinks, then :meth:`_finish`
        (:meth:`aggregate` and a round buffer's stacks both end here)."""
        outputs = self._groups(groups, state)
        if not self.finite_output:
            _refuse_non_finite_output(self.name, specs, outputs)
        per_client = _per_client(specs, outputs, K)
        ranks = {spec.name: outputs[spec.name][1] for spec in specs}
        new_state, info = self._finish(specs, per_client, state)
        return AggregationResult(method=self.name, downlinks=tuple(per_client), client_init=self.client_init,
                                 ranks=ranks, state=new_state, info=info)

    @classmethod
    def trained_factors(cls, round: int) -> str:
        """What clients train in round ``round`` (from 1): ``"AB"``, or under
        :attr:`alternating_freeze` ``"B"`` in odd rounds (B starts at zero, so A would get
        no gradient) and ``"A"`` in even ones."""
        if isinstance(round, bool) or not isinstance(round, numbers.Integral) or round < 1:
            raise ValueError(f"round(={round!r}) must be an int >= 1")
        if not cls.alternating_freeze:
            return "AB"
        return "B" if round % 2 == 1 else "A"

    def client_layer(self, targets: Mapping[str, tuple[int, int]], seeds: Seeds) -> ClientLayer:
        """What this method's clients train in each of ``targets`` (module -> (m, n)), and
        what an adapter adds to a weight; ``seeds`` is the run's seed function. Default:
        peft's LoRA (:class:`~fraq.aggregators.layer.ClientLayer`)."""
        return ClientLayer(targets, seeds)

    def capped(self, limit: int) -> Aggregator:
        """This aggregator for modules whose exact aggregate has rank at most ``limit``
        (min(sum_k r_k, m, n)): itself, unless it asks for a fixed output rank above the
        limit, which it then caps there (FRAQ's ``rank``)."""
        return self

    @abstractmethod
    def _group(self, group: Group, state: object | None) -> GroupOutput:
        """Aggregate one group of modules."""

    def _groups(self, groups: list[Group], state: object | None) -> GroupOutput:
        """Aggregate every group, in order: :meth:`_group` on each (a method that serves
        the groups together, as FRAQ's one host read per call does, overrides this)."""
        outputs: GroupOutput = {}
        for g in groups:
            outputs.update(self._group(g, state))
        return outputs

    def _check_state(self, state: object | None, specs: Sequence[ModuleSpec]) -> object | None:
        if state is not None:
            raise ValueError(f"{self.name} keeps no server state, got state={type(state).__name__}")
        return None

    def _prepare(self, updates: Sequence[ClientUpdate], specs: Sequence[ModuleSpec],
                 state: object | None) -> tuple[Sequence[ClientUpdate], object | None]:
        """The uploads and the state as ``_group`` and ``_finish`` should see them."""
        return updates, state

    def _finish(self, specs: Sequence[ModuleSpec], downlinks: list[dict[str, Downlink]],
                state: object | None) -> tuple[object | None, dict]:
        return None, {}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({opts})"


def _refuse_non_finite_output(method: str, specs: Sequence[ModuleSpec], outputs: GroupOutput) -> None:
    """Refuse a round whose downlinks hold an inf or NaN, naming the module: the uploads were
    finite (checked before), so the method's arithmetic left the dtype's range (a float16
    round whose aggregate has a singular value past 65504, say); sent as it is, it would
    overwrite every client's weights with inf. One sum per tensor and one host read
    (:func:`fraq._validation.maybe_non_finite`); the exact scan runs only when that fires."""
    def tensors(spec: ModuleSpec) -> list[torch.Tensor]:
        down = outputs[spec.name][0]
        downs = [down] if isinstance(down, Downlink) else list(down)
        found: dict[int, torch.Tensor] = {}
        for d in downs:
            for t in (*d.sent, *(x for f in (*d.merge, *((d.start,) if d.start is not None else ()))
                                 for x in (f.B, f.A))):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    found.setdefault(id(t), t)
        return list(found.values())

    per_module = [(spec, tensors(spec)) for spec in specs]
    if not maybe_non_finite([t for _, ts in per_module for t in ts]):
        return
    for spec, ts in per_module:
        if any(not bool(torch.isfinite(t).all()) for t in ts):
            dtype = ts[0].dtype
            raise ValueError(
                f"{method}: the global adapter of module {spec.name!r} holds an inf or NaN, though every upload is "
                f"finite: the aggregate's factors pass the largest {dtype} ({torch.finfo(dtype).max:.3g}); "
                "aggregate uploads in a wider dtype (float32)")


def _per_client(specs: Sequence[ModuleSpec], outputs: GroupOutput, K: int) -> list[dict[str, Downlink]]:
    """Per client, module name -> Downlink. When every module's Downlink is shared by all
    clients (one global adapter), the clients share one mapping, built once."""
    if all(isinstance(outputs[spec.name][0], Downlink) for spec in specs):
        shared = {spec.name: outputs[spec.name][0] for spec in specs}
        return [shared] * K
    per_client: list[dict[str, Downlink]] = [{} for _ in range(K)]
    for spec in specs:
        down = outputs[spec.name][0]
        for k in range(K):
            per_client[k][spec.name] = down if isinstance(down, Downlink) else down[k]
    return per_client


