"""The fields each experiment's result must hold, and their types: one table both sides read.

A result file (:mod:`fraq._results`) is whole only if its experiment's fields are there
and of their type. The runner (:mod:`benchmarks.run`) measures a point again when its
file fails this, and the analysis (:func:`analysis.resultset.load`) skips such a file,
naming it; both read :data:`REQUIRED` here, so a result the runner counts as finished is
one the report draws. Fields are named as :func:`fields` flattens a record: the config's
and the result's keys, nested ones joined with dots (``timing.median``). Standard library
only, so the analysis reads it without torch.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["REQUIRED", "LABELS", "LISTS", "ROWS", "TIMED", "fields", "absent", "typed", "kind", "unfit"]

REQUIRED = {
    "fig3": ("sweep", "method", "mode", "d", "r", "timing.median", "timing.samples", "peak_bytes"),
    "clients": ("method", "d", "D", "K", "r", "client_rank", "tau", "timing.median", "timing.samples", "peak_bytes",
                "ranks", "rank_float64", "energy_kept_min"),
    "clients_models": ("preset", "clients", "stacked_rank"),
    "table4": ("variant", "timing.median", "timing.samples", "peak_bytes", "gap_to_svd", "excess"),
    "florist_steps": ("preset", "row", "timing.samples", "modules", "modules_total", "flops_counted", "ops",
                      "host_reads"),
    "pipeline": ("preset", "row", "method", "timing.samples", "ranks", "host_reads"),
    "fig4_rank": ("method", "p", "group", "relative_error", "optimal_error"),
    "fig4_cond": ("method", "kappa", "relative_error"),
    "fig1": ("method", "clients", "client_rank", "downlink_params_full"),
    "trained": ("clients",),
    "peft": ("model", "p", "modules", "clients", "rows"),
    "backends": ("case", "backend", "ms_1t", "gap_to_optimum"),
    "federated": ("variant", "method", "seed"),
}
"""The fields each drawn experiment's figure, table and verdicts read."""

LABELS = ("sweep", "method", "mode", "variant", "group", "case", "backend", "preset", "model", "row")
"""The :data:`REQUIRED` fields that hold names (strings)."""

LISTS = ("timing.samples", "gap_to_svd", "excess", "relative_error", "optimal_error", "ranks", "rank_float64")
"""The :data:`REQUIRED` fields that hold a non-empty list of numbers (per sample, per
matrix); every field in neither tuple (nor ``rows``) holds one number. A field of another
type (a hand-edited ``"timing": {"median": "fast"}``) makes the result not whole, like a
missing one. A measured error may be NaN or infinite, or null as strict JSON writes those
(a method that failed at kappa = 1e10 is a result the report names, not a damaged file);
the :data:`TIMED` lists hold finite numbers only."""

TIMED = ("timing.samples",)
"""Fields checked wherever a result records them, required or not: the timing samples every
timed statistic is computed from."""

ROWS = {"labels": ("method", "setting", "label"), "lists": ("samples_s",),
        "numbers": ("median_s", "min_s", "max_s", "n", "excess_max", "rank_min", "rank_max", "rank_mean", "params")}
"""A ``rows`` field (the peft comparison: one object per method) holds a non-empty list of
objects, each with these names, lists of numbers and numbers."""


def fields(config: dict | None, result: dict | None) -> dict:
    """``{field: value}`` of a record's config and result, nested dicts flattened with dots
    (a result's key wins over the config's of the same name, as the analysis's rows)."""
    out: dict = {}

    def flat(prefix: str, d) -> None:
        for k, v in (d or {}).items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                flat(key, v)
            else:
                out[key] = v

    flat("", config)
    flat("", result)
    return out


def absent(v) -> bool:
    """A missing value: null (how a record writes NaN) or NaN (pandas' missing value)."""
    return v is None or (isinstance(v, float) and v != v)


def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _numbers(v, finite: bool = True) -> bool:
    """A non-empty list of numbers: finite ones (``finite``), else numbers or null (NaN)."""
    return isinstance(v, list) and bool(v) and all(
        (_number(x) and math.isfinite(x)) if finite else (x is None or _number(x)) for x in v)


def _row_ok(r) -> bool:
    return (isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ROWS["labels"])
            and all(_numbers(r.get(k)) for k in ROWS["lists"])
            and all(_number(r.get(k)) for k in ROWS["numbers"]))


def typed(field: str, v) -> bool:
    """``v`` has the type field ``field`` holds (:data:`LABELS`, :data:`LISTS`, ``rows``,
    else a number)."""
    if field in LABELS:
        return isinstance(v, str)
    if field == "rows":
        return isinstance(v, list) and bool(v) and all(map(_row_ok, v))
    if field in LISTS:
        return _numbers(v, finite=field in TIMED)
    return _number(v)


def kind(field: str) -> str:
    """What field ``field`` holds, in words."""
    return ("a name" if field in LABELS else "a list of method rows" if field == "rows"
            else "a non-empty list of finite numbers" if field in TIMED
            else "a non-empty list of numbers" if field in LISTS else "a number")


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def unfit(experiment: str, got: dict) -> str | None:
    """What keeps fields ``got`` (:func:`fields`) from being a whole ``experiment`` result,
    or None: its :data:`REQUIRED` fields missing, else those of another type (and any
    :data:`TIMED` field recorded with another type)."""
    need = REQUIRED.get(experiment, ())
    missing = [f for f in need if f not in got or absent(got[f])]
    if missing:
        return f"no {', '.join(missing)}"
    checked = need + tuple(f for f in TIMED if f not in need and f in got)
    wrong = [f"{f}={_show(got[f])} is not {kind(f)}" for f in checked if not typed(f, got[f])]
    return "; ".join(wrong) or None
