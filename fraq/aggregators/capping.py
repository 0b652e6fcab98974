"""One rule for a fixed output rank, shared by every caller: a cap, module by module.

A module's exact aggregate :math:`\\sum_k a_k s_k B_k A_k` has rank at most
``limit = min(sum_k r_k, m, n)``, so its best rank-p approximation for any p >= limit is
the aggregate itself. A method asked for a fixed rank above a module's limit (FRAQ's
``rank``) therefore keeps ``min(rank, limit)`` components there, through
:meth:`Aggregator.capped <fraq.aggregators.Aggregator.capped>`, rather than failing in
the middle of a round: ``fraq:rank=32`` over two rank-4 clients keeps all 8 components
(it is exact), and a 3-label classifier module keeps at most 3. ``fraq aggregate
--rank`` (:func:`fraq.peft.aggregate_adapters`), the in-process harness
(:func:`fraq.federated.round_loop.run_round`) and the Flower strategy
(:class:`fraq.federated.flower.strategy.LoraStrategy`) all aggregate through
:func:`capped_aggregate`, so the rule is the same everywhere. The ranks kept are in the
result's ``ranks``, as always.
"""

from __future__ import annotations

from collections.abc import Sequence

from fraq.aggregators.base import Aggregator
from fraq.aggregators.aggregation_result import AggregationResult
from fraq.aggregators.payload import ClientUpdate

__all__ = ["capped_aggregate", "module_limit"]


def module_limit(updates: Sequence[ClientUpdate], module: str) -> int:
    """min(sum_k r_k, m, n) for ``module``: the most components its exact aggregate can have
    (a single-matrix adapter counts its rows as r_k and has no m; its columns bound it)."""
    B0, A0 = updates[0].factors[module]
    r = sum(u.factors[module][1].shape[-2] for u in updates)
    return min(r, A0.shape[-1], *(() if B0 is None else (B0.shape[-2],)))


def capped_aggregate(agg: Aggregator, updates: Sequence[ClientUpdate], state: object | None = None
                     ) -> AggregationResult:
    """``agg.aggregate(updates, state)`` with each module aggregated by ``agg.capped(limit)``.

    Modules that get the same aggregator go in one call; when every module gets ``agg``
    itself (no fixed rank, or one within every limit) this is exactly one
    ``agg.aggregate`` call. When modules need different caps, each group is aggregated on
    its own and the results are joined: possible for methods without server state and with
    per-module (or equal) diagnostics, which FRAQ's are; another split is refused.
    """
    if not updates:
        return agg.aggregate(updates, state)
    by_limit: dict[int, Aggregator] = {}
    groups: dict[int, tuple[Aggregator, list[str]]] = {}
    for m in updates[0].factors:
        limit = module_limit(updates, m)
        if limit not in by_limit:
            by_limit[limit] = agg.capped(limit)
        groups.setdefault(id(by_limit[limit]), (by_limit[limit], []))[1].append(m)
    if len(groups) == 1:
        return next(iter(groups.values()))[0].aggregate(updates, state)
    results = []
    for capped, mods in groups.values():
        sub = [ClientUpdate({m: u.factors[m] for m in mods}, u.scale, u.weight, u.upload_rank) for u in updates]
        results.append(capped.aggregate(sub, state))
    return _joined(agg, results, updates)


def _joined(agg: Aggregator, results: list[AggregationResult], updates: Sequence[ClientUpdate]) -> AggregationResult:
    first = results[0]
    if any(r.client_init != first.client_init for r in results):
        raise RuntimeError(f"{agg.name}: the modules' rank caps give different client initializations")
    if state_kept := [r for r in results if r.state is not None]:
        raise RuntimeError(f"{agg.name}: modules need different rank caps, but the method keeps server state "
                           f"({type(state_kept[0].state).__name__}), which cannot be split by module")
    info: dict = {}
    for r in results:
        for key, value in r.info.items():
            if key in info and info[key] != value:
                if not (isinstance(info[key], dict) and isinstance(value, dict)):
                    raise RuntimeError(f"{agg.name}: diagnostic {key!r} differs between the modules' rank caps "
                                       f"and cannot be joined")
                value = {**info[key], **value}
            info[key] = value
    order = list(updates[0].factors)
    downlinks = tuple({m: d[m] for m in order if m in d} for d in
                      ({k: v for r in results for k, v in r.downlinks[c].items()} for c in range(first.clients)))
    ranks = {m: r.ranks[m] for m in order for r in results if m in r.ranks}
    return AggregationResult(first.method, downlinks, first.client_init, ranks, None, info)
