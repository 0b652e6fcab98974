"""Verdicts on the paper's claims, each with the interval it rests on.

A claim is tested as a statistic of measured samples against a threshold ("the ratio of
fixed to adaptive time is above 1"). The samples come in groups: the repeats of one
timing, or the per-matrix errors of one method at one point. The interval is the
**central 95% of the statistic over single draws**: each of :data:`DRAWS` draws takes one
sample from every group at random (a seeded generator, so a rerun of the analysis gives
the same interval) and recomputes the statistic. It is the range in which the statistic
of a single repeat falls, wider than an interval for the median, so that the verdict of
one run predicts the verdict of the next:

- **agrees**: the whole interval is on the claim's side of the threshold;
- **disagrees**: none of it is;
- **inconclusive**: it straddles the threshold;
- **no verdict**: a point the claim covers was not measured (NaN, missing, failed); the
  point is named, and a warning says so.

Counts (downlink parameters, FLOPs) are exact: their interval is the value itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["DRAWS", "HOW", "Verdict", "judge", "exact", "holds", "not_measured"]

DRAWS = 2000
"""Draws per interval: the 2.5th and 97.5th percentiles of 2,000 draws move by well under
the width of the interval between seeds."""

HOW = ("Every verdict carries the interval it rests on, in brackets: the central 95% of the "
       "statistic recomputed over 2,000 draws that each take one repeat of every timing (or one matrix "
       "or module of every error) at random. **agrees**: the whole interval satisfies the paper's claim "
       "as tested; **disagrees**: none of it does; **inconclusive**: it straddles the claim's threshold; "
       "**no verdict**: a point the claim covers was not measured (listed under *Not measured*). "
       "Counts (parameters, FLOPs) are exact and carry no interval.")
"""The paragraph the report prints once, above the verdicts."""


@dataclass(frozen=True)
class Verdict:
    """One claim's outcome: ``word`` (agrees / disagrees / inconclusive / no verdict), the
    statistic at the groups' centres (``value``) and its interval (``lo``, ``hi``), and the
    points that were not measured (``missing``)."""

    word: str
    value: float = float("nan")
    lo: float = float("nan")
    hi: float = float("nan")
    missing: tuple[str, ...] = ()

    def bold(self) -> str:
        return f"**{self.word}**"

    def interval(self, fmt: str = ".3g", unit: str = "") -> str:
        """``[lo, hi]`` formatted, or the missing points for a verdict not given."""
        if self.missing:
            return f"not measured: {', '.join(self.missing)}"
        if self.lo == self.hi:
            return "exact"
        return f"[{self.lo:{fmt}}{unit}, {self.hi:{fmt}}{unit}]"

    def __str__(self) -> str:
        return f"{self.bold()} ({self.interval()})"


def _side(x, above: float | None, below: float | None) -> bool:
    return (above is None or x > above) and (below is None or x < below)


def judge(groups: Mapping[str, object], statistic: Callable[[dict], np.ndarray], *, above: float | None = None,
          below: float | None = None, center: Callable = np.median, claim: str = "", seed: int = 0) -> Verdict:
    """The verdict on "``statistic`` > ``above``" (and/or "< ``below``") over ``groups``.

    ``groups`` maps a point's name to its samples (repeats or per-matrix values);
    ``statistic`` takes ``{name: array}`` and returns an array (it is called once with each
    group's ``center`` and once with ``(DRAWS,)`` arrays of single draws, so it must be
    elementwise: ``g["a"] / g["b"]``, ``np.minimum``, ``np.max(np.stack(...), axis=0)``).
    A group that is empty or holds a non-finite sample is not measured: the verdict is
    "no verdict", naming it, with a warning (``claim`` names the claim in it).
    """
    if above is None and below is None:
        raise ValueError("judge needs a threshold: above= or below=")
    arrays, missing = {}, []
    for name, samples in groups.items():
        a = np.asarray(samples if samples is not None else [], dtype=float).ravel()
        if a.size == 0 or not np.isfinite(a).all():
            missing.append(f"{name} ({'no samples' if a.size == 0 else 'NaN or inf'})")
        arrays[name] = a
    if missing:
        return not_measured(claim, missing)
    value = float(statistic({k: np.asarray(center(a)) for k, a in arrays.items()}))
    rng = np.random.default_rng(seed)
    draws = {k: a[rng.integers(0, a.size, DRAWS)] for k, a in arrays.items()}
    stats = np.asarray(statistic(draws), dtype=float)
    lo, hi = (float(v) for v in np.percentile(stats, [2.5, 97.5]))
    if _side(lo, above, below) and _side(hi, above, below):
        word = "agrees"
    elif not (_side(lo, above, below) or _side(hi, above, below)) and not _side(value, above, below):
        word = "disagrees"
    else:
        word = "inconclusive"
    return Verdict(word, value, lo, hi)


def exact(value: float, *, above: float | None = None, below: float | None = None) -> Verdict:
    """The verdict on an exact count (no sampling noise): agrees or disagrees."""
    return Verdict("agrees" if _side(value, above, below) else "disagrees", float(value), float(value), float(value))


def holds(ok: bool) -> Verdict:
    """The verdict on an exact yes/no property (an ordering of counts)."""
    return Verdict("agrees" if ok else "disagrees", float(ok), float(ok), float(ok))


def not_measured(claim: str, missing: list[str]) -> Verdict:
    """"no verdict", naming the points, with a warning."""
    warnings.warn(f"no verdict on '{claim}': not measured: {', '.join(missing)}", stacklevel=3)
    return Verdict("no verdict", missing=tuple(missing))
