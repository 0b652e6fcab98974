"""``make bench-pytest-compare``'s verdicts: each quick check against the saved baseline, as
ratios to a calibration kernel timed in the same run, with a threshold above the noise.

    .venv/bin/python -m benchmarks.pytest_compare --new NEW.json [--storage .benchmarks] [--fail 25]

Two runs of the same code on a shared virtual machine differ by tens of percent in every
check together (clock, steal time, cache neighbours): comparing raw times across runs
reports regressions that are the machine's. Each run therefore times a fixed calibration
kernel (``tests/bench/test_quick.py::test_calibration``, a float32 matrix product that no
project code takes part in), and a check's statistic is its minimum over the calibration's
minimum *in the same run*: the machine's speed cancels, the code's does not.

The calibration does not cancel everything: on a shared 2-core guest a check's minimum over
50+ rounds moves by tens of percent from one process to the next on identical code, check
by check (the layout its buffers land in, a neighbour on the sibling hyperthread), and the
calibration kernel moves on its own. So the comparison also measures that noise in the
two runs at hand: the spread of the calibrated changes across the checks (1.4826 times
their median absolute deviation, on a log scale: robust to the few checks a change
really moves), and judges no change within :data:`BETWEEN_Z` times it.

A check regressed when its calibrated ratio grew by more than the threshold: the largest of
``--fail`` percent, twice the check's own noise (the relative spread between its minimum
and its first quartile, in either run: a minimum that moves that much within a run cannot
be judged more finely across runs) and the runs' spread above. Where the check's own noise
exceeds :data:`MAX_NOISE`, or the runs' spread makes the threshold exceed
:data:`MAX_THRESHOLD`, the check is reported as "cannot judge" instead, and one line says
which noise it was. A run taken on a busy machine (:func:`busy`) is not compared: the
comparison says it cannot judge. Exit status 1 when a check regressed, 2 when the runs cannot be
compared (a busy machine, no baseline, no calibration, no check in common, a run that is damaged or not a
pytest-benchmark run: :func:`benchmarks.pytest_baseline.read_run`, whose line names the
file), else 0; every outcome is a table or one line, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from benchmarks.pytest_baseline import RunError, read_run

__all__ = ["BETWEEN_Z", "BUSY_LOAD", "CALIBRATION", "MAX_THRESHOLD", "between_runs", "busy", "compare", "main"]

CALIBRATION = "test_calibration"
"""The calibration check's test name (its pytest-benchmark ``name``)."""

MAX_NOISE = 0.5
"""A check whose own relative spread (first quartile over minimum, less 1) exceeds this
in either run is not judged."""

BETWEEN_Z = 3.0
"""Spreads of the runs' calibrated changes (:func:`between_runs`) within which a change is
that noise: at 3, a check of unchanged code crosses it about 3 times in 1000 (normal on
the log scale), under one false "slower" in a run of the suite's ~90 checks."""

MIN_SPREAD_CHECKS = 8
"""Fewest checks (each within :data:`MAX_NOISE`) the runs' spread is measured on; with fewer,
it is not measured and the line says so."""

BUSY_LOAD = 0.5
"""A run is busy when its 1-minute load average exceeds its torch threads by more than this
(the report's rule, ``analysis.verdicts.BUSY_LOAD``): something else was runnable beside the
timed threads, and its checks slowed by it, each by its own amount, which no calibration
cancels."""


def busy(run: dict) -> str:
    """Why a pytest-benchmark run was taken on a busy machine, or "": its ``machine_info``'s
    ``fraq.loadavg`` (the 1-minute load average at the run's end, ``tests/conftest.py``)
    above the checks' threads (``fraq.bench_threads``) + :data:`BUSY_LOAD`. A run without them is not judged busy."""
    info = (run.get("machine_info") or {}).get("fraq") or {}
    load, threads = info.get("loadavg"), info.get("bench_threads", info.get("threads"))
    if not isinstance(load, (int, float)) or not isinstance(threads, (int, float)):
        return ""
    if load > threads + BUSY_LOAD:
        return f"1-min load average {load:.2f} above its {threads:g} thread(s) + {BUSY_LOAD:g}"
    return ""


MAX_THRESHOLD = 1.0
"""A threshold above this (a doubling) judges nothing a regression would plausibly do: such
a check is "cannot judge"."""


def _stats(run: dict) -> dict[str, dict]:
    """name -> stats of every benchmark of a pytest-benchmark JSON."""
    return {b["fullname"]: b["stats"] for b in run.get("benchmarks", []) if isinstance(b.get("stats"), dict)}


def _is_calibration(name: str) -> bool:
    """The calibration check, parametrized (``test_calibration[calibration]``) or not."""
    return name.split("[")[0].endswith(CALIBRATION)


def _calibration(stats: dict[str, dict]) -> float | None:
    mins = [s["min"] for name, s in stats.items() if _is_calibration(name)]
    return mins[0] if mins and mins[0] > 0 else None


def _noise(s: dict) -> float:
    return max(0.0, s["q1"] / s["min"] - 1.0) if s.get("min", 0) > 0 else float("inf")


def between_runs(changes: list[float]) -> float | None:
    """The runs' noise as a relative change: exp(:data:`BETWEEN_Z` x s) - 1, s being 1.4826 x
    the median absolute deviation of log(1 + change) over ``changes`` (the calibrated changes
    of the checks steady within their runs); None with fewer than :data:`MIN_SPREAD_CHECKS`."""
    if len(changes) < MIN_SPREAD_CHECKS:
        return None
    logs = [math.log1p(c) for c in changes]
    mid = statistics.median(logs)
    spread = 1.4826 * statistics.median(abs(x - mid) for x in logs)
    return math.expm1(BETWEEN_Z * spread)


def compare(base: dict, new: dict, fail_pct: float) -> tuple[list[dict], str | None]:
    """Rows (check, calibrated change, threshold, verdict, and ``between``: the runs' noise,
    :func:`between_runs`, None where not measured) of the checks in both runs, or an empty
    list and the reason they cannot be compared."""
    for which, run in (("the baseline", base), ("the new run", new)):
        why = busy(run)
        if why:
            return [], f"cannot judge: {which} ran on a busy machine ({why}); rerun it on an idle one"
    b, n = _stats(base), _stats(new)
    cb, cn = _calibration(b), _calibration(n)
    if cb is None or cn is None:
        which = "the baseline" if cb is None else "the new run"
        return [], f"{which} has no calibration check ({CALIBRATION}): save a baseline with the current tests/bench"
    common = sorted(k for k in b.keys() & n.keys() if not _is_calibration(k))
    if not common:
        return [], "the two runs have no check in common"
    rows = []
    for name in common:
        change = (n[name]["min"] / cn) / (b[name]["min"] / cb) - 1.0
        rows.append(dict(check=name, change=change, noise=max(_noise(b[name]), _noise(n[name]))))
    between = between_runs([r["change"] for r in rows if r["noise"] <= MAX_NOISE])
    for r in rows:
        threshold = max(fail_pct / 100.0, 2.0 * r["noise"], between or 0.0)
        # a slowdown by t is a speed-up by t / (1 + t): the same distance on the log scale
        verdict = ("cannot judge" if r["noise"] > MAX_NOISE or threshold > MAX_THRESHOLD
                   else "slower" if r["change"] > threshold
                   else "faster" if r["change"] < -threshold / (1.0 + threshold) else "same")
        r.update(threshold=threshold, verdict=verdict, between=between)
    return rows, None


def _table(rows: list[dict]) -> str:
    width = max(len(r["check"]) for r in rows)
    lines = [f"{'check':<{width}}  {'change':>8}  {'threshold':>9}  verdict"]
    for r in rows:
        lines.append(f"{r['check']:<{width}}  {100 * r['change']:+7.1f}%  {100 * r['threshold']:8.1f}%  {r['verdict']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.pytest_baseline import baselines

    ap = argparse.ArgumentParser(prog="python -m benchmarks.pytest_compare", description=__doc__.split("\n")[0])
    ap.add_argument("--new", type=Path, required=True, help="the new run's pytest-benchmark JSON (--benchmark-json)")
    ap.add_argument("--storage", type=Path, default=Path(".benchmarks"),
                    help="pytest-benchmark's storage folder holding the saved baseline (default .benchmarks)")
    ap.add_argument("--fail", type=float, default=25.0, help="smallest change judged, percent (default 25)")
    args = ap.parse_args(argv)
    if not args.fail > 0:
        ap.error(f"--fail(={args.fail:g}) must be a positive percentage")
    saved = baselines(args.storage)
    if not saved:
        print(f"error: no saved baseline in {args.storage}: save one first with `make bench-pytest SAVE=NAME`",
              file=sys.stderr)
        return 2
    try:
        base = read_run(saved[-1])
        new = read_run(args.new)
    except RunError as exc:
        print(f"error: cannot read the runs to compare: {exc}", file=sys.stderr)
        return 2
    rows, why = compare(base, new, args.fail)
    if why:
        print(f"error: {args.new} against {saved[-1]}: {why}" if why.startswith("cannot judge") else
              f"error: cannot compare {args.new} with {saved[-1]}: {why}", file=sys.stderr)
        return 2
    print(f"{args.new} against {saved[-1]}: each check's minimum over the calibration's minimum in its own run\n")
    print(_table(rows))
    slower = [r["check"] for r in rows if r["verdict"] == "slower"]
    unjudged = sum(r["verdict"] == "cannot judge" for r in rows)
    print(f"\n{len(slower)} slower, {unjudged} too noisy to judge, of {len(rows)} checks")
    print(_noise_line(rows))
    return 1 if slower else 0


def _noise_line(rows: list[dict]) -> str:
    """One line: how far the two runs' checks moved among themselves, and what that leaves judged."""
    between = rows[0]["between"]
    if between is None:
        return (f"the runs' spread is not measured (fewer than {MIN_SPREAD_CHECKS} steady checks): thresholds "
                "from --fail and each check's own noise alone")
    line = (f"the checks' calibrated changes spread by {100 * between:.0f}% between the two runs "
            f"({BETWEEN_Z:g} robust spreads): no change within that is judged")
    if between > MAX_THRESHOLD:
        line += (f"; above {100 * MAX_THRESHOLD:.0f}%, no check is judged: two runs of the same code differ that "
                 "much on this machine (`make regress`, asv over several processes per benchmark, judges commits "
                 "with that variance in its samples)")
    return line


if __name__ == "__main__":
    sys.exit(main())
