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
:func:`capped_aggregate`, or its round buffer :func:`open_capped_round` (uploads taken
one client at a time), so the rule is the same everywhere. The ranks kept are in the
result's ``ranks``, as always. A module's limit depends only on its shape and the
clients' ranks, so a round's caps, and the layout each client packs its upload in
(:func:`capped_layouts`), are known before any upload arrives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fraq._validation import check_finite, maybe_non_finite
from fraq.aggregators.base import Aggregator
from fraq.aggregators.aggregation_result import AggregationResult
from fraq.aggregators.certificate import ExactAggregate
from fraq.aggregators.payload import ClientUpdate
from fraq.aggregators.round_buffer import RoundBuffer, _check_ranks, _check_shapes, round_layouts
from fraq.aggregators.upload_layout import Layout

__all__ = ["SplitRound", "capped_aggregate", "capped_layouts", "module_limit", "open_capped_round"]


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
    return _joined(agg, results, list(updates[0].factors))


def _joined(agg: Aggregator, results: list[AggregationResult], order: Sequence[str]) -> AggregationResult:
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
    downlinks = tuple({m: d[m] for m in order if m in d} for d in
                      ({k: v for r in results for k, v in r.downlinks[c].items()} for c in range(first.clients)))
    ranks = {m: r.ranks[m] for m in order for r in results if m in r.ranks}
    return AggregationResult(first.method, downlinks, first.client_init, ranks, None, info)


def open_capped_round(agg: Aggregator, shapes: Mapping[str, tuple[int, int]], *, clients: int, ranks,
                      dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
                      ) -> RoundBuffer | SplitRound:
    """The round buffer of :func:`capped_aggregate`: ``aggregate(state)`` returns what
    ``capped_aggregate(agg, updates, state)`` returns for the uploads in client order.

    When every module gets one aggregator (no fixed rank, or one within every limit, the
    usual case) this is that aggregator's :meth:`~fraq.aggregators.Aggregator.open_round`;
    otherwise a :class:`SplitRound` with one buffer per cap. Arguments as ``open_round``'s.
    """
    groups = _cap_groups(agg, shapes, clients, ranks)
    if len(groups) == 1:
        return groups[0][0].open_round(shapes, clients=clients, ranks=ranks, dtype=dtype, device=device)
    return SplitRound(agg, tuple(shapes), [capped.open_round({m: shapes[m] for m in mods}, clients=clients,
                                                             ranks=_sub_ranks(ranks, mods), dtype=dtype,
                                                             device=device) for capped, mods in groups])


def capped_layouts(agg: Aggregator, shapes: Mapping[str, tuple[int, int]], *, clients: int, ranks
                   ) -> tuple[Layout, ...]:
    """Each client's :class:`~fraq.aggregators.Layout` in :func:`open_capped_round` with the
    same arguments, without its storage: what a server sends its clients before the round."""
    groups = _cap_groups(agg, shapes, clients, ranks)
    if len(groups) == 1:
        return round_layouts(groups[0][0], shapes, clients=clients, ranks=ranks)
    per_group = [round_layouts(capped, {m: shapes[m] for m in mods}, clients=clients, ranks=_sub_ranks(ranks, mods))
                 for capped, mods in groups]
    return _concatenated(tuple(shapes), per_group, clients)


class SplitRound:
    """A round whose modules need different rank caps: one :class:`RoundBuffer` per cap.

    A client's flat upload is the buffers' layouts one after another (:attr:`layout`,
    :meth:`layout_of`); :meth:`add` checks the whole upload (modules, shapes, weight and
    scale, finiteness) before handing each buffer its modules, so a refused upload leaves
    every buffer as it was, and :meth:`aggregate` joins the buffers' results as
    :func:`capped_aggregate` joins its calls' (refused for a method with server state).
    """

    def __init__(self, aggregator: Aggregator, names: tuple[str, ...], buffers: list[RoundBuffer]):
        self.aggregator = aggregator
        self.clients = buffers[0].clients
        self._names = names
        self._buffers = buffers
        self._layouts = _concatenated(names, [[buf.layout_of(k) for k in range(self.clients)] for buf in buffers],
                                      self.clients)

    @property
    def layout(self) -> Layout:
        if any(lay != self._layouts[0] for lay in self._layouts[1:]):
            raise ValueError("the clients' ranks differ, so each has its own layout: use layout_of(client)")
        return self._layouts[0]

    def layout_of(self, client: int) -> Layout:
        self._buffers[0].layout_of(client)  # checks the index
        return self._layouts[client]

    @property
    def missing(self) -> tuple[int, ...]:
        return self._buffers[0].missing

    def add(self, update: ClientUpdate | torch.Tensor, *, client: int | None = None, weight: float | None = None,
            scale: float | Mapping[str, float] | None = None, upload_rank: int | None = None) -> int:
        """As :meth:`RoundBuffer.add`: one client's upload, a ClientUpdate or one flat tensor."""
        missing = self.missing
        if client is None and not missing:
            raise ValueError(f"all {self.clients} clients of this round are in: refusing one more upload")
        k = missing[0] if client is None else client
        layout = self.layout_of(k)
        where = f"client {k}"
        if isinstance(update, torch.Tensor):
            layout.check_flat(f"{where}'s flat upload", update)
            update = layout.unpack(update, weight=1.0 if weight is None else weight,
                                   scale=1.0 if scale is None else scale, upload_rank=upload_rank)
        elif not isinstance(update, ClientUpdate):
            raise TypeError(f"{where}: an upload must be a ClientUpdate or a flat torch.Tensor, "
                            f"got {type(update).__name__}")
        elif weight is not None or scale is not None or upload_rank is not None:
            raise TypeError(f"{where}: a ClientUpdate carries its own weight, scale and upload_rank; pass those "
                            "keywords only with a flat tensor")
        tensors = layout.check_factors(where, update.factors)
        if maybe_non_finite(tensors):
            for name in self._names:
                for label, t in zip("BA", update.factors[name]):
                    if t is not None:
                        check_finite(f"{where}, module {name!r}, {label}", t)
        for buf in self._buffers:
            mods = buf.layout_of(k).names
            buf.add(ClientUpdate({m: update.factors[m] for m in mods}, update.scale, update.weight,
                                 update.upload_rank), client=k)
        return k

    def aggregate(self, state: object | None = None) -> AggregationResult:
        """The buffers' results joined (module order as ``shapes``)."""
        return _joined(self.aggregator, [buf.aggregate(state) for buf in self._buffers], self._names)

    def uploads(self) -> dict[int, ClientUpdate]:
        """As :meth:`RoundBuffer.uploads`: the uploads added so far, views of the buffers."""
        parts = [buf.uploads() for buf in self._buffers]
        out = {}
        for k, first in parts[0].items():
            owner = {m: p[k] for p in parts for m in p[k].factors}
            scale = first.scale if not any(isinstance(p[k].scale, Mapping) for p in parts) else \
                {m: owner[m].scale_of(m) for m in self._names}
            out[k] = ClientUpdate({m: owner[m].factors[m] for m in self._names}, scale, first.weight,
                                  first.upload_rank)
        return out

    def exact_aggregate(self, result: AggregationResult | None = None) -> ExactAggregate:
        """The buffers' exact aggregates as one, module order as ``shapes``
        (:meth:`RoundBuffer.exact_aggregate`), checked against ``result`` when given."""
        parts = [buf.exact_aggregate() for buf in self._buffers]
        owner = {name: part for part in parts for name in part.names}
        first = parts[0]
        exact = ExactAggregate(self._names, self.clients, first.single, first.device,
                               lambda name: owner[name].factors(name), first.where,
                               narrow=all(part.narrow for part in parts),
                               parts=None if any(part.parts is None for part in parts) else
                               lambda name: owner[name].parts(name))
        return exact if result is None else exact.check(result)

    def certificate(self, result: AggregationResult, method: str = "gram", **probe_options):
        """As :meth:`RoundBuffer.certificate`: ``result.certificate(self, method, **probe_options)``."""
        return result.certificate(self, method, **probe_options)


def _cap_groups(agg: Aggregator, shapes: object, clients: object, ranks: object) -> list[tuple[Aggregator, list[str]]]:
    """(aggregator, its modules) per cap, in order of first module: ``agg.capped(limit)``
    with limit = min(sum_k r_k, m, n), as :func:`module_limit` reads it off the uploads."""
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients(={clients!r}) must be an int >= 1")
    names = _check_shapes(shapes)
    per_module = _check_ranks(ranks, names, clients)
    by_limit: dict[int, Aggregator] = {}
    groups: dict[int, tuple[Aggregator, list[str]]] = {}
    for name in names:
        limit = min(sum(per_module[name]), *shapes[name])
        if limit not in by_limit:
            by_limit[limit] = agg.capped(limit)
        groups.setdefault(id(by_limit[limit]), (by_limit[limit], []))[1].append(name)
    return list(groups.values())


def _sub_ranks(ranks: object, mods: Sequence[str]) -> object:
    return {m: ranks[m] for m in mods} if isinstance(ranks, Mapping) else ranks


def _concatenated(names: tuple[str, ...], per_group: Sequence[Sequence[Layout]], K: int) -> tuple[Layout, ...]:
    """Client by client, the groups' layouts one after another as one layout."""
    return tuple(Layout.build(names, [(b.names, b.m, b.n, b.rank) for lays in per_group for b in lays[k].blocks])
                 for k in range(K))
