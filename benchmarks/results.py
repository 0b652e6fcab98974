"""The one result format: one JSON file per result, the same name every time.

``<out>/<experiment>/<key>.json`` holds::

    {"experiment": ..., "key": ..., "config": {...}, "result": {...},
     "machine": {...}, "versions": {...}, "git_sha": ..., "device": "cpu" | "cuda:0",
     "dtype": "float32", "threads": 1, "loadavg": 0.4, "steal": 0.0, "created": "2026-11-22T14:00:00"}

``config`` says what was measured (the case and the method), ``result`` what came out;
``machine`` is :func:`fraq._machine.machine_record` (GPU name, driver, CUDA and cuSOLVER
on a CUDA device). Every writer in benchmarks/ (the runner, the experiments, the report,
the demo) goes through :func:`write_result`, and :func:`analysis.loaders.load_results`
is the one reader; its ``RESULT_KEYS`` and ``FORMAT_KEYS`` are the keys a file must have
(the loader skips a file without them, naming it and the keys). A rerun replaces the file
(written beside it, then renamed). The format is written in :mod:`fraq._results` (the
federated harness in ``fraq`` writes it too and may not import ``benchmarks``); this
module hands it on.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fraq.internals import check_dir_out
from fraq.internals import result_path, result_record, versions, write_result

__all__ = ["check_out_dir", "result_path", "result_record", "versions", "write_result"]


def check_out_dir(out: str | Path) -> None:
    """Stop a command-line tool before any work, with one line and exit status 2, when its
    results directory ``out`` is a file (or lies under one) or cannot be created."""
    try:
        check_dir_out(out, "--out")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
