"""The server's state between rounds, and its checkpoint file.

After every round the harness writes the whole state (global weights of the adapted
modules, the head, every client's start adapter, the aggregator's state, the records so
far) to ``checkpoint.pt`` through a temporary file and an atomic rename, so a killed run
loses at most the round in progress. Every random draw of a round is seeded from
(seed, round, client), so ``--resume`` continues with exactly the numbers an
uninterrupted run gets. The file holds tensors, numbers and strings only and loads with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fraq.aggregators import Factors, FlorgState, LoraA2State

__all__ = ["RoundState", "load_checkpoint", "save_checkpoint"]


@dataclass
class RoundState:
    """Everything the next round needs.

    Attributes:
        round: rounds completed (0 before the first).
        weights: adapted module -> its global weight W_t (m, n), every merge applied.
        head: the classification head's state dict.
        starts: per client, module -> the adapter it trains from next round, or None
            (a fresh adapter).
        agg_state: the aggregator's ``result.state`` (LoRA-A^2, FLoRG) or None.
        records: one dict per completed round.
    """

    round: int
    weights: dict[str, torch.Tensor]
    head: dict[str, torch.Tensor]
    starts: list[dict[str, Factors] | None]
    agg_state: object | None = None
    records: list[dict] = field(default_factory=list)


def _factors_out(f: Factors) -> dict:
    return {"B": f.B, "A": f.A, "scale": float(f.scale)}


def _agg_state_out(s: object | None):
    if s is None:
        return None
    if isinstance(s, LoraA2State):
        return {"type": "LoraA2State", "round": s.round, "adapters": {k: list(v) for k, v in s.adapters.items()}}
    if isinstance(s, FlorgState):
        return {"type": "FlorgState", "adapters": dict(s.adapters)}
    raise TypeError(f"cannot checkpoint aggregator state of type {type(s).__name__}")


def _agg_state_in(d):
    if d is None:
        return None
    if d["type"] == "LoraA2State":
        return LoraA2State(int(d["round"]), {k: tuple(v) for k, v in d["adapters"].items()})
    if d["type"] == "FlorgState":
        return FlorgState(dict(d["adapters"]))
    raise ValueError(f"unknown aggregator state type {d['type']!r} in checkpoint")


def save_checkpoint(path: Path, state: RoundState, meta: dict) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, then rename)."""
    payload = {
        "meta": meta,
        "round": state.round,
        "weights": state.weights,
        "head": state.head,
        "starts": [None if s is None else {k: _factors_out(f) for k, f in s.items()} for s in state.starts],
        "agg_state": _agg_state_out(state.agg_state),
        "records": state.records,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, meta: dict) -> RoundState:
    """Read a checkpoint; ``meta`` (method and config) must equal what it was written with."""
    payload = torch.load(path, weights_only=True)
    if payload["meta"] != meta:
        diff = sorted(k for k in set(meta) | set(payload["meta"]) if meta.get(k) != payload["meta"].get(k))
        raise ValueError(f"checkpoint {str(path)!r} was written for a different run (differs in {diff}); "
                         f"use a new --out or --overwrite")
    starts = [None if s is None else {k: Factors(f["B"], f["A"], f["scale"]) for k, f in s.items()}
              for s in payload["starts"]]
    return RoundState(payload["round"], payload["weights"], payload["head"], starts,
                      _agg_state_in(payload["agg_state"]), payload["records"])
