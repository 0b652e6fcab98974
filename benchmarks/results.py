"""The one result format: one JSON file per result, the same name every time.

``<out>/<experiment>/<key>.json`` holds::

    {"experiment": ..., "key": ..., "config": {...}, "result": {...},
     "machine": {...}, "versions": {...}, "git_sha": ..., "device": "cpu" | "cuda:0",
     "dtype": "float32", "threads": 1, "loadavg": 0.4, "created": "2026-11-22T14:00:00"}

``config`` says what was measured (the case and the method), ``result`` what came out;
``machine`` is :func:`fraq._machine.machine_record` (GPU name, driver, CUDA and cuSOLVER
on a CUDA device). Every writer in benchmarks/ (the runner, the experiments, the report,
the demo) goes through :func:`write_result`, and :func:`analysis.loaders.load_results`
is the one reader; its ``RESULT_KEYS`` and ``FORMAT_KEYS`` are the keys a file must have
(the loader skips a file without them, naming it and the keys). A rerun replaces the file
(written beside it, then renamed).
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import torch

from fraq._files import check_dir_out, replacing_file

__all__ = ["check_out_dir", "result_path", "result_record", "versions", "write_result"]


def versions() -> dict:
    """fraq, torch, numpy and Python versions (scipy where installed)."""
    import numpy

    import fraq

    out = {"fraq": getattr(fraq, "__version__", "unknown"), "torch": torch.__version__, "numpy": numpy.__version__,
           "python": platform.python_version()}
    try:
        import scipy

        out["scipy"] = scipy.__version__
    except ImportError:
        pass
    return out


def result_record(experiment: str, key: str, config: dict, result: dict, *, device: torch.device | str = "cpu",
                  dtype: torch.dtype | str = torch.float32) -> dict:
    """The record :func:`write_result` writes."""
    from fraq._machine import machine_record

    machine = machine_record(device)
    return dict(experiment=experiment, key=key, config=config, result=result, machine=machine,
                versions=versions(), git_sha=machine.get("git_sha"), device=str(torch.device(device)),
                dtype=str(dtype).removeprefix("torch."), threads=torch.get_num_threads(),
                loadavg=os.getloadavg()[0], created=time.strftime("%Y-%m-%dT%H:%M:%S"))


_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def result_path(out: str | Path, experiment: str, key: str) -> Path:
    """Where :func:`write_result` writes ``key`` of ``experiment``: ``out/<experiment>/<key>.json``."""
    return Path(out) / experiment / f"{_SAFE.sub('_', key)}.json"


def write_result(out: str | Path, experiment: str, key: str, config: dict, result: dict, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype | str = torch.float32) -> Path:
    """Write one result to ``out/<experiment>/<key>.json`` (atomically) and return the path."""
    rec = result_record(experiment, key, config, result, device=device, dtype=dtype)
    path = result_path(out, experiment, key)
    with replacing_file(path) as tmp:  # whole; a replaced file keeps its mode, a link its target
        tmp.write_text(json.dumps(rec, indent=1, default=str))
    return path


def check_out_dir(out: str | Path) -> None:
    """Stop a command-line tool before any work, with one line and exit status 2, when its
    results directory ``out`` is a file (or lies under one) or cannot be created."""
    try:
        check_dir_out(out, "--out")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
