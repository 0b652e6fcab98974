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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from fraq.aggregators.certificate import Certificate

__all__ = ["AggregationResult", "ClientUpdate", "Downlink", "Factors", "WARM_START", "REINITIALIZE"]

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


@dataclass(frozen=True)
class AggregationResult:
    """An aggregator's answer for one round.

    Attributes:
        method: the aggregator's registry name.
        downlinks: one mapping per client (in upload order), module name -> :class:`Downlink`.
            Methods that broadcast one global adapter give every client the same mapping
            (one object, built once): treat it as read-only.
        client_init: :data:`WARM_START` or :data:`REINITIALIZE`.
        ranks: module name -> the rank of the global adapter, or a tuple of per-client
            ranks (FlexLoRA).
        state: server state to pass to the next round's ``aggregate`` call (LoRA-A^2,
            FLoRG), or None for stateless methods.
        info: method diagnostics (retained energy, round number, ...).
    """

    method: str
    downlinks: tuple[Mapping[str, Downlink], ...]
    client_init: str
    ranks: Mapping[str, int | tuple[int, ...]]
    state: object | None = None
    info: dict = field(default_factory=dict)

    @property
    def clients(self) -> int:
        return len(self.downlinks)

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(self.downlinks[0]) if self.downlinks else ()

    def downlink_params(self, client: int | None = None) -> int | list[int]:
        """Parameters sent to ``client``, or a list with one entry per client."""
        if client is None:
            return [self.downlink_params(k) for k in range(self.clients)]
        return sum(d.params for d in self._client(client).values())

    def downlink_bytes(self, client: int | None = None, dtype: torch.dtype | None = None) -> int | list[int]:
        """Bytes sent to ``client`` (or per client), in the tensors' dtypes or all in ``dtype``."""
        if client is None:
            return [self.downlink_bytes(k, dtype) for k in range(self.clients)]
        return sum(d.nbytes(dtype) for d in self._client(client).values())

    def merged(self, client: int = 0) -> dict[str, tuple[Factors, ...]]:
        """module -> the products ``client`` adds to its frozen base weights."""
        return {name: d.merge for name, d in self._client(client).items()}

    def starts(self, client: int = 0) -> dict[str, Factors | None]:
        """module -> the adapter ``client`` warm-starts from (None: fresh adapter)."""
        return {name: d.start for name, d in self._client(client).items()}

    def certificate(self, updates: Sequence[ClientUpdate]) -> Certificate:
        """Per module, how far this result's update is from the exact weighted aggregate of
        ``updates`` (the uploads this result was aggregated from), with a rounding bound:
        :func:`fraq.aggregators.certificate.certify`, which says what is certified per method.

        Computed on request, never inside ``aggregate``: float64 Grams of the uploads and
        the downlink factors, about FRAQ's recompression cost, one host read. The uploads
        are passed in rather than kept by the result, so a result does not hold every
        client's upload alive after the round.
        """
        from fraq.aggregators.certificate import certify

        return certify(updates, self)

    def _client(self, client: int) -> Mapping[str, Downlink]:
        if isinstance(client, bool) or not isinstance(client, int):
            raise TypeError(f"client(={client!r}) must be an int")
        if not 0 <= client < self.clients:
            raise ValueError(f"client(={client}) must be in [0, {self.clients})")
        return self.downlinks[client]
