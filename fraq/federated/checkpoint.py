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

import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fraq._files import replacing_file
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
    with replacing_file(path) as tmp:
        torch.save(payload, tmp)


_KEYS = ("meta", "round", "weights", "head", "starts", "agg_state", "records")
_FIX = "delete it to rerun this method from round 1, or start again with --overwrite"


def load_checkpoint(path: Path, meta: dict) -> RoundState:
    """Read a checkpoint; ``meta`` (method and config) must equal what it was written with.

    A file that cannot be read (truncated, not a checkpoint, damaged) or that was written
    for another run raises ValueError naming the path.
    """
    path = Path(path)
    try:
        payload = torch.load(path, weights_only=True)
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        raise ValueError(f"checkpoint {str(path)!r} cannot be read ({type(e).__name__}: {e}); {_FIX}") from None
    if not isinstance(payload, dict) or not set(_KEYS) <= set(payload):
        found = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"checkpoint {str(path)!r} is not a harness checkpoint (needs keys {list(_KEYS)}, "
                         f"found {found}); {_FIX}")
    if not isinstance(payload["meta"], dict) or payload["meta"] != meta:
        old = payload["meta"] if isinstance(payload["meta"], dict) else {}
        diff = sorted(k for k in set(meta) | set(old) if meta.get(k) != old.get(k))
        raise ValueError(f"checkpoint {str(path)!r} was written for a different run (differs in {diff}); "
                         f"use a new --out or --overwrite")
    try:
        state = RoundState(payload["round"], dict(payload["weights"]), dict(payload["head"]),
                           [None if s is None else {k: Factors(f["B"], f["A"], f["scale"]) for k, f in s.items()}
                            for s in payload["starts"]],
                           _agg_state_in(payload["agg_state"]), list(payload["records"]))
        _check_state(state)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"checkpoint {str(path)!r} is damaged ({type(e).__name__}: {e}); {_FIX}") from None
    return state


def _check_state(state: RoundState) -> None:
    if isinstance(state.round, bool) or not isinstance(state.round, int) or state.round < 0:
        raise ValueError(f"round(={state.round!r}) must be an int >= 0")
    if not all(isinstance(r, dict) for r in state.records):
        raise ValueError("records must be a list of dicts")
    for where, d in (("weights", state.weights), ("head", state.head)):
        if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in d.items()):
            raise ValueError(f"{where} must map names to tensors")
