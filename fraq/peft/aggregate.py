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

- Everything is validated before any work: the options (one frozen
  :class:`AggregateOptions`), the weights, the output path, then every client directory,
  config and safetensors header (:func:`~fraq.peft.reader.read_header`: names, dtypes and
  shapes, no tensor read), each against client 0's, and for a delta the base model's module
  types; an error names the argument or the file and echoes the value. Values (NaN or
  infinite entries, unequal integer buffers) are checked as each client is read, still
  before anything is written. The same directory given twice (also through a symbolic
  link) is refused rather than silently counted twice: give it a larger weight instead.
- The clients are then read one at a time into the round buffer
  (:func:`fraq.aggregators.capping.open_capped_round`, its ranks from the headers), so the
  server holds the stacks plus one client's adapter, never every client at once; the
  report's energy and error and the certificate read the buffer's stacks, and the
  ``modules_to_save`` average is a running sum in client order (the list's bits).
- Layout, per module: lora_A is (r, in) and lora_B (out, r) for every module, so the
  adapter is written as the factors are. The delta file is written in each module's base
  weight layout, which the base model's module gives (:mod:`fraq.peft.layout`: Conv1D
  and embeddings (in, out), so B @ A is transposed there), never the config's one
  ``fan_in_fan_out``, which peft saves once for modules of different types. BD-LoRA's
  block-diagonal factors are expanded when read (:mod:`fraq.peft.reader`) and written dense.
- What is written per method: the products the aggregator broadcasts to every client,
  concatenated with each product's scale folded into B. FRAQ and FLoRIST write their
  rank-p adapters, FLoRA the whole stack (exact), FedIT the averaged factors (inexact by
  design), FlexLoRA the truncation at the largest client rank (the best adapter it
  sends). What a method cannot write is its class's to say (``not_an_adapter``,
  ``no_delta``, with the reason, asked when the options are checked): FedEx-LoRA's residual is meant for the base weights
  (delta only); FLoRG (one matrix per module) and LoRA-A^2 (stateful alternating rounds)
  cannot start from independent peft LoRA adapters: refused.
- Arithmetic in float64 by default (``compute_dtype``): FRAQ's float32 Gram would drop
  directions below ~1e-3 sigma_1 even at tau = 1. Output in float32 by default (``dtype``);
  a result beyond the output dtype's range is refused, never written as inf.
- Weights are normalized by :func:`fraq._stack.normalized_weights`, which divides by the
  largest first, so any finite weights work (1e308 three times is equal weighting).
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from fraq.aggregators import (AGGREGATORS, AggregationResult, Aggregator, Certificate, ClientUpdate, Downlink, Factors,
                              ProbeCertificate, RoundBuffer, get_aggregator)
from fraq.aggregators.capping import SplitRound, open_capped_round
from fraq.peft.config import CONFIG, PREFIX, output_config
from fraq.peft.layout import LINEAR, module_layouts
from fraq.peft.reader import FACTOR_DTYPES, AdapterHeader, read_adapter, read_header
from fraq.peft.report import AdapterAggregation, ModuleRow, module_row
from fraq.peft.writer import check_adapter_out, check_file_out, write_adapter, write_delta
from fraq._stack import normalized_weights

__all__ = ["AggregateOptions", "aggregate_adapters", "client_paths"]


@dataclass(frozen=True)
class AggregateOptions:
    """Everything :func:`aggregate_adapters` is asked to do besides which files: checked once, here.

    The fields are :func:`aggregate_adapters`' keyword arguments (``options``: the further
    aggregator options). Construction refuses, naming the field and echoing the value, a
    dtype outside float16 / bfloat16 / float32 / float64, a non-bool switch, an unknown
    method, a method whose class cannot write what is asked (``not_an_adapter`` /
    ``no_delta``), and options the method's aggregator refuses (built once to check them).
    """

    method: str = "fraq"
    weights: Sequence[float] | None = None
    tau: float | None = None
    rank: int | None = None
    delta: bool = False
    dtype: torch.dtype = torch.float32
    compute_dtype: torch.dtype = torch.float64
    uniform_rank: bool = False
    overwrite: bool = False
    report: bool = True
    base: str | os.PathLike | None = None
    options: Mapping = field(default_factory=dict)
    certificate: bool = True
    certificate_method: str = "gram"

    def __post_init__(self):
        for name in ("dtype", "compute_dtype"):
            dt = getattr(self, name)
            if not isinstance(dt, torch.dtype) or dt not in FACTOR_DTYPES:
                raise TypeError(f"{name}(={dt!r}) must be one of {', '.join(map(str, FACTOR_DTYPES))}")
        for name in ("delta", "uniform_rank", "overwrite", "report", "certificate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}(={getattr(self, name)!r}) must be a bool")
        if self.certificate_method not in ("gram", "probe"):
            raise ValueError(f"certificate_method(={self.certificate_method!r}) must be 'gram' or 'probe'")
        if self.base is not None and not isinstance(self.base, (str, os.PathLike)):
            raise TypeError(f"base(={self.base!r}) must be a path or None")
        if not isinstance(self.method, str):
            raise TypeError(f"method(={self.method!r}) must be a str")
        if self.method not in AGGREGATORS:
            get_aggregator(self.method)  # the registry's message
        cls = AGGREGATORS[self.method]
        reason = cls.no_delta if self.delta else cls.not_an_adapter
        if reason is not None:
            hint = "; pass delta=True (--delta) for its exact dense update" if cls.no_delta is None else ""
            raise ValueError(f"method(={self.method!r}) cannot write a {'delta' if self.delta else 'peft adapter'}: "
                             f"{reason}{hint}")
        self.aggregator()  # checks the options before any file is read

    @property
    def aggregator_options(self) -> dict:
        """The options the aggregator is built with: ``options``, ``tau`` and ``rank`` when given."""
        extra = {k: v for k, v in (("tau", self.tau), ("rank", self.rank)) if v is not None}
        return {**self.options, **extra}

    def aggregator(self) -> Aggregator:
        return get_aggregator(self.method, **self.aggregator_options)

    @property
    def cdt(self) -> torch.dtype:
        """The arithmetic's dtype: float16 / bfloat16 mean float32."""
        return torch.promote_types(self.compute_dtype, torch.float32)


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
                       overwrite: bool = False, report: bool = True, base: str | os.PathLike | None = None,
                       certificate: bool = True, certificate_method: str = "gram", **options) -> AdapterAggregation:
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
            :func:`fraq.aggregators.get_aggregator` (None: the method's default). A fixed
            ``rank`` is a cap (:meth:`fraq.aggregators.Aggregator.capped`): each module
            keeps min(rank, sum_k r_k, m, n) components, the most its aggregate has.
        delta: write a safetensors file of dense deltas, key ``<module>.weight`` in the
            base weight's layout ((out, in) for nn.Linear; (in, out) for Conv1D and
            (num_embeddings, dim) for embeddings, read from the base model's modules), to
            be added to the base state_dict.
        dtype: dtype of what is written (default float32): float16, bfloat16, float32, float64.
        compute_dtype: dtype of the arithmetic (default float64; float16 / bfloat16 mean
            float32). FRAQ's Gram eigenproblem squares the spectrum, so in float32 a tail of
            directions that together hold less than about r eps32 ~ 1e-5 of the energy
            (each below ~3e-3 sigma_1) is rounding and is dropped even at ``tau=1``; in
            float64 that is ~1e-13 of the energy, below float32 output rounding. Adapters are small, so float64 costs little; pass
            float32 to halve the time on very large ones.
        uniform_rank: pad every module with zero components to the largest rank, so the
            config needs no ``rank_pattern`` (for loaders that ignore it, e.g. serving
            engines); the product is unchanged.
        overwrite: replace an existing ``out``: a non-empty adapter directory (other plain
            files there are kept; subdirectories refuse it) or a delta file. Without it
            such an ``out`` is refused before any work.
        report: compute each row's energy and error against Delta, in float64 from the
            triangular factors of the stacks, about 4 (m + n) (sum_k r_k + p)^2 flops per module.
        base: the base model (a directory) whose module types give the delta's layouts
            (default: the first client's ``base_model_name_or_path``); read only with ``delta``.
        certificate: certify what is written against the exact aggregate
            (:meth:`fraq.aggregators.AggregationResult.certificate`: per module a relative
            error with its float64 rounding bound): the factors as cast to ``dtype``, or
            with ``delta`` the factors' bound plus the cast of each dense entry to ``dtype``
            (u (1 + bound), u its unit roundoff); kept as ``.certificate``; about the cost
            of FRAQ's recompression.
        certificate_method: ``"gram"`` (default) the exact certificate above; ``"probe"``
            a bound that holds with probability 0.999 from 8 Gaussian probes, at about
            8 / R of FRAQ's cost (:func:`fraq.aggregators.certify_probe`).

    Returns:
        :class:`~fraq.peft.report.AdapterAggregation`.

    The written adapter has ``r`` = the most common output rank, ``rank_pattern`` /
    ``alpha_pattern`` with one exact key (:func:`~fraq.peft.config.exact_key`) per other
    module, alpha = rank everywhere and ``use_rslora`` off, so every module's scale is
    exactly 1; the rest of the config (target modules, base model, modules_to_save) is
    the first client's.
    """
    opts = AggregateOptions(method=method, weights=weights, tau=tau, rank=rank, delta=delta, dtype=dtype,
                            compute_dtype=compute_dtype, uniform_rank=uniform_rank, overwrite=overwrite,
                            report=report, base=base, options=options, certificate=certificate,
                            certificate_method=certificate_method)
    paths = client_paths(client_dirs)
    a = normalized_weights(opts.weights, len(paths))
    out = _checked_out(out, opts, paths)
    headers = [read_header(p) for p in paths]  # the check-only pass: configs and safetensors headers, no tensor
    _check_compatible(headers)
    layouts = None
    if opts.delta:
        first = headers[0]
        if first.full:
            raise ValueError(f"{first.file}: modules_to_save tensors {sorted(first.full)[:3]} are full "
                             f"weights, not changes; write an adapter instead of a delta")
        layouts = module_layouts(opts.base, first.config, first.shapes, first.kinds, first.path / CONFIG)
    agg, tensors = _aggregate_impl(headers, a, opts, layouts)
    if out is None:
        return agg
    _write(out, agg, tensors, opts, paths)
    return replace(agg, path=out)


def _checked_out(out: object, opts: AggregateOptions, paths: list[Path]) -> Path | None:
    if out is None:
        return None
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out(={out!r}) must be a path or None")
    out = Path(out)
    if opts.delta:
        check_file_out(out, opts.overwrite, paths, "out")
    else:
        check_adapter_out(out, opts.overwrite, paths)
    return out


def _check_compatible(headers: list[AdapterHeader]) -> None:
    """Every client against client 0, from the headers alone: base model, modules, each
    module's (m, n) and kind, the ``modules_to_save`` keys, shapes and floating-ness."""
    ref = headers[0]
    for c in headers[1:]:
        key = "base_model_name_or_path"
        if c.config.get(key) != ref.config.get(key):
            raise ValueError(f"{c.path / CONFIG}: {key}={c.config.get(key)!r} differs from "
                             f"{ref.path / CONFIG}'s {ref.config.get(key)!r} (if the base models are the "
                             f"same, make the configs agree)")
        if set(c.factor_shapes) != set(ref.factor_shapes):
            missing = sorted(set(ref.factor_shapes) - set(c.factor_shapes))
            extra = sorted(set(c.factor_shapes) - set(ref.factor_shapes))
            raise ValueError(f"{c.file}: adapts different modules from {ref.file}: missing {missing[:5]}, "
                             f"extra {extra[:5]}")
        for m, shape in c.shapes.items():
            if shape != ref.shapes[m] or c.kinds[m] != ref.kinds[m]:
                raise ValueError(f"{c.file}: module {m!r} is {c.kinds[m]} (m, n)=({shape[0]}, {shape[1]}) "
                                 f"but {ref.kinds[m]} ({ref.shapes[m][0]}, {ref.shapes[m][1]}) in {ref.file}")
        if set(c.full) != set(ref.full):
            raise ValueError(f"{c.file}: modules_to_save tensors {sorted(c.full)[:3]} differ from "
                             f"{sorted(ref.full)[:3]} in {ref.file}")
        for key, (dtype, shape) in c.full.items():
            dtype0, shape0 = ref.full[key]
            if shape != shape0 or dtype.is_floating_point != dtype0.is_floating_point:
                raise ValueError(f"{c.file}: {key} is {dtype} {shape}, {dtype0} {shape0} in {ref.file}")


def _aggregate_impl(headers: list[AdapterHeader], a: list[float], opts: AggregateOptions,
                    layouts: dict[str, str] | None) -> tuple[AdapterAggregation, dict[str, torch.Tensor]]:
    """The aggregation of checked clients: (the report, the tensors to write), nothing written.

    The clients are read one at a time into the round buffer (:func:`_read_round`), then
    :func:`_finish` aggregates it."""
    buf, full = _read_round(headers, a, opts)
    return _finish(buf, full, headers, a, opts, layouts)


def _finish(buf: RoundBuffer | SplitRound, full: dict[str, torch.Tensor], headers: list[AdapterHeader],
            a: list[float], opts: AggregateOptions, layouts: dict[str, str] | None
            ) -> tuple[AdapterAggregation, dict[str, torch.Tensor]]:
    """The filled round buffer ``buf`` aggregated: the report's rows and the certificate read
    its stacks, no client's upload. The tensors are the adapter's (factors in ``opts.dtype``,
    ``full`` the ``modules_to_save`` average) or, with ``layouts``, the dense deltas in each
    module's base layout."""
    first = headers[0]
    exact, certify = _factors(buf, buf.aggregate(), opts.cdt)
    factors = {m: (_cast(f"module {m!r}: lora_B", B, opts.dtype), _cast(f"module {m!r}: lora_A", A, opts.dtype))
               for m, (B, A) in exact.items()}
    cert = None
    if opts.certificate:  # what is written: the cast factors, or the delta's cast entries
        cert = certify(exact if layouts is not None else factors, opts.certificate_method)
        if layouts is not None:
            cert = _with_cast(cert, opts.dtype)
    stacks = buf.exact_aggregate() if opts.report else None
    rows = [module_row(m, tuple(h.ranks[m] for h in headers), None if stacks is None else stacks.factors(m), B, A)
            for m, (B, A) in factors.items()]
    del stacks
    if opts.uniform_rank and not opts.delta:
        p = max(B.shape[1] for B, _ in factors.values())
        factors = {m: (torch.nn.functional.pad(B, (0, p - B.shape[1])),
                       torch.nn.functional.pad(A, (0, 0, 0, p - A.shape[0])))
                   for m, (B, A) in factors.items()}
        rows = [ModuleRow(**{**vars(r), "rank": p, "params": (r.shape[0] + r.shape[1]) * p}) for r in rows]
    if layouts is not None:
        tensors = {f"{m}.weight": _cast(f"module {m!r}: delta", _dense(B, A, layouts[m]), opts.dtype)
                   for m, (B, A) in exact.items()}
        config = {}
    else:
        tensors = _adapter_tensors(first, factors, full)
        config = output_config(first.config, {m: B.shape[1] for m, (B, _) in factors.items()})
    agg = AdapterAggregation(opts.method, opts.aggregator_options, tuple(h.path for h in headers), tuple(a), factors,
                             full, tuple(rows), None, opts.delta, config, cert)
    return agg, tensors


def _read_round(headers: list[AdapterHeader], a: list[float], opts: AggregateOptions
                ) -> tuple[RoundBuffer | SplitRound, dict[str, torch.Tensor]]:
    """The round buffer with every client in, read one at a time (its tensors, then its
    factors in the compute dtype, released once copied in), and the ``modules_to_save``
    average, summed as the clients arrive.

    Each client is read against its checked header (:func:`~fraq.peft.reader.read_adapter`
    refuses a file changed since), so what was opened for is what arrives. The average is
    the running sum ``acc = acc + a_k t_k`` in float64 from ``acc = 0``, in client order:
    the operations, and so the bits, of ``sum(a_k t_k)`` over a list of every client."""
    first = headers[0]
    ranks = {m: tuple(h.ranks[m] for h in headers) for m in first.factor_shapes}
    buf = open_capped_round(opts.aggregator(), first.shapes, clients=len(headers), ranks=ranks, dtype=opts.cdt)
    sums: dict[str, torch.Tensor | int] = {}
    fixed: dict[str, torch.Tensor] = {}  # client 0's non-floating tensors, which every client must equal
    for k, (header, ak) in enumerate(zip(headers, a)):
        c = read_adapter(header.path, header)
        update = ClientUpdate({m: (B.to(opts.cdt), A.to(opts.cdt)) for m, (B, A) in c.factors.items()},
                              scale=c.scales, weight=ak)
        buf.add(update, client=k)
        del update
        for key, t in c.full.items():
            if not t.is_floating_point():
                if key not in fixed:
                    fixed[key] = t.clone()  # its own storage: the rest of client 0's file is let go
                elif not torch.equal(t, fixed[key]):
                    raise ValueError(f"{first.file}: non-floating tensor {key} differs between clients")
                continue
            sums[key] = sums.get(key, 0) + ak * t.double()
        del c
    full = {key: fixed[key] if key in fixed else _cast(f"{key}: the average", sums[key], opts.dtype)
            for key in first.full}
    return buf, full


def _write(out: Path, agg: AdapterAggregation, tensors: dict[str, torch.Tensor], opts: AggregateOptions,
           paths: list[Path]) -> None:
    """The write step: the delta file, or the adapter directory, swapped in whole."""
    if opts.delta:
        plain = {k: v for k, v in agg.options.items() if isinstance(v, (bool, int, float, str, type(None)))}
        meta = {"format": "pt", "fraq": json.dumps({"method": agg.method, "options": plain,
                                                    "weights": list(agg.weights),
                                                    "clients": [str(c) for c in agg.clients]}, allow_nan=False)}
        write_delta(out, tensors, meta, opts.overwrite, paths)
    else:
        write_adapter(out, agg.config, tensors, opts.overwrite, paths)


def _factors(buf: RoundBuffer | SplitRound, result: AggregationResult, cdt: torch.dtype):
    """module -> the (B, A) to write, scale folded into B, in the compute dtype ``cdt``; and
    ``certify(factors, method)``: the certificate ("gram" or "probe") of an adapter with
    these factors (scale 1) against the exact aggregate the round buffer ``buf`` holds, as
    every client's update (the one adapter written)."""
    def certify(factors: Mapping[str, tuple[torch.Tensor, torch.Tensor]], method: str) -> Certificate:
        downs = {m: Downlink(sent=(B, A), merge=(Factors(B, A),)) for m, (B, A) in factors.items()}
        return replace(result, downlinks=(downs,) * result.clients).certificate(buf, method=method)
    factors = {}
    for m in result.modules:
        d = max((result.downlinks[k][m] for k in range(result.clients)),
                key=lambda d: sum(f.rank for f in d.merge) + (d.start.rank if d.start else 0))
        terms = list(d.merge) + ([d.start] if d.start is not None else [])
        if any(f.B is None for f in terms):
            raise ValueError(f"method {result.method!r} returned a single-matrix adapter for {m!r}; "
                             f"it cannot be written as lora_A / lora_B")
        B = torch.cat([f.B.to(cdt) * f.scale for f in terms], dim=-1)
        A = torch.cat([f.A.to(cdt) for f in terms], dim=-2)
        if B.shape[-1] == 0:  # a zero aggregate: rank 1 with zero factors still loads
            B, A = B.new_zeros(B.shape[0], 1), A.new_zeros(1, A.shape[1])
        factors[m] = (B, A)
    return factors, certify


def _with_cast(cert: Certificate, dtype: torch.dtype) -> Certificate:
    """``cert`` of the factors, for their dense product written in ``dtype``: rounding each
    entry errs by at most u |entry| (u = eps / 2 of ``dtype``), so the written delta's
    distance grows by at most u ||G||_F <= u ||S||_F (1 + bound): ``bound + u (1 + bound)``."""
    u = torch.finfo(dtype).eps / 2
    modules = {m: replace(c, bound=c.bound + u * (1.0 + c.bound)) for m, c in cert.items()}
    if isinstance(cert, ProbeCertificate):
        return ProbeCertificate(modules, probes=cert.probes, delta=cert.delta, seed=cert.seed)
    return Certificate(modules)


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


def _dense(B: torch.Tensor, A: torch.Tensor, layout: str) -> torch.Tensor:
    """B @ A in the compute dtype of the factors, in the base weight's ``layout``
    (:mod:`fraq.peft.layout`: (out, in) for nn.Linear, transposed for Conv1D and embeddings)."""
    B, A = B.to(torch.promote_types(B.dtype, torch.float32)), A.to(torch.promote_types(A.dtype, torch.float32))
    return (B @ A) if layout == LINEAR else (A.mT @ B.mT)


def _adapter_tensors(first: AdapterHeader, factors, full) -> dict[str, torch.Tensor]:
    tensors = {}
    for m, (B, A) in factors.items():
        if first.kinds[m] == "embedding":
            tensors[f"{PREFIX}{m}.lora_embedding_A"], tensors[f"{PREFIX}{m}.lora_embedding_B"] = A, B
        else:
            tensors[f"{PREFIX}{m}.lora_A.weight"], tensors[f"{PREFIX}{m}.lora_B.weight"] = A, B
    tensors.update(full)
    return tensors
