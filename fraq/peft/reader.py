"""Reading one peft LoRA adapter directory, checked, into a :class:`ClientAdapter`.

A client directory holds peft's ``adapter_config.json`` and ``adapter_model.safetensors``
(``save_pretrained``). Each saved module ``base_model.model.<module>`` has ``lora_A.weight``
(r_k, n) and ``lora_B.weight`` (m, r_k) (embeddings: ``lora_embedding_A`` (r_k, n) and
``lora_embedding_B`` (m, r_k)); its scale comes from the config
(:func:`fraq.peft.config.module_scale`). Everything is checked here, before any
arithmetic: errors name the file (and module) and echo the value.

Refused, naming the file: non-LoRA peft types, DoRA, ``lora_bias``, trainable tokens,
``target_parameters``, conv LoRA (3-D and 4-D factors), adapters whose initialization
rewrites the base weights (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA), any option
:func:`~fraq.peft.config.check_config` does not know, pickle-only ``adapter_model.bin``,
factors that are not float16, bfloat16, float32 or float64 (float8 and integer types are
quantized storage, not a LoRA update), NaN or infinite entries. BD-LoRA's compact
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

__all__ = ["FACTOR_DTYPES", "ClientAdapter", "read_adapter"]

_SUFFIXES = {".lora_A.weight": ("A", "linear"), ".lora_B.weight": ("B", "linear"),
             ".lora_embedding_A": ("A", "embedding"), ".lora_embedding_B": ("B", "embedding")}
FACTOR_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The factor dtypes read."""


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
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{cfg_file}: not valid JSON ({e})") from None
    check_config(cfg_file, cfg)
    try:
        tensors = load_file(file)
    except Exception as e:  # safetensors raises its own SafetensorError, and OSError
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
            _check_full(file, key, t)
            full[key] = t
            continue
        module = key[len(PREFIX):-len(suffix)]
        which, kind = _SUFFIXES[suffix]
        if kinds.setdefault(module, kind) != kind:
            raise ValueError(f"{file}: module {module!r} has both linear and embedding LoRA factors")
        if t.dim() != 2:
            raise ValueError(f"{file}: module {module!r}: {key} has shape {tuple(t.shape)}; only 2-D factors "
                             f"(linear, Conv1D and embedding LoRA) are supported, not conv LoRA")
        if t.dtype not in FACTOR_DTYPES:
            raise ValueError(f"{file}: module {module!r}: {key} has dtype {t.dtype}; LoRA factors must be one of "
                             f"{', '.join(str(d).removeprefix('torch.') for d in FACTOR_DTYPES)} "
                             f"(dequantize them first)")
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
        B, A = _expand_block(file, module, bdlora_block(cfg, module), p["B"], p["A"])
        if B.shape[1] != A.shape[0]:
            raise ValueError(f"{file}: module {module!r}: lora_B {tuple(B.shape)} and lora_A {tuple(A.shape)} "
                             f"do not share a rank")
        scales[module] = module_scale(cfg_file, cfg, module, A.shape[0])
        factors[module] = (B, A)
    return ClientAdapter(path, cfg, factors, scales, kinds, full)


def _expand_block(file: Path, module: str, block: tuple[str, int] | None, B: torch.Tensor,
                  A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """BD-LoRA's compact factor as the dense block-diagonal one: lora_A (r, n / nb) -> (r, n),
    lora_B (m, r / nb) -> (m, r); its nb row blocks go on the diagonal."""
    if block is None:
        return B, A
    side, nb = block
    t = A if side == "A" else B
    if t.shape[0] % nb:
        raise ValueError(f"{file}: module {module!r}: BD-LoRA lora_{side} {tuple(t.shape)} does not split into "
                         f"nblocks={nb} row blocks")
    dense = torch.block_diag(*torch.chunk(t, nb, dim=0))
    return (B, dense) if side == "A" else (dense, A)


def _check_full(file: Path, key: str, t: torch.Tensor) -> None:
    """A ``modules_to_save`` tensor: floating ones are averaged, so they must be a dtype
    the average runs in, and finite; others (integer buffers) are copied if equal."""
    if t.is_floating_point():
        if t.dtype not in FACTOR_DTYPES:
            raise ValueError(f"{file}: tensor {key} has dtype {t.dtype}; modules_to_save tensors are averaged "
                             f"and must be float16, bfloat16, float32 or float64")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{file}: tensor {key} contains NaN or infinity")
