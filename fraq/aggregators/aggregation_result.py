"""What an aggregator answers for one round: :class:`AggregationResult`.

The downlinks per client (:class:`~fraq.aggregators.payload.Downlink`), the global ranks,
the server state for the next round and the method's diagnostics, with what a user asks of
them: the parameters and bytes sent, the products each client merges, and the
certificate against the uploads (:meth:`AggregationResult.certificate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from fraq.aggregators.certificate import Certificate, certify_exact, upload_aggregate
from fraq.aggregators.probe_certificate import PROBE_DEFAULTS, certify_probe_exact, check_probe_options
from fraq.aggregators.payload import ClientUpdate, Downlink, Factors

__all__ = ["AggregationResult"]


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

    def certificate(self, updates: Sequence[ClientUpdate] | object, method: str = "gram",
                    **probe_options) -> Certificate:
        """Per module, how far this result's update is from the exact weighted aggregate of
        ``updates``: the uploads this result was aggregated from, or the round buffer that
        aggregated it (:meth:`RoundBuffer.certificate <fraq.aggregators.RoundBuffer.certificate>`,
        which reads its stacks, so no upload has to be kept).

        ``method="gram"`` (default): exact, with a rounding bound,
        :func:`fraq.aggregators.certificate.certify` (which says what is certified per
        method): float64 Grams of the uploads and the downlink factors, about FRAQ's
        recompression cost. ``method="probe"``: a bound that holds with probability
        ``1 - delta`` from k Gaussian probes, at about k / R of that cost,
        :func:`fraq.aggregators.probe_certificate.certify_probe`, whose keywords
        (``probes``, ``delta``, ``seed``, ``dtype``) ``probe_options`` passes on.

        Computed on request, never inside ``aggregate``; one host read. The uploads are
        passed in rather than kept by the result, so a result does not hold every client's
        upload alive after the round. The method and its options are checked before any
        work, then the uploads or the buffer against this result.
        """
        if method not in ("gram", "probe"):
            raise ValueError(f"method(={method!r}) must be 'gram' or 'probe'")
        if method == "gram" and probe_options:
            raise TypeError(f"{', '.join(sorted(probe_options))} apply to method='probe', not method='gram'")
        if method == "probe":
            unknown = sorted(set(probe_options) - set(PROBE_DEFAULTS))
            if unknown:
                raise TypeError(f"certificate() got unexpected keyword(s) {unknown}; method='probe' takes "
                                f"{sorted(PROBE_DEFAULTS)}")
            probe_options = {**PROBE_DEFAULTS, **probe_options}
            check_probe_options(**probe_options)
        held = None if isinstance(updates, Sequence) else getattr(updates, "exact_aggregate", None)
        # a round buffer (RoundBuffer, SplitRound) is asked for the exact aggregate it holds
        exact = held(self) if callable(held) else upload_aggregate(updates, self)
        if method == "probe":
            return certify_probe_exact(exact, self, **probe_options)
        return certify_exact(exact, self)

    def _client(self, client: int) -> Mapping[str, Downlink]:
        if isinstance(client, bool) or not isinstance(client, int):
            raise TypeError(f"client(={client!r}) must be an int")
        if not 0 <= client < self.clients:
            raise ValueError(f"client(={client}) must be in [0, {self.clients})")
        return self.downlinks[client]
