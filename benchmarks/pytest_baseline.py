"""Whether ``make bench-pytest-compare`` has a saved baseline to compare with, before it runs anything.

    .venv/bin/python -m benchmarks.pytest_baseline [--storage .benchmarks]

pytest-benchmark keeps saved runs in ``<storage>/<machine id>/NNNN_<name>.json``, the
machine id being the platform, the Python implementation and version and the word size
(``Linux-CPython-3.11-64bit``), and ``--benchmark-compare`` reads only this machine id's
folder. Without a saved run there, or with a newest saved run that cannot be compared
(damaged, or not a pytest-benchmark run: :func:`read_run`), the
comparison would run every check and only then fail; this says so in one line, naming the
file, with the command that saves one, and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

__all__ = ["RunError", "baselines", "main", "read_run"]


class RunError(ValueError):
    """A saved or new run that cannot be compared: its one line names the file and what is wrong."""


def read_run(path: Path) -> dict:
    """The pytest-benchmark JSON at ``path``, checked so that :func:`benchmarks.pytest_compare.compare` can trust it: an
    object whose ``benchmarks`` is a list of objects, each with a ``fullname`` (text) and, where
    it has ``stats`` (an errored check has none), a ``min`` that is a positive number of
    seconds and a ``q1`` that is a number no smaller.

    Raises:
        RunError: naming ``path`` and the first thing that is wrong.
    """
    try:
        run = json.loads(Path(path).read_text())
    except OSError as exc:
        raise RunError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RunError(f"{path} is not JSON ({exc})") from None
    if not isinstance(run, dict):
        raise RunError(f"{path} holds a JSON {type(run).__name__}, not a pytest-benchmark run (an object with "
                       "'benchmarks')")
    checks = run.get("benchmarks", [])
    if not isinstance(checks, list):
        raise RunError(f"{path}: 'benchmarks' is a {type(checks).__name__}, not a list")
    for i, b in enumerate(checks):
        if not isinstance(b, dict):
            raise RunError(f"{path}: benchmarks[{i}] is a {type(b).__name__}, not an object")
        name = b.get("fullname")
        if not isinstance(name, str) or not name:
            raise RunError(f"{path}: benchmarks[{i}] has no 'fullname'")
        s = b.get("stats")
        if s is None:
            continue
        if not isinstance(s, dict):
            raise RunError(f"{path}: {name}: 'stats' is a {type(s).__name__}, not an object")
        lo, q1 = s.get("min"), s.get("q1")
        if not _seconds(lo) or lo <= 0:
            raise RunError(f"{path}: {name}: 'min'(={lo!r}) must be a positive number of seconds")
        if not _seconds(q1) or q1 < lo:
            raise RunError(f"{path}: {name}: 'q1'(={q1!r}) must be a number of seconds no smaller than 'min'")
    return run


def _seconds(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def baselines(storage: Path) -> list[Path]:
    """The runs saved in ``storage`` for this machine id, oldest first."""
    from pytest_benchmark.utils import get_machine_id

    return sorted((Path(storage) / get_machine_id()).glob("[0-9][0-9][0-9][0-9]_*.json"))


def main(argv: list[str] | None = None) -> int:
    from pytest_benchmark.utils import get_machine_id

    ap = argparse.ArgumentParser(prog="python -m benchmarks.pytest_baseline", description=__doc__.split("\n")[0])
    ap.add_argument("--storage", type=Path, default=Path(".benchmarks"),
                    help="pytest-benchmark's storage folder (default .benchmarks)")
    args = ap.parse_args(argv)
    saved = baselines(args.storage)
    if saved:
        try:
            read_run(saved[-1])
        except RunError as exc:
            print(f"error: the saved baseline cannot be compared with: {exc}; save a new one with "
                  "`make bench-pytest SAVE=NAME`", file=sys.stderr)
            return 2
        return 0
    others = sorted(p.name for p in args.storage.glob("*") if p.is_dir() and any(p.glob("*.json")))
    also = f" (it holds runs of {', '.join(others)} only)" if others else ""
    print(f"error: no saved pytest-benchmark baseline in {args.storage / get_machine_id()}{also} to compare with: "
          f"save one first with `make bench-pytest SAVE=NAME`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
