"""A method's result: the check of its round records, its one-row summary, JSON written whole.

The harness writes one result file per run in the project's result format
(:mod:`fraq.federated.experiment`); tables and figures are the analysis' (``analysis``).
:func:`summarize` is the one-line summary the Flower app prints; :func:`write_json`
writes a JSON file whole through :func:`fraq._files.replacing_file`: a reader, or a run
killed at any moment, finds the complete old version or the complete new one.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from fraq._files import replacing_file
from fraq._json import finite

__all__ = ["ROUND_FIELDS", "check_records", "summarize", "write_json"]

ROUND_FIELDS = ("round", "accuracy", "train_loss", "downlink_params_mean", "downlink_pct_flora", "agg_ms", "rank_mean",
                "train_seconds")
"""The fields of a round record (:func:`fraq.federated.records.round_record`) a result must have."""


def check_records(records: object, where: str) -> None:
    """ValueError naming ``where`` unless ``records`` is a list of round records with :data:`ROUND_FIELDS`."""
    if not isinstance(records, list):
        raise ValueError(f"{where}: 'rounds' must be a list of round records, got {type(records).__name__}")
    for i, r in enumerate(records):
        missing = [k for k in ROUND_FIELDS if not isinstance(r, dict) or k not in r]
        if missing:
            raise ValueError(f"{where}: round record {i} lacks {missing}")


def _write(path: Path, data: str | bytes) -> None:
    """Replace ``path`` whole with ``data`` (text as UTF-8, no newline translation)."""
    with replacing_file(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def write_json(path: Path, obj) -> None:
    """Write ``obj`` as strict JSON, whole: a NaN or infinite number (a run with no accuracy
    measured) is written as null."""
    _write(path, json.dumps(finite(obj), indent=1, allow_nan=False))


def summarize(result: dict) -> dict:
    """One table row from a method's per-round records."""
    row = {"method": result["method"]}
    if result.get("skipped"):
        return {**row, "skipped": result["skipped"]}
    recs = result["rounds"]
    accs = [r["accuracy"] for r in recs if r["accuracy"] is not None]
    ms = [r["agg_ms"] for r in recs]
    return {**row,
            "accuracy_pct": 100 * accs[-1] if accs else math.nan,
            "best_accuracy_pct": 100 * max(accs) if accs else math.nan,
            "downlink_pct_flora": statistics.fmean(r["downlink_pct_flora"] for r in recs),
            "downlink_params": statistics.fmean(r["downlink_params_mean"] for r in recs),
            "agg_ms_mean": statistics.fmean(ms),
            "agg_ms_std": statistics.stdev(ms) if len(ms) > 1 else 0.0,
            "rank_mean": statistics.fmean(r["rank_mean"] for r in recs),
            "train_seconds": sum(r["train_seconds"] for r in recs),
            "rounds": len(recs)}
