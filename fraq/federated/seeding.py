"""The harness's seeded draws: one seed function, peft's LoRA initialization.

Every random draw of a run is seeded from its parts (the run's seed, what is drawn, the
round, the client, the module), so a resumed run and a Flower run draw exactly the
numbers of an uninterrupted in-process run.
"""

from __future__ import annotations

import math
import zlib

import torch

__all__ = ["init_lora", "stable_seed"]


def stable_seed(*parts) -> int:
    """A 63-bit seed from its parts, the same in every process (``hash`` of a str is salted)."""
    return zlib.crc32(repr(parts).encode()) * 2654435761 % (2**63 - 1)


def init_lora(m: int, n: int, r: int, seed: int, dtype: torch.dtype = torch.float32
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """peft's default LoRA initialization, seeded: ``B = 0`` (m, r), ``A`` (r, n) kaiming-uniform.

    ``kaiming_uniform_(a=sqrt(5))`` on an (r, n) weight draws from U(-1/sqrt(n), 1/sqrt(n)).
    """
    g = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(n)
    A = (torch.rand(r, n, generator=g, dtype=torch.float64) * 2 - 1) * bound
    return torch.zeros(m, r, dtype=dtype), A.to(dtype)
