"""What goes into an aggregator and what comes out of it, for a whole model.

Shapes follow peft: a module's weight is (out, in) = (m, n), ``lora_B`` is (m, r) and
``lora_A`` is (r, n), and a LoRA update is ``s * B @ A`` with scale s = alpha / r (or
alpha / sqrt(r) with rsLoRA).

A client uploads one :class:`ClientUpdate`: per module its (B_k, A_k), its LoRA scale
and its data weight. The server returns an :class:`AggregationResult`: per client and
per module a :class:`Downlink` saying which tensors are sent, which products the client
adds to its frozen base weights, and which adapter it trains from next (``None``: a
fresh one). Downlink accounting counts exactly the tensors listed in ``Downlink.sent``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

__all__ = ["ClientUpdate", "Downlink", "Factors", "WARM_START", "REINITIALIZE"]

WARM_START = "warm-start"
"""Clients continue training from the adapter the server sent (``Downlink.start``)."""

REINITIALIZE = "reinitialize"
"""Clients merge what the server sent into the base weights and start a fresh adapter."""


@dataclass(frozen=True)
class ClientUpdate:
    """One client's upload for one round.

    Attributes:
        factors: module name -> ``(B_k, A_k)``, B_k (m, r_k) and A_k (r_k, n). For FLoRG,
            whose clients train a single matrix per module, ``(None, A_k)`` with A_k
            (r, min(m, n)).
        scale: the client's LoRA scale s_k = alpha_k / r_k, one number or one per module
            (peft's ``alpha_pattern`` / ``rank_pattern``).
        weight: the client's data weight n_k (any non-negative number; the server
            normalizes a_k = n_k / sum_j n_j).
        upload_rank: LoRA-A^2 only: the client's component budget r_k. It uploads its
            r_k * N most important rank-1 components across all N modules and nothing
            else. None: every component (no budget).
    """

    factors: Mapping[str, tuple[torch.Tensor | None, torch.Tensor]]
    scale: float | Mapping[str, float] = 1.0
    weight: float = 1.0
    upload_rank: int | None = None

    def scale_of(self, module: str) -> float:
        """The LoRA scale of ``module``."""
        if isinstance(self.scale, Mapping):
            return self.scale[module]
        return self.scale


@dataclass(frozen=True)
class Factors:
    """A low-rank product ``scale * B @ A``.

    Attributes:
        B: (m, r), or None for FLoRG's single-matrix adapter (update ``s L A^T A R`` with
            the fixed seeded projections of :func:`fraq.aggregators.florg.projections`).
        A: (r, n), or FLoRG's (r, min(m, n)).
        scale: the coefficient of the product. A client whose own LoRA scale s_k
            differs loads ``lora_B = B * (scale / s_k)`` and ``lora_A = A``.
    """

    B: torch.Tensor | None
    A: torch.Tensor
    scale: float = 1.0

    @property
    def rank(self) -> int:
        return self.A.shape[-2]

    def dense(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``scale * B @ A`` as a dense (m, n) matrix in ``dtype`` (tests and small models)."""
        if self.B is None:
            raise ValueError("a single-matrix (FLoRG) adapter has no dense form without its projections L, R")
        return self.scale * (self.B.to(dtype) @ self.A.to(dtype))


@dataclass(frozen=True)
class Downlink:
    """What one client receives for one module in one round.

    Attributes:
        sent: the tensors transmitted, each once. A tensor the client already holds (the
            frozen factor in LoRA-A^2) is not in it.
        merge: products the client adds to its frozen base weights before training,
            W <- W + sum of ``f.scale * f.B @ f.A``.
        start: the adapter the client trains from next round (warm start), or None when
            it initializes a fresh one.
    """

    sent: tuple[torch.Tensor, ...]
    merge: tuple[Factors, ...] = ()
    start: Factors | None = None

    @property
    def params(self) -> int:
        """Parameters transmitted: the sum of ``numel`` over ``sent``."""
        return sum(t.numel() for t in self.sent)

    def nbytes(self, dtype: torch.dtype | None = None) -> int:
        """Bytes transmitted, each tensor in its own dtype or all in ``dtype`` (the wire format)."""
        return sum(t.numel() * (dtype or t.dtype).itemsize for t in self.sent)

    def delta(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The change to the module's effective weight: merged products plus the start adapter."""
        terms = list(self.merge) + ([self.start] if self.start is not None else [])
        if not terms:
            raise ValueError("this downlink carries no update")
        return sum(f.dense(dtype) for f in terms)


