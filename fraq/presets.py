"""Model shape presets from the paper's experiments (its Table 7 and Section 4.1).

Shapes follow peft: a module's weight is (out, in) = (m, n), so ``lora_B`` is (m, r)
and ``lora_A`` is (r, n).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModuleGroup", "Preset", "PRESETS", "get_preset"]


@dataclass(frozen=True)
class ModuleGroup:
    """``count`` adapted weight matrices of one shape (one per layer)."""

    name: str
    m: int
    n: int
    count: int


@dataclass(frozen=True)
class Preset:
    """A model's adapted modules and the clients' LoRA configurations."""

    name: str
    groups: tuple[ModuleGroup, ...]
    ranks: tuple[int, ...]
    alphas: tuple[float, ...]

    @property
    def clients(self) -> int:
        return len(self.ranks)

    @property
    def scales(self) -> tuple[float, ...]:
        """LoRA scales s_k = alpha_k / r_k."""
        return tuple(a / r for a, r in zip(self.alphas, self.ranks))

    @property
    def modules(self) -> int:
        return sum(g.count for g in self.groups)

    def stack_params(self) -> int:
        """Parameters of the uncompressed FLoRA stack, sum over modules of (m + n) r."""
        r = sum(self.ranks)
        return sum(g.count * (g.m + g.n) * r for g in self.groups)


def _roberta_base() -> Preset:
    h, layers = 768, 12
    groups = tuple(ModuleGroup(name, h, h, layers) for name in ("query", "key", "value"))
    return Preset("roberta-base", groups, ranks=(8,) * 10, alphas=(16.0,) * 10)


def _llama_groups() -> tuple[ModuleGroup, ...]:
    # LLaMA-3.2-3B: hidden 3072, intermediate 8192, 24 query heads and 8 key/value heads
    # of dimension 128 (so k/v project to 1024), 28 layers.
    h, inter, kv, layers = 3072, 8192, 1024, 28
    return (
        ModuleGroup("q_proj", h, h, layers),
        ModuleGroup("k_proj", kv, h, layers),
        ModuleGroup("v_proj", kv, h, layers),
        ModuleGroup("o_proj", h, h, layers),
        ModuleGroup("gate_proj", inter, h, layers),
        ModuleGroup("up_proj", inter, h, layers),
        ModuleGroup("down_proj", h, inter, layers),
    )


def _llama() -> Preset:
    return Preset("llama-3.2-3b", _llama_groups(), ranks=(8,) * 8, alphas=(16.0,) * 8)


def _hetero() -> Preset:
    ranks = (4, 16, 32, 64, 4, 16, 32, 64)
    return Preset("llama-3.2-3b-hetero", _llama_groups(), ranks=ranks, alphas=tuple(2.0 * r for r in ranks))


PRESETS: dict[str, Preset] = {p.name: p for p in (_roberta_base(), _llama(), _hetero())}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"preset(={name!r}) is not one of {sorted(PRESETS)}")
    return PRESETS[name]
