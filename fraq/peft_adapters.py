"""peft LoRA adapter directories in, one aggregated peft adapter (or a weight delta) out.

>>> from fraq.peft_adapters import aggregate_adapters
>>> agg = aggregate_adapters(["c0", "c1", "c2"], "out", weights=[120, 80, 40], tau=0.95)  # doctest: +SKIP
>>> print(agg.table())                                                                    # doctest: +SKIP

A client directory holds peft's ``adapter_config.json`` and ``adapter_model.safetensors``
(``save_pretrained``). Each saved module ``base_model.model.<module>`` has ``lora_A.weight``
(r_k, n) and ``lora_B.weight`` (m, r_k) (embeddings: ``lora_embedding_A`` (r_k, n) and
``lora_embedding_B`` (m, r_k)), and client k's update of that module is
:math:`s_k B_k A_k` with :math:`s_k = \\alpha_k / r_k`, or :math:`\\alpha_k / \\sqrt{r_k}` with
``use_rslora``, where r_k and alpha_k come from ``rank_pattern`` / ``alpha_pattern`` when a
key matches the module (:func:`pattern_key`). The clients become
:class:`~fraq.aggregators.ClientUpdate` s, any registered aggregator runs on them, and the
factors it broadcasts are written as one peft adapter whose every module has scale 1: the
per-module ranks go to ``rank_pattern`` and ``alpha_pattern`` sets alpha = rank, with
``use_rslora`` off. ``PeftModel.from_pretrained(base, out_dir)`` loads it.

Reading and writing need only ``safetensors`` and ``json``; peft and transformers are
imported only by :func:`example_clients`. Pattern matching is a copy of peft 0.21.2's
``peft.utils.other.get_pattern_key`` (tests check the scales against peft's live layers).

Decisions:

- Layout: ``fan_in_fan_out`` (GPT-2's Conv1D) does not change the factors, lora_A is
  still (r, in) and lora_B (out, r); only the base weight is stored (in, out), so the
  delta file transposes B @ A there. Embedding LoRA is supported the same way (peft's
  embedding delta is (B @ A)^T, the (num_embeddings, dim) layout of the weight).
- What is written per method: the products the aggregator broadcasts to every client,
  concatenated with each product's scale folded into B. FRAQ and FLoRIST write their
  rank-p adapters, FLoRA the whole stack (exact), FedIT the averaged factors (inexact by
  design), FlexLoRA the truncation at the largest client rank (the best adapter it
  sends). FedEx-LoRA's residual is meant for the base weights: delta only. FLoRG (one
  matrix per module) and LoRA-A^2 (stateful alternating rounds) cannot start from
  independent peft LoRA adapters: refused.
- Arithmetic in float64 by default (``compute_dtype``): FRAQ's float32 Gram would drop
  directions below ~1e-3 sigma_1 even at tau = 1. Output in float32 by default (``dtype``).
- Per-module ranks go to ``rank_pattern``; ``uniform_rank`` pads to the largest rank
  with zeros instead, for loaders that ignore the pattern.
- A module whose aggregate has rank 0 (all clients zero there) is written with rank 1
  and zero factors, so the adapter loads with every target module present.
- ``modules_to_save`` tensors (full weights, e.g. a classifier head) are averaged with the
  same weights a_k (FedAvg) and written unchanged in name; the delta file refuses them,
  since they are replacements, not changes.
- Refused, naming the file: non-LoRA peft types, DoRA, ``lora_bias``, trainable tokens,
  ``target_parameters``, conv LoRA (4-D factors), adapters whose initialization rewrites
  the base weights (PiSSA, OLoRA, CorDA, LoftQ), pickle-only ``adapter_model.bin``.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fraq._files import default_mode
from fraq.aggregators import ClientUpdate, get_aggregator
from fraq.stack import normalized_weights

__all__ = [
    "AdapterAggregation",
    "ClientAdapter",
    "ModuleRow",
    "aggregate_adapters",
    "config_rank_alpha",
    "example_clients",
    "pattern_key",
    "read_adapter",
]

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
_SUFFIXES = {".lora_A.weight": ("A", "linear"), ".lora_B.weight": ("B", "linear"),
             ".lora_embedding_A": ("A", "embedding"), ".lora_embedding_B": ("B", "embedding")}
_BASE_REWRITING_INITS = ("pissa", "olora", "corda", "loftq")

NOT_AN_ADAPTER = {
    "fedex-lora": "its exact residual is merged into the base weights, it is not a LoRA adapter",
    "florg": "FLoRG clients train one matrix per module, not peft's (lora_A, lora_B)",
    "lora-a2": "LoRA-A^2 alternates frozen factors over rounds with server state; "
               "independently trained peft adapters do not fit it",
}
"""Methods that cannot write a peft adapter, and why."""

NO_DELTA = {k: v for k, v in NOT_AN_ADAPTER.items() if k != "fedex-lora"}
"""Methods that cannot write a delta either."""


def pattern_key(patterns: Sequence[str], module: str) -> str | None:
    """The first key of ``patterns`` that peft's ``rank_pattern`` / ``alpha_pattern`` match
    applies to ``module``, or None.

    peft 0.21.2 (``peft.utils.other.get_pattern_key``) takes a key as a regular expression
    that must match a dotted suffix of the full module name: ``re.match(rf"(.*\\.)?({key})$",
    module)``. So ``"query"`` matches every ``*.query``, and ``"layer.1.query"`` matches
    ``encoder.layer.1.query`` but not ``encoder.layer.11.query``.
    """
    for key in patterns:
        if re.match(rf"(.*\.)?({key})$", module):
            return key
    return None


def exact_key(module: str) -> str:
    """A ``rank_pattern`` key that :func:`pattern_key` matches to ``module`` and nothing else.

    ``^`` after peft's optional ``(.*\\.)?`` prefix only matches at the start of the name.
    """
    return "^" + re.escape(module)


@dataclass(frozen=True)
class ClientAdapter:
    """One client's saved adapter.

    Attributes:
        path: the directory.
        config: ``adapter_config.json`` as a dict.
        factors: module -> ``(lora_B (m, r), lora_A (r, n))`` as stored.
        scales: module -> the LoRA scale peft applies, alpha / r or alpha / sqrt(r).
        kinds: module -> ``"linear"`` or ``"embedding"``.
        full: other tensors (``modules_to_save``), saved key -> tensor.
    """

    path: Path
    config: dict
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]
    scales: dict[str, float]
    kinds: dict[str, str]
    full: dict[str, torch.Tensor]

    @property
    def file(self) -> Path:
        return self.path / WEIGHTS


def read_adapter(path: str | os.PathLike) -> ClientAdapter:
    """Read and check one peft LoRA adapter directory; errors name the file and module."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory (expected a peft adapter directory with {CONFIG} and {WEIGHTS})")
    cfg_file, file = path / CONFIG, path / WEIGHTS
    if not cfg_file.is_file():
        raise ValueError(f"{cfg_file}: missing; {path} is not a peft adapter directory")
    if not file.is_file():
        if (path / "adapter_model.bin").is_file():
            raise ValueError(f"{path / 'adapter_model.bin'}: pickle weights are not read (they can run code); "
                             f"convert to safetensors: PeftModel.from_pretrained(base, dir).save_pretrained(dir)")
        raise ValueError(f"{file}: missing")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{cfg_file}: not valid JSON ({e})") from None
    _check_config(cfg_file, cfg)
    try:
        tensors = load_file(file)
    except Exception as e:  # safetensors raises its own SafetensorError
        raise ValueError(f"{file}: not a readable safetensors file ({e})") from None
    parts: dict[str, dict[str, torch.Tensor]] = {}
    kinds: dict[str, str] = {}
    full: dict[str, torch.Tensor] = {}
    for key, t in tensors.items():
        if not key.startswith(PREFIX):
            raise ValueError(f"{file}: tensor {key!r} does not start with {PREFIX!r}; not a peft adapter file")
        suffix = next((s for s in _SUFFIXES if key.endswith(s)), None)
        if suffix is None:
            if ".lora_" in key:
                raise ValueError(f"{file}: tensor {key!r} is not a plain LoRA factor (lora_bias, DoRA magnitude "
                                 f"or another variant); only lora_A / lora_B are aggregated")
            full[key] = t
            continue
        module = key[len(PREFIX):-len(suffix)]
        which, kind = _SUFFIXES[suffix]
        if kinds.setdefault(module, kind) != kind:
            raise ValueError(f"{file}: module {module!r} has both linear and embedding LoRA factors")
        if t.dim() != 2:
            raise ValueError(f"{file}: module {module!r}: {key} has shape {tuple(t.shape)}; only 2-D factors "
                             f"(linear and embedding LoRA) are supported, not conv LoRA")
        if not t.is_floating_point():
            raise ValueError(f"{file}: module {module!r}: {key} has dtype {t.dtype}, not floating")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{file}: module {module!r}: {key} contains NaN or infinity")
        parts.setdefault(module, {})[which] = t
    if not parts:
        raise ValueError(f"{file}: no LoRA factors (lora_A / lora_B) found")
    factors, scales = {}, {}
    for module, p in parts.items():
        if set(p) != {"A", "B"}:
            missing = "lora_B" if "B" not in p else "lora_A"
            raise ValueError(f"{file}: module {module!r} has no {missing}")
        B, A = p["B"], p["A"]
        if B.shape[1] != A.shape[0]:
            raise ValueError(f"{file}: module {module!r}: lora_B {tuple(B.shape)} and lora_A {tuple(A.shape)} "
                             f"do not share a rank")
        scales[module] = _scale(cfg_file, cfg, module, A.shape[0])
        factors[module] = (B, A)
    return ClientAdapter(path, cfg, factors, scales, kinds, full)


def _check_config(where: Path, cfg: dict) -> None:
    if cfg.get("peft_type") != "LORA":
        raise ValueError(f"{where}: peft_type(={cfg.get('peft_type')!r}) is not 'LORA'")
    refuse = {
        "use_dora": "DoRA's magnitude normalization is not a sum of low-rank products",
        "lora_bias": "lora_B biases are not part of B @ A",
        "trainable_token_indices": "trainable tokens are not LoRA factors",
        "target_parameters": "LoRA on nn.Parameter (target_parameters) is not supported",
        "layer_replication": "replicated layers share weights across modules",
    }
    for key, why in refuse.items():
        if cfg.get(key):
            raise ValueError(f"{where}: {key}={cfg[key]!r} is not supported: {why}")
    init = str(cfg.get("init_lora_weights", True)).lower()
    if init.startswith(_BASE_REWRITING_INITS):
        raise ValueError(f"{where}: init_lora_weights={cfg['init_lora_weights']!r} rewrites the base weights, "
                         f"so the adapter is relative to a modified base; save it converted "
                         f"(save_pretrained(..., path_initial_model_for_weight_conversion=...)) first")


def config_rank_alpha(cfg: Mapping, module: str) -> tuple[object, object]:
    """(r, lora_alpha) that peft's config ``cfg`` gives ``module``: a matching ``rank_pattern`` /
    ``alpha_pattern`` key (:func:`pattern_key`) first, else ``r`` / ``lora_alpha``. Unchecked."""
    rank_pattern, alpha_pattern = cfg.get("rank_pattern") or {}, cfg.get("alpha_pattern") or {}
    rk, ak = pattern_key(rank_pattern, module), pattern_key(alpha_pattern, module)
    r = rank_pattern[rk] if rk is not None else cfg.get("r")
    alpha = alpha_pattern[ak] if ak is not None else cfg.get("lora_alpha")
    return r, alpha


def _scale(where: Path, cfg: dict, module: str, rank: int) -> float:
    r, alpha = config_rank_alpha(cfg, module)
    if r != rank:
        raise ValueError(f"{where}: module {module!r} has rank {rank} in {WEIGHTS} but the config gives r={r}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"{where}: module {module!r}: lora_alpha(={alpha!r}) must be a positive number")
    return alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r


@dataclass(frozen=True)
class ModuleRow:
    """One module of the report.

    ``shape`` is the LoRA view (m, n) = (out, in); ``energy`` is
    :math:`\\|\\Delta_{out}\\|_F^2 / \\|\\Delta\\|_F^2` and ``rel_error``
    :math:`\\|\\Delta_{out} - \\Delta\\|_F / \\|\\Delta\\|_F` against the exact aggregate
    :math:`\\Delta = \\sum_k a_k s_k B_k A_k`, in float64 from the triangular factors of the
    stacks (never m x n), accurate to a few eps64 relative to ||Delta|| (None when not
    computed; absolute when Delta = 0). ``params``
    counts the written factors, ``flora_params`` the FLoRA stack, (m + n) sum_k r_k.
    """

    module: str
    shape: tuple[int, int]
    client_ranks: tuple[int, ...]
    rank: int
    energy: float | None
    rel_error: float | None
    params: int
    flora_params: int


@dataclass(frozen=True)
class AdapterAggregation:
    """What :func:`aggregate_adapters` produced.

    Attributes:
        method, options: the aggregator and its options.
        clients: the client directories; ``weights`` the normalized a_k.
        factors: module -> the written ``(lora_B (m, p), lora_A (p, n))``, scale 1.
        full: averaged ``modules_to_save`` tensors, saved key -> tensor.
        rows: one :class:`ModuleRow` per module, in file order.
        path: where the adapter directory (or delta file) was written, or None.
        delta: True when ``path`` is a delta file.
    """

    method: str
    options: dict
    clients: tuple[Path, ...]
    weights: tuple[float, ...]
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]
    full: dict[str, torch.Tensor]
    rows: tuple[ModuleRow, ...]
    path: Path | None = None
    delta: bool = False
    config: dict = field(default_factory=dict)

    @property
    def ranks(self) -> dict[str, int]:
        return {r.module: r.rank for r in self.rows}

    def totals(self) -> dict:
        params, flora = sum(r.params for r in self.rows), sum(r.flora_params for r in self.rows)
        return {"modules": len(self.rows), "params": params, "flora_params": flora,
                "params_pct_flora": 100.0 * params / flora if flora else 0.0}

    def to_json(self) -> dict:
        rows = [{**vars(r), "shape": list(r.shape), "client_ranks": list(r.client_ranks)} for r in self.rows]
        return {"method": self.method, "options": {k: repr(v) if isinstance(v, torch.dtype) else v
                                                   for k, v in self.options.items()},
                "clients": [str(c) for c in self.clients], "weights": list(self.weights),
                "path": None if self.path is None else str(self.path), "delta": self.delta,
                "rows": rows, "totals": self.totals()}

    def table(self) -> str:
        """The report as a fixed-width text table, totals last."""
        width = max([len("module")] + [len(r.module) for r in self.rows])
        rw = max([len("client ranks")] + [len(",".join(map(str, r.client_ranks))) for r in self.rows])
        head = (f"{'module':<{width}}  {'m x n':>11}  {'client ranks':>{rw}}  {'rank':>5}  {'energy':>9}  "
                f"{'rel err':>9}  {'params':>10}  {'% FLoRA':>7}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            shape = f"{r.shape[0]} x {r.shape[1]}"
            ranks = ",".join(map(str, r.client_ranks))
            pct = 100.0 * r.params / r.flora_params
            lines.append(f"{r.module:<{width}}  {shape:>11}  {ranks:>{rw}}  {r.rank:>5}  {_fmt(r.energy):>9}  "
                         f"{_fmt(r.rel_error):>9}  {r.params:>10}  {pct:>7.1f}")
        t = self.totals()
        lines.append("-" * len(head))
        lines.append(f"{'total (' + str(t['modules']) + ' modules)':<{width}}  {'':>11}  {'':>{rw}}  {'':>5}  "
                     f"{'':>9}  {'':>9}  {t['params']:>10}  {t['params_pct_flora']:>7.1f}")
        return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6f}" if v >= 1e-3 else f"{v:.2e}"


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
        client_dirs: K peft adapter directories of the same base model and modules.
        out: the output adapter directory (created; a new directory appears atomically),
            the delta file with ``delta``, or None to write nothing.
        weights: K non-negative data weights n_k (default equal), normalized inside.
        method: aggregator name; ``tau`` / ``rank`` and other ``options`` go to
            :func:`fraq.aggregators.get_aggregator` (None: the method's default). FRAQ's
            ``rank`` is a cap: each module keeps min(rank, sum_k r_k, m, n) components.
        delta: write a safetensors file of dense deltas, key ``<module>.weight`` in the
            base weight's layout ((out, in); (in, out) for ``fan_in_fan_out`` Conv1D and
            (num_embeddings, dim) for embeddings), to be added to the base state_dict.
        dtype: dtype of what is written (default float32).
        compute_dtype: dtype of the arithmetic (default float64; float16 / bfloat16 mean
            float32). FRAQ's Gram eigenproblem squares the spectrum, so in float32 it takes
            directions below about sqrt(r eps32) sigma_1 ~ 1e-3 sigma_1 as rounding noise
            and drops them even at ``tau=1``; in float64 that floor is ~1e-7 sigma_1, below
            float32 output rounding. Adapters are small, so float64 costs little; pass
            float32 to halve the time on very large ones.
        uniform_rank: pad every module with zero components to the largest rank, so the
            config needs no ``rank_pattern`` (for loaders that ignore it, e.g. serving
            engines); the product is unchanged.
        overwrite: replace the adapter files in a non-empty ``out`` (other files there are
            kept) or an existing delta file; without it such an ``out`` is refused before
            any work.
        report: compute each row's energy and error against Delta, in float64 from the
            triangular factors of the stacks, about 4 (m + n) (sum_k r_k + p)^2 flops per module.

    Returns:
        :class:`AdapterAggregation`.

    The written adapter has ``r`` = the most common output rank, ``rank_pattern`` /
    ``alpha_pattern`` with one exact key (:func:`exact_key`) per other module, alpha = rank
    everywhere and ``use_rslora`` off, so every module's scale is exactly 1; the rest of
    the config (target modules, base model, modules_to_save) is the first client's.
    """
    if isinstance(client_dirs, (str, bytes, os.PathLike)) or not isinstance(client_dirs, Sequence):
        raise TypeError(f"client_dirs must be a sequence of adapter directories, got {client_dirs!r}")
    if not client_dirs:
        raise ValueError("client_dirs is empty: aggregation needs at least one adapter")
    for name, dt in (("dtype", dtype), ("compute_dtype", compute_dtype)):
        if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
            raise TypeError(f"{name}(={dt!r}) must be a floating torch.dtype")
    if not isinstance(method, str):
        raise TypeError(f"method(={method!r}) must be a str")
    refused = NO_DELTA if delta else NOT_AN_ADAPTER
    if method in refused:
        hint = "; pass delta=True (--delta) for its exact dense update" if method not in NO_DELTA else ""
        raise ValueError(f"method(={method!r}) cannot write a {'delta' if delta else 'peft adapter'}: "
                         f"{refused[method]}{hint}")
    if tau is not None:
        options["tau"] = tau
    if rank is not None:
        options["rank"] = rank
        if method == "fraq":
            options.setdefault("tau", None)  # Fraq takes exactly one of tau and rank
    get_aggregator(method, **options)  # checks the options before any file is read
    out = None if out is None else Path(out)
    if out is not None:
        _check_out(out, delta, overwrite)
    clients = [read_adapter(p) for p in client_dirs]
    _check_compatible(clients)
    if delta and clients[0].full:
        raise ValueError(f"{clients[0].file}: modules_to_save tensors {sorted(clients[0].full)[:3]} are full "
                         f"weights, not changes; write an adapter instead of a delta")
    a = normalized_weights(weights, len(clients))
    cdt = torch.promote_types(compute_dtype, torch.float32)
    exact_factors, rows = _aggregate_impl(clients, a, method, options, cdt, dtype, report)
    if uniform_rank and not delta:
        p = max(B.shape[1] for B, _ in exact_factors.values())
        exact_factors = {m: (torch.nn.functional.pad(B, (0, p - B.shape[1])),
                             torch.nn.functional.pad(A, (0, 0, 0, p - A.shape[0])))
                         for m, (B, A) in exact_factors.items()}
        rows = [ModuleRow(**{**vars(r), "rank": p, "params": (r.shape[0] + r.shape[1]) * p}) for r in rows]
    factors = {m: (B.to(dtype).contiguous(), A.to(dtype).contiguous()) for m, (B, A) in exact_factors.items()}
    full = _average_full(clients, a, dtype)
    config = {} if delta else _output_config(clients[0].config, {m: B.shape[1] for m, (B, _) in factors.items()})
    if out is not None:
        if delta:
            tensors = {f"{m}.weight": _dense(B, A, _transposed(clients[0], m)).to(dtype).contiguous()
                       for m, (B, A) in exact_factors.items()}
            plain = {k: v for k, v in options.items() if isinstance(v, (bool, int, float, str, type(None)))}
            meta = {"format": "pt", "fraq": json.dumps({"method": method, "options": plain, "weights": a,
                                                        "clients": [str(c.path) for c in clients]})}
            _write_file(out, tensors, meta, overwrite)
        else:
            _write_adapter(out, config, _adapter_tensors(clients[0], factors, full), overwrite)
    return AdapterAggregation(method, dict(options), tuple(c.path for c in clients), tuple(a), factors, full,
                              tuple(rows), out, delta, config)


def _check_out(out: Path, delta: bool, overwrite: bool) -> None:
    if delta:
        if out.is_dir():
            raise ValueError(f"{out}: is a directory; with delta, out is the .safetensors file to write")
        if out.exists() and not overwrite:
            raise ValueError(f"{out}: exists; pass overwrite=True (--overwrite) to replace it")
    elif out.exists():
        if not out.is_dir():
            raise ValueError(f"{out}: exists and is not a directory")
        if any(out.iterdir()) and not overwrite:
            raise ValueError(f"{out}: exists and is not empty; pass overwrite=True (--overwrite) to replace its "
                             f"{CONFIG} and {WEIGHTS}")


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
            if t.shape != ref.full[key].shape:
                raise ValueError(f"{c.file}: {key} has shape {tuple(t.shape)}, "
                                 f"{tuple(ref.full[key].shape)} in {ref.file}")


def _aggregate_impl(clients, a, method, options, cdt, dtype, report):
    """module -> the written (B, A) in the compute dtype ``cdt``, and the report rows of the
    factors as written in ``dtype``."""
    import fraq

    updates = [ClientUpdate({m: (B.to(cdt), A.to(cdt)) for m, (B, A) in c.factors.items()},
                            scale=c.scales, weight=ak) for c, ak in zip(clients, a)]
    downlinks = _run(method, options, updates)
    factors, rows = {}, []
    for m in clients[0].factors:
        d = max(downlinks[m], key=lambda d: sum(f.rank for f in d.merge) + (d.start.rank if d.start else 0))
        terms = list(d.merge) + ([d.start] if d.start is not None else [])
        if any(f.B is None for f in terms):
            raise ValueError(f"method {method!r} returned a single-matrix adapter for {m!r}; "
                             f"it cannot be written as lora_A / lora_B")
        B = torch.cat([f.B.to(cdt) * f.scale for f in terms], dim=-1)
        A = torch.cat([f.A.to(cdt) for f in terms], dim=-2)
        if B.shape[-1] == 0:  # a zero aggregate: rank 1 with zero factors still loads
            B, A = B.new_zeros(B.shape[0], 1), A.new_zeros(1, A.shape[1])
        ranks = tuple(c.factors[m][1].shape[0] for c in clients)
        mm, n = B.shape[0], A.shape[1]
        energy = err = None
        if report:
            Bs = [c.factors[m][0].double() for c in clients]
            As = [c.factors[m][1].double() for c in clients]
            Bst, Ast = fraq.stack(Bs, As, a, [c.scales[m] for c in clients])
            total = _sqnorm(Bst, Ast)
            Bw, Aw = B.to(dtype).double(), A.to(dtype).double()
            kept = _sqnorm(Bw, Aw)
            diff = _sqnorm(torch.cat([Bst, -Bw], -1), torch.cat([Ast, Aw], -2))
            energy = kept / total if total > 0 else 1.0
            err = math.sqrt(max(diff, 0.0) / total) if total > 0 else math.sqrt(kept)
        factors[m] = (B, A)
        rows.append(ModuleRow(m, (mm, n), ranks, B.shape[-1], energy, err, (mm + n) * B.shape[-1],
                              (mm + n) * sum(ranks)))
    return factors, rows


def _run(method, options, updates) -> dict[str, list]:
    """module -> one Downlink per client. A fixed FRAQ ``rank`` is a cap: a module whose
    stack or shape allows fewer components gets min(rank, sum_k r_k, m, n)."""
    rank = options.get("rank") if method == "fraq" else None
    names = list(updates[0].factors)
    if rank is None:
        caps = {None: names}
    else:
        caps = {}
        for m in names:
            B0, A0 = updates[0].factors[m]
            stacked = sum(u.factors[m][1].shape[0] for u in updates)
            caps.setdefault(min(rank, stacked, B0.shape[0], A0.shape[1]), []).append(m)
    out = {}
    for cap, mods in caps.items():
        agg = get_aggregator(method, **(options if cap is None else {**options, "rank": cap}))
        sub = updates if cap is None else [ClientUpdate({m: u.factors[m] for m in mods}, u.scale, u.weight)
                                           for u in updates]
        result = agg.aggregate(sub)
        out.update({m: [result.downlinks[k][m] for k in range(result.clients)] for m in mods})
    return out


def _sqnorm(B: torch.Tensor, A: torch.Tensor) -> float:
    """:math:`\\|B A\\|_F^2 = \\|R_B R_A^T\\|_F^2` with :math:`B = Q_B R_B`, :math:`A^T = Q_A R_A`.

    The triangular factors keep the error at eps * ||B|| ||A||; the Gram form
    tr(B^T B A A^T) would lose half the digits to cancellation when B A is a small
    difference (the report's error at tau = 1). 2 (m + n) r^2 flops.
    """
    RB = torch.linalg.qr(B, mode="r").R
    RA = torch.linalg.qr(A.mT, mode="r").R
    return float(torch.linalg.matrix_norm(RB @ RA.mT) ** 2)


def _average_full(clients, a, dtype):
    out = {}
    for key, t0 in clients[0].full.items():
        if not t0.is_floating_point():
            if any(not torch.equal(c.full[key], t0) for c in clients[1:]):
                raise ValueError(f"{clients[0].file}: non-floating tensor {key} differs between clients")
            out[key] = t0
            continue
        acc = sum(ak * c.full[key].double() for c, ak in zip(clients, a))
        out[key] = acc.to(dtype).contiguous()
    return out


def _transposed(client: ClientAdapter, module: str) -> bool:
    """True when the base weight is stored (in, out): Conv1D (fan_in_fan_out) and embeddings."""
    return client.kinds[module] == "embedding" or bool(client.config.get("fan_in_fan_out"))


def _dense(B: torch.Tensor, A: torch.Tensor, transposed: bool) -> torch.Tensor:
    """B @ A in the compute dtype of the factors, in the base weight's layout."""
    B, A = B.to(torch.promote_types(B.dtype, torch.float32)), A.to(torch.promote_types(A.dtype, torch.float32))
    return (A.mT @ B.mT) if transposed else (B @ A)


def _output_config(first: dict, ranks: Mapping[str, int]) -> dict:
    counts = Counter(ranks.values())
    r = max(counts, key=lambda p: (counts[p], p))
    cfg = dict(first)
    pattern = {exact_key(m): p for m, p in ranks.items() if p != r}
    cfg.update(r=r, lora_alpha=r, use_rslora=False, rank_pattern=pattern, alpha_pattern=dict(pattern),
               inference_mode=True)
    return cfg


def _adapter_tensors(first: ClientAdapter, factors, full) -> dict[str, torch.Tensor]:
    tensors = {}
    for m, (B, A) in factors.items():
        if first.kinds[m] == "embedding":
            tensors[f"{PREFIX}{m}.lora_embedding_A"], tensors[f"{PREFIX}{m}.lora_embedding_B"] = A, B
        else:
            tensors[f"{PREFIX}{m}.lora_A.weight"], tensors[f"{PREFIX}{m}.lora_B.weight"] = A, B
    tensors.update(full)
    return tensors


def _write_adapter(out: Path, config: dict, tensors: dict, overwrite: bool) -> None:
    """Write into a fresh sibling directory, then rename it to ``out`` (or, when ``out``
    already holds files and ``overwrite`` is set, replace our two files in it one by one)."""
    from safetensors.torch import save_file

    _check_out(out, False, overwrite)  # again: the directory may have appeared meanwhile
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        save_file(tensors, tmp / WEIGHTS, metadata={"format": "pt"})
        default_mode(tmp / WEIGHTS)
        (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if out.exists() and any(out.iterdir()):
            for name in (WEIGHTS, CONFIG):
                os.replace(tmp / name, out / name)
            tmp.rmdir()
        else:
            os.replace(tmp, out)  # rename(2) replaces an empty directory
    finally:
        if tmp.exists():
            for p in tmp.iterdir():
                p.unlink()
            tmp.rmdir()


def _write_file(out: Path, tensors: dict, metadata: dict, overwrite: bool) -> None:
    from safetensors.torch import save_file

    _check_out(out, True, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        save_file(tensors, tmp, metadata=metadata)
        default_mode(tmp)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()


def example_clients(directory: str | os.PathLike, *, clients: int = 3, seed: int = 0) -> list[Path]:
    """Write a tiny random BERT to ``directory/base`` and ``clients`` peft adapters of it.

    No download: the model is built from a ``BertConfig`` (2 layers, hidden size 32) with
    seeded weights and saved with ``save_pretrained``. The adapters target ``query``,
    ``key``, ``value`` and ``dense`` (13 modules with the pooler, shapes 32 x 32, 37 x 32 and
    32 x 37) and
    cycle through (r=4, alpha=8), (r=8, alpha=16, rsLoRA), (r=2, alpha=4 with a
    ``rank_pattern`` and an ``alpha_pattern``). Their factors are random with decaying
    column norms (peft initializes B = 0), so the aggregate has a spectrum to truncate.
    Needs transformers and peft (``pip install -e '.[fl]'``). Returns the adapter directories.
    """
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients(={clients!r}) must be an int >= 1")
    directory = Path(directory)
    base_dir = directory / "base"
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=32)
    kinds = [dict(r=4, lora_alpha=8), dict(r=8, lora_alpha=16, use_rslora=True),
             dict(r=2, lora_alpha=4, rank_pattern={"layer.1.attention.self.query": 6}, alpha_pattern={"value": 3})]
    paths = []
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the tiny model's load report and progress bars are noise here
    hf_logging.disable_progress_bar()
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers deprecations peft still triggers
            torch.manual_seed(seed)
            BertModel(config).save_pretrained(base_dir)
            for k in range(clients):
                model = get_peft_model(BertModel.from_pretrained(base_dir),
                                       LoraConfig(target_modules=["query", "key", "value", "dense"], **kinds[k % 3]))
                with torch.no_grad():
                    for name, p in model.named_parameters():
                        if "lora_" in name:
                            r = p.shape[0] if "lora_A" in name else p.shape[1]
                            decay = 0.8 ** torch.arange(r, dtype=p.dtype)
                            p.copy_(torch.randn_like(p) * (decay[:, None] if "lora_A" in name else decay) * 0.1)
                model.save_pretrained(directory / f"client{k}")
                paths.append(directory / f"client{k}")
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    return paths
