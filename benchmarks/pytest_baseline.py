"""Whether ``make bench-pytest-compare`` has a saved baseline to compare with, before it runs anything.

    .venv/bin/python -m benchmarks.pytest_baseline [--storage .benchmarks]

pytest-benchmark keeps saved runs in ``<storage>/<machine id>/NNNN_<name>.json``, the
machine id being the platform, the Python implementation and version and the word size
(``Linux-CPython-3.11-64bit``), and ``--benchmark-compare`` reads only this machine id's
folder. Without a saved run there, or with a newest saved run that cannot be compared
(damaged, or not a pytest-benchmark run: :func:`benchmarks.pytest_compare.read_run`), the
comparison would run every check and only then fail; this says so in one line, naming the
file, with the command that saves one, and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["baselines", "main"]


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
        from benchmarks.pytest_compare import RunError, read_run

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
