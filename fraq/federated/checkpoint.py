"""The checkpoint file of the server's state between rounds (:class:`~fraq.federated.state.RoundState`).

After every round the harness writes the whole state (global weights of the adapted
modules, the head, every client's start adapter, the aggregator's state as its own
record, ``to_record``, tagged with its method, the records so far) to ``checkpoint.pt``
through a temporary file and an atomic rename, so a killed run loses at most the round
in progress. Every random draw of a round is seeded from
(seed, round, client), so ``--resume`` continues with exactly the numbers an
uninterrupted run gets. The file holds tensors, numbers and strings only and loads with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from fraq._files import replacing_file
from fraq.aggregators import AGGREGATORS, Factors
from fraq.federated.state import RoundState

__all__ = ["RoundState", "load_checkpoint", "save_checkpoint"]


def _factors_out(f: Factors) -> dict:
    return {"B": f.B, "A": f.A, "scale": float(f.scale)}


def _agg_state_out(s: object | None) -> dict | None:
    """The aggregator's state as its own record (``to_record``), tagged with its method."""
    if s is None:
        return None
    if not callable(getattr(s, "to_record", None)) or not isinstance(getattr(s, "aggregator", None), str):
        raise TypeError(f"cannot checkpoint aggregator state of type {type(s).__name__}: it is no "
                        f"fraq.aggregators.AggregatorState (to_record, from_record, aggregator)")
    return {"aggregator": s.aggregator, "record": s.to_record()}


def _agg_state_in(d: dict | None):
    """The state :func:`_agg_state_out` wrote, read back by its method's ``state_type``."""
    if d is None:
        return None
    cls = AGGREGATORS.get(d["aggregator"])
    if cls is None or cls.state_type is None:
        raise ValueError(f"aggregator state of {d['aggregator']!r}, which is no registered stateful method")
    return cls.state_type.from_record(d["record"])


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
