"""``make bench-pytest-compare``'s verdicts: each quick check against the saved baseline, as
ratios to a calibration kernel timed in the same run, with a threshold above the noise.

    .venv/bin/python -m benchmarks.pytest_compare --new NEW.json [--storage .benchmarks] [--fail 25]

Two runs of the same code on a shared virtual machine differ by tens of percent in every
check together (clock, steal time, cache neighbours): comparing raw times across runs
reports regressions that are the machine's. Each run therefore times a fixed calibration
kernel (``tests/bench/test_quick.py::test_calibration``, a float32 matrix product that no
project code takes part in), and a check's statistic is its minimum over the calibration's
minimum *in the same run*: the machine's speed cancels, the code's does not.

A check regressed when its calibrated ratio grew by more than the threshold: the larger of
``--fail`` percent and twice the check's own noise (the relative spread between its
minimum and its first quartile, in either run: a minimum that moves that much within a run
cannot be judged more finely across runs). Where that noise alone exceeds 50%, the check
is reported as "cannot judge" instead. Exit status 1 when a check regressed, 2 when the
runs cannot be compared (no baseline, no calibration, no check in common), else 0; every
outcome is a table or one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["CALIBRATION", "compare", "main"]

CALIBRATION = "test_calibration"
"""The calibration check's test name (its pytest-benchmark ``name``)."""

MAX_NOISE = 0.5
"""A check whose own relative spread (first quartile over minimum, less 1) exceeds this
in either run is not judged."""


def _stats(run: dict) -> dict[str, dict]:
    """name -> stats of every benchmark of a pytest-benchmark JSON."""
    return {b["fullname"]: b["stats"] for b in run.get("benchmarks", []) if isinstance(b.get("stats"), dict)}


def _calibration(stats: dict[str, dict]) -> float | None:
    mins = [s["min"] for name, s in stats.items() if name.endswith(CALIBRATION)]
    return mins[0] if mins and mins[0] > 0 else None


def _noise(s: dict) -> float:
    return max(0.0, s["q1"] / s["min"] - 1.0) if s.get("min", 0) > 0 else float("inf")


def compare(base: dict, new: dict, fail_pct: float) -> tuple[list[dict], str | None]:
    """Rows (check, calibrated change, threshold, verdict) of the checks in both runs, or an
    empty list and the reason they cannot be compared."""
    b, n = _stats(base), _stats(new)
    cb, cn = _calibration(b), _calibration(n)
    if cb is None or cn is None:
        which = "the baseline" if cb is None else "the new run"
        return [], f"{which} has no calibration check ({CALIBRATION}): save a baseline with the current tests/bench"
    common = sorted(k for k in b.keys() & n.keys() if not k.endswith(CALIBRATION))
    if not common:
        return [], "the two runs have no check in common"
    rows = []
    for name in common:
        change = (n[name]["min"] / cn) / (b[name]["min"] / cb) - 1.0
        noise = max(_noise(b[name]), _noise(n[name]))
        threshold = max(fail_pct / 100.0, 2.0 * noise)
        verdict = ("cannot judge" if noise > MAX_NOISE else "slower" if change > threshold
                   else "faster" if change < -threshold else "same")
        rows.append(dict(check=name, change=change, threshold=threshold, noise=noise, verdict=verdict))
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
        base = json.loads(saved[-1].read_text())
        new = json.loads(args.new.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read the runs to compare ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    rows, why = compare(base, new, args.fail)
    if why:
        print(f"error: cannot compare {args.new} with {saved[-1]}: {why}", file=sys.stderr)
        return 2
    print(f"{args.new} against {saved[-1]}: each check's minimum over the calibration's minimum in its own run\n")
    print(_table(rows))
    slower = [r["check"] for r in rows if r["verdict"] == "slower"]
    unjudged = sum(r["verdict"] == "cannot judge" for r in rows)
    print(f"\n{len(slower)} slower, {unjudged} too noisy to judge, of {len(rows)} checks")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
