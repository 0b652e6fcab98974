"""The one result format, written from both sides of the project: one JSON file per result.

``<out>/<experiment>/<key>.json`` holds::

    {"experiment": ..., "key": ..., "config": {...}, "result": {...},
     "machine": {...}, "versions": {...}, "git_sha": ..., "device": "cpu" | "cuda:0",
     "dtype": "float32", "threads": 1, "loadavg": 0.4, "steal": 0.0, "created": "2026-11-22T14:00:00"}

and, from a writer that times its points (the GPU campaign, :mod:`benchmarks.gpu_check.campaign`),
``"seconds": 1.8`` (the point's time, from its first step to its result, the file's writing
aside) and ``"steps": {"prepare": 1.2, "measure": 0.6}`` (each step's seconds).

``config`` says what was measured, ``result`` what came out; ``machine`` is
:func:`fraq._machine.machine_record`; ``loadavg`` the 1-minute load average and ``steal``
the share of CPU time stolen by the hypervisor since the previous result, over at least the
last ten seconds (:func:`fraq._machine.steal_share`; null where not readable), both when the
result was written. The writers in ``benchmarks/`` reach it as
:mod:`benchmarks.results`; the federated harness (:mod:`fraq.federated`), which may not
import ``benchmarks``, writes through it here, so there is one writer and one shape.
:func:`analysis.loaders.load_results` is the one reader. A rerun replaces the file
(written beside it, then renamed). The JSON is strict: a NaN or infinite number in a record is
written as null (:func:`fraq._json.finite`), which readers take as a missing value.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from fraq._files import replacing_file
from fraq._json import finite

__all__ = ["result_path", "result_record", "versions", "write_result"]


def versions(packages: tuple[str, ...] = ()) -> dict:
    """fraq, torch, numpy and Python versions (scipy where installed), and those of ``packages``
    (distribution names; None for one not installed)."""
    import numpy

    import fraq

    out = {"fraq": getattr(fraq, "__version__", "unknown"), "torch": torch.__version__, "numpy": numpy.__version__,
           "python": platform.python_version()}
    try:
        import scipy

        out["scipy"] = scipy.__version__
    except ImportError:
        pass
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def result_record(experiment: str, key: str, config: dict, result: dict, *, device: torch.device | str = "cpu",
                  dtype: torch.dtype | str = torch.float32, packages: tuple[str, ...] = (),
                  steps: dict[str, float] | None = None) -> dict:
    """The record :func:`write_result` writes (``packages``: more versions to record;
    ``steps``: the point's steps and their seconds, recorded with their sum as ``seconds``)."""
    from fraq._machine import machine_record, steal_share

    machine = machine_record(device)
    rec = dict(experiment=experiment, key=key, config=config, result=result, machine=machine,
               versions=versions(packages), git_sha=machine.get("git_sha"), device=str(torch.device(device)),
               dtype=str(dtype).removeprefix("torch."), threads=torch.get_num_threads(),
               loadavg=os.getloadavg()[0], steal=steal_share(), created=time.strftime("%Y-%m-%dT%H:%M:%S"))
    if steps is not None:
        rec.update(seconds=float(sum(steps.values())), steps={k: float(v) for k, v in steps.items()})
    return rec


RECORD_TYPES = dict(experiment=str, key=str, config=dict, result=dict, machine=dict, versions=dict, device=str,
                    dtype=str, threads=int)
"""Every key :func:`result_record` writes that a reader relies on, with its type."""


def damage(rec) -> str | None:
    """What makes ``rec`` (a parsed result file) not a whole result, or None: a missing key
    of :data:`RECORD_TYPES`, a value of another type, an empty ``result``, or a field its
    experiment's result holds (:data:`fraq._fields.REQUIRED`) missing or of another type
    (:func:`fraq._fields.unfit`: a name where a number belongs, timing samples that are not
    finite numbers). A file can parse and still be damaged (edited by hand, cut by another
    tool, an older writer's)."""
    from fraq._fields import fields, unfit

    if not isinstance(rec, dict):
        return f"a {type(rec).__name__}, not a record"
    for k, kind in RECORD_TYPES.items():
        if k not in rec:
            return f"no {k!r}"
        if not isinstance(rec[k], kind) or (kind is int and isinstance(rec[k], bool)):
            return f"{k!r} is a {type(rec[k]).__name__}, not a {kind.__name__}"
    if not rec["result"]:
        return "an empty 'result'"
    return unfit(rec["experiment"], fields(rec["config"], rec["result"]))


_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def result_path(out: str | Path, experiment: str, key: str) -> Path:
    """Where :func:`write_result` writes ``key`` of ``experiment``: ``out/<experiment>/<key>.json``."""
    return Path(out) / experiment / f"{_SAFE.sub('_', key)}.json"


def write_result(out: str | Path, experiment: str, key: str, config: dict, result: dict, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype | str = torch.float32,
                 packages: tuple[str, ...] = (), steps: dict[str, float] | None = None) -> Path:
    """Write one result to ``out/<experiment>/<key>.json`` (atomically) and return the path
    (``steps``: :func:`result_record`'s)."""
    rec = result_record(experiment, key, config, result, device=device, dtype=dtype, packages=packages,
                        steps=steps)
    path = result_path(out, experiment, key)
    with replacing_file(path) as tmp:  # whole; a replaced file keeps its mode, a link its target
        tmp.write_text(json.dumps(finite(rec), indent=1, default=str, allow_nan=False))
    return path
