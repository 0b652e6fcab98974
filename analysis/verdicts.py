"""Verdicts on the paper's claims, each with the interval it rests on.

A claim is tested as a statistic of measured samples against a threshold ("the ratio of
fixed to adaptive time is above 1"). The samples come in groups: the repeats of one
timing, or the per-matrix errors of one method at one point. The interval depends on
whether the samples are paired.

**Paired** (``paired=True``: every group's sample k comes from round k of one round-robin
run, :func:`benchmarks.measure.timing.round_robin`). The statistic is computed round by
round (``a_k / b_k``), so a drift of the machine's speed between rounds, which slows
every call of a round alike, cancels. The value is the median of the per-round
statistics and the interval is the **sign-test (order-statistic) interval for that
median**: [x_(j), x_(n+1-j)] with the largest j whose coverage
1 - 2 P(Bin(n, 1/2) <= j - 1) is at least 95%. Why this one: its coverage is exact for
any continuous distribution of the per-round statistic, with no symmetry assumed (a
Wilcoxon signed-rank interval assumes a symmetric one; ratios of timings are skewed by
load spikes), and an outlier moves it by one order statistic at most (from n = 9 rounds
on, one outlier on either side is outside it). A bootstrap over rounds was not used: at
the few rounds a slow method allows (n = 3 has 10 distinct resamples) its percentile
interval is a handful of order statistics with no stated coverage (Efron and Tibshirani,
*An Introduction to the Bootstrap*, 1993, for the method).
References: Hollander, Wolfe and Chicken, *Nonparametric Statistical Methods*, 3rd ed.
(Wiley 2014), Sec. 3.6; Conover, *Practical Nonparametric Statistics*, 3rd ed. (1999),
Sec. 3.2.

**Rounds that stopped once decided** (``timing.looks``: the runner looked at every round
count from ``first`` to ``last`` and stopped at the first decided one,
:func:`benchmarks.measure.paired.decided`) are judged with the ranks of the same
group-sequential sign test (:func:`fraq._sign_test.sign_ranks` over the looks, :func:`looks`):
an interval at the nominal 95% after such a stop would miss the median more often than 5%
(7.1% over the looks 6..12), the runner's own mistake made again. Over the looks 6..12 the
ranks are j = 1 at 6..9 and 2 at 10..12, and the chance that the interval misses the median
at whatever look the rounds stopped is at most 176 / 4096 = 4.3%. A result without
``timing.looks`` is judged as rounds of a fixed count (one look, the plain sign test).

**Fewer than** :data:`MIN_ROUNDS` **samples** (paired rounds, or the repeats of the
smallest group unpaired): no sign-test interval reaches 95% (n = 5: 94%), and the 2.5th and
97.5th percentiles of draws from five or fewer values are nearly their extremes, with no
stated coverage. The verdict is **descriptive**: the statistic's value alone, printed with
"descriptive: n < 6, no interval".

**Not paired** (separate runs, per-matrix errors, or groups of unequal length; a paired
request on such groups falls back with a warning). The interval is the **central 95% of
the statistic over single draws**: each of :data:`DRAWS` draws takes one sample from
every group at random (a seeded generator, so a rerun of the analysis gives the same
interval) and recomputes the statistic. It is the range in which the statistic of a
single repeat falls, wider than an interval for the median, so that the verdict of one
run predicts the verdict of the next.

The words:

- **agrees**: the whole interval is on the claim's side of the threshold;
- **disagrees**: none of it is;
- **inconclusive**: it straddles the threshold;
- **descriptive**: fewer than :data:`MIN_ROUNDS` samples, the value without an interval or a
  side;
- **no verdict**: a point the claim covers was not measured (NaN, missing, failed), or
  the machine was busy while it was measured (:func:`busy`: load average or steal time
  above :data:`BUSY_LOAD` / :data:`BUSY_STEAL`); the verdict names the point, or says
  "withheld: machine busy", and a warning (:class:`analysis.notes.NotMeasured`,
  :class:`analysis.notes.Busy`) says which and why, for the report to list once.

Counts (downlink parameters, FLOPs) are exact: their interval is the value itself.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from analysis.notes import BUSY_LOAD, BUSY_STEAL, Busy, Note, NotMeasured  # busy's thresholds, with its note
from fraq._sign_test import sign_error, sign_ranks  # pure Python: the one rule the runner decides by

__all__ = ["BUSY_LOAD", "BUSY_STEAL", "DESCRIPTIVE", "against_range", "DRAWS", "HOW", "MIN_ROUNDS", "Verdict", "busy",
           "judge", "exact", "holds", "looks", "milliseconds", "not_measured", "ours", "paired", "samples",
           "sign_interval"]

DRAWS = 2000
"""Draws per unpaired interval: the 2.5th and 97.5th percentiles of 2,000 draws move by well
under the width of the interval between seeds."""

LEVEL = 0.95
"""Coverage of every interval."""

MIN_ROUNDS = 6
"""The fewest samples with an interval or a verdict: the fewest paired rounds with a sign-test
interval of 95% (n = 6 gives [min, max] at 1 - 2 / 2^6 = 96.9%; n = 5 reaches only 93.8%),
and the same floor for the draws of unpaired samples. Below it a verdict is "descriptive"."""

DESCRIPTIVE = f"descriptive: n < {MIN_ROUNDS}, no interval"
"""What a verdict on fewer than :data:`MIN_ROUNDS` samples prints in place of its interval."""

HOW = ("Every verdict carries the interval it rests on, in brackets. Timings taken round-robin in one "
       "process are paired: the statistic is computed round by round and the interval is the sign-test "
       "95% interval of its median over rounds (order statistics; exact for any distribution, one outlier "
       "moves it by one rank). Other samples (separate runs, per-matrix errors) are not: the interval is the "
       "central 95% of the statistic recomputed over 2,000 draws that each take one repeat of every timing "
       "(or one matrix or module of every error) at random. **agrees**: the whole interval satisfies the "
       "paper's claim as tested; **disagrees**: none of it does; **inconclusive**: it straddles the claim's "
       f"threshold; **descriptive**: fewer than {MIN_ROUNDS} samples (paired rounds, or repeats), too few for a "
       "95% interval (the value is printed alone); rounds that stopped once decided are judged with the ranks "
       "of the sign test over every round count the runner looked at, so the 5% holds over all the looks; "
       "**no verdict**: a point the claim covers was not measured "
       "(listed under *Not measured or skipped*), or the machine was busy (load average above the run's threads "
       "+ 0.5, or steal time above 5%; said once there). Counts (parameters, FLOPs) are exact and carry no interval.")
"""The paragraph the report prints once, above the verdicts."""


@dataclass(frozen=True)
class Verdict:
    """One claim's outcome: ``word`` (agrees / disagrees / inconclusive / descriptive / no
    verdict), the statistic's value (``value``) and its interval (``lo``, ``hi``), the points
    that were not measured (``missing``), why a verdict was withheld (``withheld``) and how
    the interval was computed (``method``: ``"paired"``, ``"unpaired"`` or ``"exact"``;
    ``rounds``: the paired rounds, or the smallest group's samples unpaired; ``looks``: the
    first and last round counts the rounds could have stopped at, where more than one)."""

    word: str
    value: float = float("nan")
    lo: float = float("nan")
    hi: float = float("nan")
    missing: tuple[str, ...] = ()
    withheld: str = ""
    method: str = "exact"
    rounds: int = 0
    looks: tuple[int, ...] = ()

    def bold(self) -> str:
        return f"**{self.word}**"

    @property
    def has_interval(self) -> bool:
        """Whether :meth:`interval` prints one: not for a descriptive verdict (fewer than
        :data:`MIN_ROUNDS` samples: its value is the statistic alone) nor for paired rounds
        at a look whose sign test has no interval."""
        return self.word != "descriptive" and not (self.method == "paired" and math.isnan(self.lo))

    def interval(self, fmt: str = ".3g", unit: str = "") -> str:
        """``[lo, hi]`` formatted; or, below :data:`MIN_ROUNDS` samples, that there are too
        few for one (:data:`DESCRIPTIVE`); or why there is no verdict."""
        if self.missing:
            return f"not measured: {', '.join(self.missing)}"
        if self.withheld:
            return f"withheld: {self.withheld}"
        if self.word == "descriptive":
            what = f"median of {_rounds(self.rounds)}" if self.method == "paired" else \
                f"{self.rounds} sample{'' if self.rounds == 1 else 's'}"
            return f"{what}; {DESCRIPTIVE}"
        if not self.has_interval:
            return f"median of {_rounds(self.rounds)}, no interval at this look"
        if self.lo == self.hi:
            return "exact"
        text = f"[{self.lo:{fmt}}{unit}, {self.hi:{fmt}}{unit}]"
        if self.method != "paired":
            return text
        stop = f", stopped between {self.looks[0]} and {self.looks[-1]}" if len(self.looks) > 1 else ""
        return f"{text}, paired over {self.rounds} rounds{stop}"

    def measured(self, fmt: str = ".3g", prefix: str = "", unit: str = "") -> str:
        """``prefix value unit [lo, hi]`` (``prefix value unit (median of n paired rounds, too
        few for an interval)``), or only why there is no value (a withheld or unmeasured
        verdict prints no NaN)."""
        if self.missing or self.withheld or not math.isfinite(self.value):
            return self.interval(fmt, unit)
        iv = self.interval(fmt, unit)
        return f"{prefix}{self.value:{fmt}}{unit} {iv if self.has_interval else f'({iv})'}"

    def __str__(self) -> str:
        return f"{self.bold()} ({self.interval()})"


def _rounds(n: int) -> str:
    return f"{n} paired round{'' if n == 1 else 's'}"


def sign_interval(x, level: float = LEVEL, looks=None) -> tuple[float, float, float]:
    """The sign-test interval for the median of ``x``: ``(lo, hi, coverage)``.

    [x_(j), x_(n+1-j)] (order statistics, 1-based) with j from
    :func:`fraq._sign_test.sign_ranks` over ``looks`` (the sample counts at which the rounds
    could have stopped; None: n alone, the fixed-n test, the largest j with coverage
    1 - 2 P(Bin(n, 1/2) <= j - 1) >= ``level``); ``coverage``: 1 minus the exact chance that
    the interval at any of the looks misses the median. Where no j qualifies (fewer than
    :data:`MIN_ROUNDS` samples at one look, for 95%) there is no interval: ``(nan, nan, nan)``.
    """
    x = np.sort(np.asarray(x, dtype=float).ravel())
    n = x.size
    if n == 0:
        raise ValueError("sign_interval needs at least one sample")
    at = {n} | {int(k) for k in (looks or ())}
    j = sign_ranks(at, level)[n]
    if j is None:
        return float("nan"), float("nan"), float("nan")
    return float(x[j - 1]), float(x[n - j]), 1.0 - sign_error(at, level)


def busy(machine) -> str:
    """Why the machine was busy during a run, or "" when it was not.

    ``machine``: one record or several (dicts or DataFrame rows) with ``loadavg`` (1-minute
    load average when the result was written), ``threads`` (the run's torch threads) and,
    where recorded, ``steal`` (the share of CPU time stolen since the previous record, over
    at least ten seconds). A missing field is not evidence of a busy machine."""
    if machine is None:
        return ""
    if hasattr(machine, "to_dict") and hasattr(machine, "columns"):  # a DataFrame: its rows
        machine = machine.to_dict("records")
    records = [machine] if isinstance(machine, Mapping) else list(machine)
    loads: dict[float, list[float]] = {}  # threads -> the loads above their threshold
    steals = []
    for rec in records:
        load, threads, steal = (_number(rec.get(k)) for k in ("loadavg", "threads", "steal"))
        threads = 1.0 if math.isnan(threads) else threads
        if load > threads + BUSY_LOAD:
            loads.setdefault(threads, []).append(load)
        if steal > BUSY_STEAL:
            steals.append(steal)
    n = len(records)
    reasons = [f"load average {_span(v, '.2f')} above {t:g} thread(s) + {BUSY_LOAD:g} in {len(v)} of {n} results"
               for t, v in loads.items()]
    if steals:
        reasons.append(f"steal time {_span([100 * s for s in steals], '.1f')}% above {100 * BUSY_STEAL:g}% in "
                       f"{len(steals)} of {n} results")
    return "; ".join(reasons)


def _span(values: list[float], fmt: str) -> str:
    """``lo-hi`` of ``values`` (one number when they are all equal at ``fmt``)."""
    lo, hi = f"{min(values):{fmt}}", f"{max(values):{fmt}}"
    return lo if lo == hi else f"{lo}-{hi}"


def paired(*sets, group: str = "timing.group", samples: str = "timing.samples") -> bool:
    """Whether the samples of compared results can be judged round by round (``paired=True``).

    ``sets``: the results compared at each point (DataFrames, or lists of dicts with the
    flattened ``group`` and ``samples`` fields of :mod:`benchmarks.measure.paired`). They
    pair when every set's results carry one and the same group id (measured together in
    the same rounds: results of separate runs never share one), and the results either
    have one sample count or all at least :data:`MIN_ROUNDS` (rounds that stopped when a
    point's comparisons were decided, or a call that left its point's rounds when its own
    were, :func:`benchmarks.measure.paired.paired_rounds`: sample k is from round k either
    way): :func:`judge` then uses the rounds every result has, the first n of each. A
    statistic that combines several points (the smallest ratio over points) is computed
    round by round: each point's ratio in round k is paired, whatever the other points'
    rounds."""
    lengths = set()
    for rows in sets:
        if hasattr(rows, "to_dict") and hasattr(rows, "columns"):
            rows = rows.to_dict("records")
        ids = {r.get(group) for r in rows}
        if len(ids) != 1 or not isinstance(next(iter(ids)), str):
            return False
        lengths |= {len(r.get(samples) or []) for r in rows}
    return bool(lengths) and (len(lengths) == 1 and lengths != {0} or min(lengths) >= MIN_ROUNDS)


def looks(*sets, looks: str = "timing.looks", samples: str = "timing.samples") -> tuple[int, ...]:
    """The sample counts at which the compared results' rounds could have stopped, for
    :func:`judge` (``looks=``): every count from ``first`` to ``last`` of each result's
    ``looks`` (:mod:`benchmarks.measure.paired`), together. A result without ``looks`` (rounds of
    a fixed count, or written before the runner recorded them) adds its own sample count.
    Together, because a statistic over several points is judged over the rounds they all
    have: the smallest of the points' stops, which is among the union of their looks."""
    out: set[int] = set()
    for rows in sets:
        if hasattr(rows, "to_dict") and hasattr(rows, "columns"):
            rows = rows.to_dict("records")
        for r in rows:
            span = r.get(looks)
            if isinstance(span, (list, tuple, np.ndarray)) and len(span) == 2:
                out |= set(range(int(span[0]), int(span[1]) + 1))
            else:
                out.add(len(r.get(samples) or []))
    out.discard(0)
    return tuple(sorted(out))


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _side(x, above: float | None, below: float | None) -> bool:
    return (above is None or x > above) and (below is None or x < below)


def judge(groups: Mapping[str, object], statistic: Callable[[dict], np.ndarray], *, above: float | None = None,
          below: float | None = None, center: Callable = np.median, claim: str = "", seed: int = 0,
          paired: bool = False, machine=None, looks: tuple[int, ...] = ()) -> Verdict:
    """The verdict on "``statistic`` > ``above``" (and/or "< ``below``") over ``groups``.

    ``groups`` maps a point's name to its samples (repeats or per-matrix values);
    ``statistic`` takes ``{name: array}`` and returns an array, elementwise
    (``g["a"] / g["b"]``, ``np.minimum``, ``np.max(np.stack(...), axis=0)``).

    ``paired=True``: sample k of every group comes from round k of one round-robin run;
    the statistic is computed per round, its value is the median over rounds and its
    interval the sign-test interval (module docstring), with the ranks of the sign test over
    ``looks`` (:func:`looks`: the round counts the rounds could have stopped at; n is
    always one of them; none: the fixed-n test at n). Groups of unequal length (points
    whose rounds stopped at different counts, :func:`paired`) are judged over the rounds
    they all have, the first n of each, when n is at least :data:`MIN_ROUNDS`; below that
    a warning says so and the unpaired interval is used. ``paired=False``: the
    statistic of the groups' ``center`` is the value, and the interval is over
    :data:`DRAWS` single draws.

    Fewer than :data:`MIN_ROUNDS` paired rounds, or a group of fewer than
    :data:`MIN_ROUNDS` samples unpaired: "descriptive", the value alone.

    A group that is empty or holds a non-finite sample is not measured: the verdict is "no
    verdict", naming it, with a warning (``claim`` names the claim in it). ``machine``:
    the records of the runs the samples come from (see :func:`busy`); if they say the
    machine was busy, the verdict is withheld ("no verdict", with the reason).
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
    reason = busy(machine)
    if reason:  # the reason goes in the note: a report says it once, not in every verdict it withholds
        warnings.warn(Busy(claim, reason), stacklevel=2)
        return Verdict("no verdict", withheld="machine busy")
    if paired:
        sizes = {a.size for a in arrays.values()}
        if len(sizes) == 1:
            return _paired(arrays, statistic, above, below, looks)
        if min(sizes) >= MIN_ROUNDS:  # the rounds every point has
            return _paired({k: a[:min(sizes)] for k, a in arrays.items()}, statistic, above, below, looks)
        warnings.warn(Note(f"'{claim}': samples of unequal length {sorted(sizes)} are not paired; "
                           "the unpaired interval is used"), stacklevel=2)
    value = float(statistic({k: np.asarray(center(a)) for k, a in arrays.items()}))
    fewest = min(a.size for a in arrays.values())
    if fewest < MIN_ROUNDS:
        return Verdict("descriptive", value, method="unpaired", rounds=fewest)
    rng = np.random.default_rng(seed)
    draws = {k: a[rng.integers(0, a.size, DRAWS)] for k, a in arrays.items()}
    stats = np.asarray(statistic(draws), dtype=float)
    lo, hi = (float(v) for v in np.percentile(stats, [2.5, 97.5]))
    return Verdict(_word(value, lo, hi, above, below), value, lo, hi, method="unpaired")


def _paired(arrays: dict, statistic: Callable, above, below, looks) -> Verdict:
    per_round = np.asarray(statistic(arrays), dtype=float).ravel()
    n = per_round.size
    value = float(np.median(per_round))
    if n < MIN_ROUNDS:
        return Verdict("descriptive", value, method="paired", rounds=n)
    at = tuple(sorted({n} | {int(k) for k in looks}))
    lo, hi, _ = sign_interval(per_round, looks=at)
    word = "inconclusive" if math.isnan(lo) else _word(value, lo, hi, above, below)
    return Verdict(word, value, lo, hi, method="paired", rounds=n, looks=at if len(at) > 1 else ())


def _word(value, lo, hi, above, below) -> str:
    if _side(lo, above, below) and _side(hi, above, below):
        return "agrees"
    if not (_side(lo, above, below) or _side(hi, above, below)) and not _side(value, above, below):
        return "disagrees"
    return "inconclusive"


def against_range(v: Verdict, low: float, high: float) -> str:
    """Where a verdict on "``low`` < statistic < ``high``" (:func:`judge` with ``above=low``,
    ``below=high``) puts the statistic against a claimed range: "within the paper's range"
    (the whole interval inside it: the verdict agrees), "above the paper's range" or "below
    the paper's range" (the whole interval past that end), or "straddles an end of the
    paper's range"; for a verdict without an interval (descriptive, not measured) the value's
    side, said as the value's. A range is tested against both ends: a ratio of 41x against
    "8-15x" is above it, not in agreement."""
    if v.word == "no verdict" or not math.isfinite(v.value):
        return ""
    if not v.has_interval:
        where = "above" if v.value > high else "below" if v.value < low else "within"
        return f"the value {where} the paper's range"
    if v.lo > high:
        return "above the paper's range"
    if v.hi < low:
        return "below the paper's range"
    if low < v.lo and v.hi < high:
        return "within the paper's range"
    return "straddles an end of the paper's range"


def exact(value: float, *, above: float | None = None, below: float | None = None) -> Verdict:
    """The verdict on an exact count (no sampling noise): agrees or disagrees."""
    return Verdict("agrees" if _side(value, above, below) else "disagrees", float(value), float(value), float(value))


def holds(ok: bool) -> Verdict:
    """The verdict on an exact yes/no property (an ordering of counts)."""
    return Verdict("agrees" if ok else "disagrees", float(ok), float(ok), float(ok))


def not_measured(claim: str, missing: list[str]) -> Verdict:
    """"no verdict", naming the points, with a warning."""
    warnings.warn(NotMeasured(f"no verdict on '{claim}': not measured: {', '.join(missing)}"), stacklevel=3)
    return Verdict("no verdict", missing=tuple(missing))


def ours(v: Verdict, text: str, fmt: str = ".3g", unit: str = "", test: str = "") -> str:
    """How a report section writes a verdict beside our number:
    ``Ours **word** (tested: test): text [lo, hi]``, or the points not measured."""
    tested = f" (tested: {test})" if test else ""
    if v.word == "no verdict":
        return f"Ours {v.bold()}{tested}: {v.interval()}"
    iv = v.interval(fmt, unit)
    return f"Ours {v.bold()}{tested}: {text} {iv if v.has_interval and iv != 'exact' else f'({iv})'}"


def samples(x) -> np.ndarray:
    """A result's samples (a list, or one number) as a float array."""
    return np.asarray(x if isinstance(x, (list, tuple, np.ndarray)) else [x], dtype=float)


def milliseconds(row) -> np.ndarray:
    """A result row's timing samples (``timing.samples``, seconds) in milliseconds."""
    return 1e3 * samples(row["timing.samples"])
