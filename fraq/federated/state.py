"""The server's state between rounds, and the arithmetic that moves it on.

Weights are merged in float64 and cast back (:func:`merge_into`); the server, every
Flower client and the evaluation apply an adapter through the method's
:class:`~fraq.aggregators.ClientLayer` (``layer.delta``), so they hold the same weights
bit for bit whatever the method's adapter is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from fraq.aggregators import REINITIALIZE, AggregationResult, ClientLayer, Factors
from fraq.federated.seeding import stable_seed

__all__ = ["RoundState", "apply_round", "eval_weights", "merge_into"]


@dataclass
class RoundState:
    """Everything the next round needs.

    Attributes:
        round: rounds completed (0 before the first).
        weights: adapted module -> its global weight W_t (m, n), every merge applied.
        head: the classification head's state dict.
        starts: per client, module -> the adapter it trains from next round, or None
            (a fresh adapter).
        agg_state: the aggregator's ``result.state`` (an
            :class:`~fraq.aggregators.AggregatorState`) or None.
        records: one dict per completed round.
    """

    round: int
    weights: dict[str, torch.Tensor]
    head: dict[str, torch.Tensor]
    starts: list[dict[str, Factors] | None]
    agg_state: object | None = None
    records: list[dict] = field(default_factory=list)


_LORA = ClientLayer({}, stable_seed)
"""peft's LoRA, the layer of every method that does not bring its own: update ``s B A``."""


def merge_into(weights: dict[str, torch.Tensor], merges: Mapping[str, tuple[Factors, ...]],
               layer: ClientLayer | None = None) -> dict[str, torch.Tensor]:
    """W + the dense update of each merge per module, in float64, cast back to W's dtype.

    ``layer`` gives a merge's update (``layer.delta``; default peft's LoRA, ``s B A``).
    The server and every client apply their merges with this function, so they hold the
    same weights bit for bit.
    """
    layer = layer or _LORA
    out = dict(weights)
    for name, fs in merges.items():
        if fs:
            W = weights[name]
            acc = W.double()
            for f in fs:
                acc = acc + layer.delta(name, f)
            out[name] = acc.to(W.dtype)
    return out


def eval_weights(state: RoundState, ranks: list[int], layer: ClientLayer | None = None) -> dict[str, torch.Tensor]:
    """The global model's adapted weights: W plus the largest-rank client's start adapter."""
    ref = state.starts[int(np.argmax(ranks))]
    if ref is None:
        return state.weights
    layer = layer or _LORA
    return {n: (W.double() + layer.delta(n, ref[n])).to(W.dtype) for n, W in state.weights.items()}


def _same(a: tuple[Factors, ...], b: tuple[Factors, ...]) -> bool:
    return len(a) == len(b) and all(
        x is y or (x.scale == y.scale and torch.equal(x.A, y.A) and
                   (x.B is y.B or (x.B is not None and y.B is not None and torch.equal(x.B, y.B))))
        for x, y in zip(a, b))


def apply_round(state: RoundState, result: AggregationResult, heads: list[dict] | None,
                weights: list[float], layer: ClientLayer | None = None) -> RoundState:
    """The state after round ``state.round + 1``: merges into W, the new starts, the averaged head."""
    merges = result.merged(0)
    for k in range(1, result.clients):  # every method merges one shared update into W
        if not all(_same(merges[n], fs) for n, fs in result.merged(k).items()):
            raise RuntimeError(f"{result.method}: clients received different merges; the harness keeps one W")
    new_w = merge_into(state.weights, merges, layer)
    starts = [None if result.client_init == REINITIALIZE else result.starts(k) for k in range(result.clients)]
    head = state.head
    if heads is not None:
        a = torch.tensor(weights, dtype=torch.float64) / sum(weights)
        head = {key: sum(float(a[k]) * heads[k][key].double() for k in range(len(heads))).to(state.head[key].dtype)
                for key in state.head}
    return RoundState(state.round + 1, new_w, head, starts, result.state, list(state.records))
