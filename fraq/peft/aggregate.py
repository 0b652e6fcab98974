"""K peft LoRA adapter directories in, one aggregated peft adapter (or a weight delta) out.

>>> from fraq.peft import aggregate_adapters
>>> agg = aggregate_adapters(["c0", "c1", "c2"], "out", weights=[120, 80, 40], tau=0.95)  # doctest: +SKIP
>>> print(agg.table())                                                                    # doctest: +SKIP

Client k's update of a module is :math:`s_k B_k A_k` (:mod:`fraq.peft.reader`). The
clients become :class:`~fraq.aggregators.ClientUpdate` s, any registered aggregator runs
on them, and the factors it broadcasts are written (:mod:`fraq.peft.writer`) as one peft
adapter whose every module has scale 1: the per-module ranks go to ``rank_pattern`` and
``alpha_pattern`` sets alpha = rank, with ``use_rslora`` off. ``PeftModel.from_pretrained(base,
out_dir)`` loads it.

Decisions:

- Everything is validated before any work: the options, the weights, the output path,
  then every client directory and config; an error names the argument or the file and
  echoes the value. The same directory given twice (also through a symbolic link) is
  refused rather than silently counted twice: give it a larger weight instead.
- Layout: ``fan_in_fan_out`` (GPT-2's Conv1D) does not change the factors, lora_A is
  still (r, in) and lora_B (out, r); only the base weight is stored (in, out), so the
  delta file transposes B @ A there. Embedding LoRA is supported the same way (peft's
  embedding delta is (B @ A)^T, the (num_embeddings, dim) layout of the weight).
- What is written per method: the products the aggregator broadcasts to every client,
  concatenated with each product's scale folded into B. FRAQ and FLoRIST write their
  rank-p adapters, FLoRA the whole stack (exact), FedIT the averaged factors (inexact by
  design), FlexLoRA the truncation at the largest client rank (the best adapter it
  sends). What a method cannot write is its class's to say (``not_an_adapter``,
  ``no_delta``, with the reason): FedEx-LoRA's residual is meant for the base weights
  (delta only); FLoRG (one matrix per module) and LoRA-A^2 (stateful alternating rounds)
  cannot start from independent peft LoRA adapters: refused.
- Arithmetic in float64 by default (``compute_dtype``): FRAQ's float32 Gram would drop
  directions below ~1e-3 sigma_1 even at tau = 1. Output in float32 by default (``dtype``);
  a result beyond the output dtype's range is refused, never written as inf.
- Weights are divided by their largest before normalizing, so any finite weights work
  (1e308 three times is equal weighting, not an overflow).
- Per-module ranks go to ``rank_pattern``; ``uniform_rank`` pads to the largest rank
  with zeros instead, for loaders that ignore the pattern.
- A module whose aggregate has rank 0 (all clients zero there) is written with rank 1
  and zero factors, so the adapter loads with every target module present.
- ``modules_to_save`` tensors (full weights, e.g. a classifier head) are averaged with the
  same weights a_k (FedAvg) and written unchanged in name; the delta file refuses them,
  since they are replacements, not changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import torch

from fraq._validation import check_client_numbers
from fraq.aggregators import AGGREGATORS, Aggregator, ClientUpdate, get_aggregator
from fraq.peft.config import CONFIG, PREFIX, output_config
from fraq.peft.reader import FACTOR_DTYPES, ClientAdapter, read_adapter
from fraq.peft.report import AdapterAggregation, ModuleRow, module_row
from fraq.peft.writer import check_adapter_out, check_file_out, write_adapter, write_delta
from fraq._stack import normalized_weights

__all__ = ["NOT_AN_ADAPTER", "NO_DELTA", "aggregate_adapters", "client_paths"]

class _Refusals(Mapping):
    """Registry name -> why that method cannot write a peft adapter (or a delta), read from
    the classes in :data:`fraq.aggregators.AGGREGATORS` whenever it is looked at."""

    def __init__(self, attribute: str):
        self._attribute = attribute

    def _reasons(self) -> dict[str, str]:
        return {name: getattr(cls, self._attribute) for name, cls in AGGREGATORS.items()
                if getattr(cls, self._attribute) is not None}

    def __getitem__(self, name: str) -> str:
        return self._reasons()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reasons())

    def __len__(self) -> int:
        return len(self._reasons())

    def __repr__(self) -> str:
        return repr(self._reasons())


NOT_AN_ADAPTER: Mapping[str, str] = _Refusals("not_an_adapter")
"""Methods that cannot write a peft adapter, and why (each class's ``not_an_adapter``)."""

NO_DELTA: Mapping[str, str] = _Refusals("no_delta")
"""Methods that cannot write a delta either (each class's ``no_delta``)."""


def client_paths(client_dirs: object) -> list[Path]:
    """The client directories as paths, refusing an empty list and the same directory twice
    (compared resolved, so a symbolic link to another argument is caught)."""
    if isinstance(client_dirs, (str, bytes, os.PathLike)) or not isinstance(client_dirs, Sequence):
        raise TypeError(f"client_dirs must be a sequence of adapter directories, got {client_dirs!r}")
    if not client_dirs:
        raise ValueError("client_dirs is empty: aggregation needs at least one adapter")
    paths, seen = [], {}
    for k, d in enumerate(client_dirs):
        if not isinstance(d, (str, os.PathLike)):
            raise TypeError(f"client_dirs[{k}](={d!r}) must be a path")
        p = Path(d)
        real = p.resolve()
        if real in seen:
            j = seen[real]
            raise ValueError(f"client_dirs[{j}](={str(client_dirs[j])!r}) and client_dirs[{k}](={str(d)!r}) are the "
                             f"same directory ({real}); pass each adapter once (a larger weight counts it more)")
        seen[real] = k
        paths.append(p)
    return paths


def aggregate_adapters(client_dirs: Sequence[str | os.PathLike], out: str | os.PathLike | None = None, *,
                       weights: Sequence[float] | None = None, method: str = "fraq", tau: float | None = None,
                       rank: int | None = None, delta: bool = False, dtype: torch.dtype = torch.float32,
                       compute_dtype: torch.dtype = torch.float64, uniform_rank: bool = False,
                       overwrite: bool = False, report: bool = True, **options) -> AdapterAggregation:
    r"""Aggregate K peft LoRA adapters into one peft adapter directory (or one delta file).

    Every module's exact aggregate is :math:`\Delta = \sum_k a_k s_k B_k A_k`, with
    :math:`a_k = n_k / \sum_j n_j` and s_k the scale peft applies to client k's module.
    ``method`` (a :data:`fraq.aggregators.AGGREGATORS` name) decides what is written; with
    FRAQ at ``tau`` the adapter is a best rank-p approximation of Delta, p per module by
    the energy rule, and at ``tau=1`` it reproduces Delta to rounding.

    Args:
        client_dirs: K distinct peft adapter directories of the same base model and modules.
        out: the output adapter directory (it appears whole: built beside, then swapped in),
            the delta file with ``delta``, or None to write nothing. Never one of the
            inputs, inside one, or containing one.
        weights: K non-negative finite data weights n_k (default equal), normalized inside.
        method: aggregator name; ``tau`` / ``rank`` and other ``options`` go to
            :func:`fraq.aggregators.get_aggregator` (None: the method's default). FRAQ's
            ``rank`` is a cap: each module keeps min(rank, sum_k r_k, m, n) components.
        delta: write a safetensors file of dense deltas, key ``<module>.weight`` in the
            base weight's layout ((out, in); (in, out) for ``fan_in_fan_out`` Conv1D and
            (num_embeddings, dim) for embeddings), to be added to the base state_dict.
        dtype: dtype of what is written (default float32): float16, bfloat16, float32, float64.
        compute_dtype: dtype of the arithmetic (default float64; float16 / bfloat16 mean
            float32). FRAQ's Gram eigenproblem squares the spectrum, so in float32 it takes
            directions below about sqrt(r eps32) sigma_1 ~ 1e-3 sigma_1 as rounding noise
            and drops them even at ``tau=1``; in float64 that floor is ~1e-7 sigma_1, below
            float32 output rounding. Adapters are small, so float64 costs little; pass
            float32 to halve the time on very large ones.
        uniform_rank: pad every module with zero components to the largest rank, so the
            config needs no ``rank_pattern`` (for loaders that ignore it, e.g. serving
            engines); the product is unchanged.
        overwrite: replace an existing ``out``: a non-empty adapter directory (other plain
            files there are kept; subdirectories refuse it) or a delta file. Without it
            such an ``out`` is refused before any work.
        report: compute each row's energy and error against Delta, in float64 from the
            triangular factors of the stacks, about 4 (m + n) (sum_k r_k + p)^2 flops per module.

    Returns:
        :class:`~fraq.peft.report.AdapterAggregation`.

    The written adapter has ``r`` = the most common output rank, ``rank_pattern`` /
    ``alpha_pattern`` with one exact key (:func:`~fraq.peft.config.exact_key`) per other
    module, alpha = rank everywhere and ``use_rslora`` off, so every module's scale is
    exactly 1; the rest of the config (target modules, base model, modules_to_save) is
    the first client's.
    """
    paths = client_paths(client_dirs)
    for name, dt, allowed in (("dtype", dtype, FACTOR_DTYPES), ("compute_dtype", compute_dtype, FACTOR_DTYPES)):
        if not isinstance(dt, torch.dtype) or dt not in allowed:
            raise TypeError(f"{name}(={dt!r}) must be one of {', '.join(map(str, allowed))}")
    for name, flag in (("delta", delta), ("uniform_rank", uniform_rank), ("overwrite", overwrite),
                       ("report", report)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}(={flag!r}) must be a bool")
    if not isinstance(method, str):
        raise TypeError(f"method(={method!r}) must be a str")
    if method not in AGGREGATORS:
        get_aggregator(method)  # the registry's message
    cls = AGGREGATORS[method]
    reason = cls.no_delta if delta else cls.not_an_adapter
    if reason is not None:
        hint = "; pass delta=True (--delta) for its exact dense update" if cls.no_delta is None else ""
        raise ValueError(f"method(={method!r}) cannot write a {'delta' if delta else 'peft adapter'}: {reason}{hint}")
    if tau is not None:
        options["tau"] = tau
    if rank is not None:
        options["rank"] = rank
    agg = get_aggregator(method, **options)  # checks the options before any file is read
    a = _weights(weights, len(paths))
    if out is not None:
        if not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"out(={out!r}) must be a path or None")
        out = Path(out)
        if delta:
            check_file_out(out, overwrite, paths, "out")
        else:
            check_adapter_out(out, overwrite, paths)
    clients = [read_adapter(p) for p in paths]
    _check_compatible(clients)
    if delta and clients[0].full:
        raise ValueError(f"{clients[0].file}: modules_to_save tensors {sorted(clients[0].full)[:3]} are full "
                         f"weights, not changes; write an adapter instead of a delta")

    cdt = torch.promote_types(compute_dtype, torch.float32)
    exact_factors = _aggregate_impl(clients, a, agg, cdt)
    factors = {m: (_cast(f"module {m!r}: lora_B", B, dtype), _cast(f"module {m!r}: lora_A", A, dtype))
               for m, (B, A) in exact_factors.items()}
    rows = [module_row(m, clients, a, B, A, report) for m, (B, A) in factors.items()]
    if uniform_rank and not delta:
        p = max(B.shape[1] for B, _ in factors.values())
        factors = {m: (torch.nn.functional.pad(B, (0, p - B.shape[1])),
                       torch.nn.functional.pad(A, (0, 0, 0, p - A.shape[0])))
                   for m, (B, A) in factors.items()}
        rows = [ModuleRow(**{**vars(r), "rank": p, "params": (r.shape[0] + r.shape[1]) * p}) for r in rows]
    full = _average_full(clients, a, dtype)
    config = {} if delta else output_config(clients[0].config, {m: B.shape[1] for m, (B, _) in factors.items()})
    if out is not None:
        if delta:
            tensors = {f"{m}.weight": _cast(f"module {m!r}: delta", _dense(B, A, clients[0].transposed(m)), dtype)
                       for m, (B, A) in exact_factors.items()}
            plain = {k: v for k, v in options.items() if isinstance(v, (bool, int, float, str, type(None)))}
            meta = {"format": "pt", "fraq": json.dumps({"method": method, "options": plain, "weights": a,
                                                        "clients": [str(c.path) for c in clients]})}
            write_delta(out, tensors, meta, overwrite, paths)
        else:
            write_adapter(out, config, _adapter_tensors(clients[0], factors, full), overwrite, paths)
    return AdapterAggregation(method, dict(options), tuple(c.path for c in clients), tuple(a), factors, full,
                              tuple(rows), out, delta, config)


def _weights(weights: object, count: int) -> list[float]:
    """Normalized a_k; divided by the largest first, so the sum cannot overflow."""
    if weights is None:
        return normalized_weights(None, count)
    w = check_client_numbers("weights", weights, count, nonnegative=True)
    top = max(w)
    return normalized_weights([x / top for x in w] if top > 0 else w, count)


def _check_compatible(clients: list[ClientAdapter]) -> None:
    ref = clients[0]
    for c in clients[1:]:
        for key in ("base_model_name_or_path", "fan_in_fan_out"):
            if c.config.get(key) != ref.config.get(key):
                raise ValueError(f"{c.path / CONFIG}: {key}={c.config.get(key)!r} differs from "
                                 f"{ref.path / CONFIG}'s {ref.config.get(key)!r} (if the base models are the "
                                 f"same, make the configs agree)")
        if set(c.factors) != set(ref.factors):
            missing, extra = sorted(set(ref.factors) - set(c.factors)), sorted(set(c.factors) - set(ref.factors))
            raise ValueError(f"{c.file}: adapts different modules from {ref.file}: missing {missing[:5]}, "
                             f"extra {extra[:5]}")
        for m, (B, A) in c.factors.items():
            B0, A0 = ref.factors[m]
            if (B.shape[0], A.shape[1]) != (B0.shape[0], A0.shape[1]) or c.kinds[m] != ref.kinds[m]:
                raise ValueError(f"{c.file}: module {m!r} is {c.kinds[m]} (m, n)=({B.shape[0]}, {A.shape[1]}) "
                                 f"but {ref.kinds[m]} ({B0.shape[0]}, {A0.shape[1]}) in {ref.file}")
        if set(c.full) != set(ref.full):
            raise ValueError(f"{c.file}: modules_to_save tensors {sorted(c.full)[:3]} differ from "
                             f"{sorted(ref.full)[:3]} in {ref.file}")
        for key, t in c.full.items():
            if t.shape != ref.full[key].shape or t.is_floating_point() != ref.full[key].is_floating_point():
                raise ValueError(f"{c.file}: {key} is {t.dtype} {tuple(t.shape)}, "
                                 f"{ref.full[key].dtype} {tuple(ref.full[key].shape)} in {ref.file}")


def _aggregate_impl(clients, a, agg: Aggregator, cdt) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """module -> the (B, A) to write, scale folded into B, in the compute dtype ``cdt``."""
    updates = [ClientUpdate({m: (B.to(cdt), A.to(cdt)) for m, (B, A) in c.factors.items()},
                            scale=c.scales, weight=ak) for c, ak in zip(clients, a)]
    downlinks = _run(agg, updates)
    factors = {}
    for m in clients[0].factors:
        d = max(downlinks[m], key=lambda d: sum(f.rank for f in d.merge) + (d.start.rank if d.start else 0))
        terms = list(d.merge) + ([d.start] if d.start is not None else [])
        if any(f.B is None for f in terms):
            raise ValueError(f"method {agg.name!r} returned a single-matrix adapter for {m!r}; "
                             f"it cannot be written as lora_A / lora_B")
        B = torch.cat([f.B.to(cdt) * f.scale for f in terms], dim=-1)
        A = torch.cat([f.A.to(cdt) for f in terms], dim=-2)
        if B.shape[-1] == 0:  # a zero aggregate: rank 1 with zero factors still loads
            B, A = B.new_zeros(B.shape[0], 1), A.new_zeros(1, A.shape[1])
        factors[m] = (B, A)
    return factors


def _run(agg: Aggregator, updates) -> dict[str, list]:
    """module -> one Downlink per client. Modules are aggregated by ``agg.capped(limit)``,
    limit = min(sum_k r_k, m, n) the most components the module's aggregate can have (a
    fixed output rank above it is capped there); modules that get the same aggregator
    are aggregated in one call."""
    by_limit: dict[int, Aggregator] = {}
    calls: dict[int, tuple[Aggregator, list[str]]] = {}
    for m in updates[0].factors:
        B0, A0 = updates[0].factors[m]
        limit = min(sum(u.factors[m][1].shape[0] for u in updates), B0.shape[0], A0.shape[1])
        if limit not in by_limit:
            by_limit[limit] = agg.capped(limit)
        calls.setdefault(id(by_limit[limit]), (by_limit[limit], []))[1].append(m)
    out = {}
    for capped, mods in calls.values():
        sub = updates if len(calls) == 1 else [
            ClientUpdate({m: u.factors[m] for m in mods}, u.scale, u.weight) for u in updates]
        result = capped.aggregate(sub)
        out.update({m: [result.downlinks[k][m] for k in range(result.clients)] for m in mods})
    return out


def _cast(what: str, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in the output ``dtype``, contiguous; inf or NaN is refused, never written."""
    out = t.to(dtype).contiguous()
    if bool(torch.isfinite(out).all()):
        return out
    if bool(torch.isfinite(t).all()):
        raise ValueError(f"{what}: the result reaches {float(t.abs().max()):.3g}, beyond {dtype}'s range "
                         f"(max {torch.finfo(dtype).max:.3g}); write a wider dtype (dtype=torch.float32, --dtype float32)")
    raise ValueError(f"{what}: the result is not finite in the compute dtype {t.dtype}; the clients' factors are "
                     f"too large for it: compute in float64 (compute_dtype=torch.float64, --compute-dtype float64)")


def _average_full(clients, a, dtype):
    out = {}
    for key, t0 in clients[0].full.items():
        if not t0.is_floating_point():
            if any(not torch.equal(c.full[key], t0) for c in clients[1:]):
                raise ValueError(f"{clients[0].file}: non-floating tensor {key} differs between clients")
            out[key] = t0
            continue
        acc = sum(ak * c.full[key].double() for c, ak in zip(clients, a))
        out[key] = _cast(f"{key}: the average", acc, dtype)
    return out


def _dense(B: torch.Tensor, A: torch.Tensor, transposed: bool) -> torch.Tensor:
    """B @ A in the compute dtype of the factors, in the base weight's layout."""
    B, A = B.to(torch.promote_types(B.dtype, torch.float32)), A.to(torch.promote_types(A.dtype, torch.float32))
    return (A.mT @ B.mT) if transposed else (B @ A)


def _adapter_tensors(first: ClientAdapter, factors, full) -> dict[str, torch.Tensor]:
    tensors = {}
    for m, (B, A) in factors.items():
        if first.kinds[m] == "embedding":
            tensors[f"{PREFIX}{m}.lora_embedding_A"], tensors[f"{PREFIX}{m}.lora_embedding_B"] = A, B
        else:
            tensors[f"{PREFIX}{m}.lora_A.weight"], tensors[f"{PREFIX}{m}.lora_B.weight"] = A, B
    tensors.update(full)
    return tensors
