"""Reading one peft LoRA adapter directory, checked: its header (:func:`read_header`), then its tensors
(:func:`read_adapter`).

A client directory holds peft's ``adapter_config.json`` and ``adapter_model.safetensors``
(``save_pretrained``). Each saved module ``base_model.model.<module>`` has ``lora_A.weight``
(r_k, n) and ``lora_B.weight`` (m, r_k) (embeddings: ``lora_embedding_A`` (r_k, n) and
``lora_embedding_B`` (m, r_k)); its scale comes from the config
(:func:`fraq.peft.config.module_scale`). Everything is checked here, before any
arithmetic: errors name the file (and module) and echo the value.

Two steps, so that a server can refuse a bad last client before it reads the first one's
tensors: :func:`read_header` reads the config and the safetensors header (names, dtypes,
shapes: a few kilobytes, no tensor data) and makes every check those allow;
:func:`read_adapter` reads the header again (refusing a file changed since), then the
tensors, and checks their values.

Refused from the header, naming the file: non-LoRA peft types, DoRA, ``lora_bias``, trainable tokens,
``target_parameters``, conv LoRA (3-D and 4-D factors), adapters whose initialization
rewrites the base weights (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA), any option
:func:`~fraq.peft.config.check_config` does not know, pickle-only ``adapter_model.bin``,
factors that are not float16, bfloat16, float32 or float64 (float8 and integer types are
quantized storage, not a LoRA update). From the values: NaN or infinite entries. BD-LoRA's compact
block-diagonal factor is expanded to the dense (r, n) lora_A or (m, r) lora_B peft
multiplies (``torch.block_diag`` of its blocks, as peft's ``weight_as_blockdiagonal_matrix``),
so every client is a plain B @ A. Only ``safetensors`` and ``json`` are needed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from fraq.peft.config import CONFIG, PREFIX, WEIGHTS, bdlora_block, check_config, module_scale

__all__ = ["FACTOR_DTYPES", "AdapterHeader", "ClientAdapter", "read_adapter", "read_header"]

_SUFFIXES = {".lora_A.weight": ("A", "linear"), ".lora_B.weight": ("B", "linear"),
             ".lora_embedding_A": ("A", "embedding"), ".lora_embedding_B": ("B", "embedding")}
FACTOR_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The factor dtypes read."""
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64, "BOOL": torch.bool,
           "F8_E4M3": torch.float8_e4m3fn, "F8_E4M3FNUZ": torch.float8_e4m3fnuz, "F8_E5M2": torch.float8_e5m2,
           "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "C64": torch.complex64}
"""safetensors' dtype names as torch's; another name is kept as its string (and refused as a factor)."""


@dataclass(frozen=True)
class AdapterHeader:
    """What one adapter directory says before any tensor is read: its config and its
    safetensors header, checked.

    Attributes:
        path: the directory.
        config: ``adapter_config.json`` as a dict.
        factor_shapes: module -> (lora_B's (m, r), lora_A's (r, n)), BD-LoRA's as expanded.
        scales: module -> the LoRA scale peft applies, alpha / r or alpha / sqrt(r).
        kinds: module -> ``"linear"`` or ``"embedding"``.
        full: other tensors (``modules_to_save``), saved key -> (dtype, shape).
    """

    path: Path
    config: dict
    factor_shapes: dict[str, tuple[tuple[int, int], tuple[int, int]]]
    scales: dict[str, float]
    kinds: dict[str, str]
    full: dict[str, tuple[torch.dtype | str, tuple[int, ...]]]

    @property
    def file(self) -> Path:
        return self.path / WEIGHTS

    @property
    def shapes(self) -> dict[str, tuple[int, int]]:
        """module -> (m, n) = (out, in), the LoRA view of its update."""
        return {m: (b[0], a[1]) for m, (b, a) in self.factor_shapes.items()}

    @property
    def ranks(self) -> dict[str, int]:
        """module -> r, the rank of its saved (dense) factors."""
        return {m: a[0] for m, (_, a) in self.factor_shapes.items()}


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

    @property
    def shapes(self) -> dict[str, tuple[int, int]]:
        """module -> (m, n) = (out, in), the LoRA view of its update."""
        return {m: (B.shape[0], A.shape[1]) for m, (B, A) in self.factors.items()}


def read_header(path: str | os.PathLike) -> AdapterHeader:
    """Check one peft LoRA adapter directory from its config and safetensors header alone
    (no tensor data is read); errors name the file and module."""
    from safetensors import safe_open

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
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{cfg_file}: not valid JSON ({e})") from None
    check_config(cfg_file, cfg)
    try:
        with safe_open(str(file), framework="pt") as f:
            entries = {key: (f.get_slice(key).get_dtype(), tuple(f.get_slice(key).get_shape())) for key in f.keys()}
    except Exception as e:  # safetensors raises its own SafetensorError, and OSError
        raise ValueError(f"{file}: not a readable safetensors file ({e})") from None
    parts: dict[str, dict[str, tuple[int, ...]]] = {}
    kinds: dict[str, str] = {}
    full: dict[str, tuple[torch.dtype | str, tuple[int, ...]]] = {}
    for key, (name, shape) in entries.items():
        dtype = _DTYPES.get(name, name)
        if not key.startswith(PREFIX):
            raise ValueError(f"{file}: tensor {key!r} does not start with {PREFIX!r}; not a peft adapter file")
        suffix = next((s for s in _SUFFIXES if key.endswith(s)), None)
        if suffix is None:
            if ".lora_" in key:
                raise ValueError(f"{file}: tensor {key!r} is not a plain LoRA factor (lora_bias, DoRA magnitude "
                                 f"or another variant); only lora_A / lora_B are aggregated")
            _check_full(file, key, dtype)
            full[key] = (dtype, shape)
            continue
        module = key[len(PREFIX):-len(suffix)]
        which, kind = _SUFFIXES[suffix]
        if kinds.setdefault(module, kind) != kind:
            raise ValueError(f"{file}: module {module!r} has both linear and embedding LoRA factors")
        if len(shape) != 2:
            raise ValueError(f"{file}: module {module!r}: {key} has shape {shape}; only 2-D factors "
                             f"(linear, Conv1D and embedding LoRA) are supported, not conv LoRA")
        if dtype not in FACTOR_DTYPES:
            raise ValueError(f"{file}: module {module!r}: {key} has dtype {dtype}; LoRA factors must be one of "
                             f"{', '.join(str(d).removeprefix('torch.') for d in FACTOR_DTYPES)} "
                             f"(dequantize them first)")
        parts.setdefault(module, {})[which] = shape
    if not parts:
        raise ValueError(f"{file}: no LoRA factors (lora_A / lora_B) found")
    shapes, scales = {}, {}
    for module, p in parts.items():
        if set(p) != {"A", "B"}:
            missing = "lora_B" if "B" not in p else "lora_A"
            raise ValueError(f"{file}: module {module!r} has no {missing}")
        B, A = _expanded_shapes(file, module, bdlora_block(cfg, module), p["B"], p["A"])
        if B[1] != A[0]:
            raise ValueError(f"{file}: module {module!r}: lora_B {B} and lora_A {A} do not share a rank")
        scales[module] = module_scale(cfg_file, cfg, module, A[0])
        shapes[module] = (B, A)
    return AdapterHeader(path, cfg, shapes, scales, kinds, full)


def read_adapter(path: str | os.PathLike, header: AdapterHeader | None = None) -> ClientAdapter:
    """Read and check one peft LoRA adapter directory; errors name the file and module.

    ``header``: what an earlier :func:`read_header` of ``path`` gave; a file whose header
    differs by then (changed in between) is refused rather than read as another client."""
    from safetensors.torch import load_file

    current = read_header(path)
    if header is not None and current != header:
        raise ValueError(f"{current.file}: changed since it was checked (its config or tensor names, dtypes or shapes "
                         f"differ); aggregate again once the adapter directories are final")
    file = current.file
    try:
        tensors = load_file(file)
    except Exception as e:  # safetensors raises its own SafetensorError, and OSError
        raise ValueError(f"{file}: not a readable safetensors file ({e})") from None
    parts: dict[str, dict[str, torch.Tensor]] = {}
    full: dict[str, torch.Tensor] = {}
    for key, t in tensors.items():
        suffix = next((s for s in _SUFFIXES if key.endswith(s)), None)
        if suffix is None:
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise ValueError(f"{file}: tensor {key} contains NaN or infinity")
            full[key] = t
            continue
        module = key[len(PREFIX):-len(suffix)]
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{file}: module {module!r}: {key} contains NaN or infinity")
        parts.setdefault(module, {})[_SUFFIXES[suffix][0]] = t
    del tensors
    factors = {module: _expand_block(bdlora_block(current.config, module), parts[module]["B"], parts[module]["A"])
               for module in current.factor_shapes}
    return ClientAdapter(current.path, current.config, factors, current.scales, current.kinds, full)


def _expanded_shapes(file: Path, module: str, block: tuple[str, int] | None, B: tuple[int, ...],
                     A: tuple[int, ...]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The dense shapes of :func:`_expand_block`'s factors, checking that BD-LoRA's compact
    factor splits into its row blocks."""
    if block is None:
        return (B[0], B[1]), (A[0], A[1])
    side, nb = block
    shape = A if side == "A" else B
    if shape[0] % nb:
        raise ValueError(f"{file}: module {module!r}: BD-LoRA lora_{side} {shape} does not split into "
                         f"nblocks={nb} row blocks")
    dense = (shape[0], shape[1] * nb)
    return ((B[0], B[1]), dense) if side == "A" else (dense, (A[0], A[1]))


def _expand_block(block: tuple[str, int] | None, B: torch.Tensor, A: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """BD-LoRA's compact factor as the dense block-diagonal one: lora_A (r, n / nb) -> (r, n),
    lora_B (m, r / nb) -> (m, r); its nb row blocks go on the diagonal (checked to split by
    :func:`_expanded_shapes`)."""
    if block is None:
        return B, A
    side, nb = block
    t = A if side == "A" else B
    dense = torch.block_diag(*torch.chunk(t, nb, dim=0))
    return (B, dense) if side == "A" else (dense, A)


def _check_full(file: Path, key: str, dtype: torch.dtype | str) -> None:
    """A ``modules_to_save`` tensor: floating ones are averaged, so they must be a dtype
    the average runs in (finiteness is checked on the values); others (integer buffers)
    are copied if equal."""
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{file}: tensor {key} has dtype {dtype}, which torch does not read")
    if dtype.is_floating_point and dtype not in FACTOR_DTYPES:
        raise ValueError(f"{file}: tensor {key} has dtype {dtype}; modules_to_save tensors are averaged "
                         f"and must be float16, bfloat16, float32 or float64")
