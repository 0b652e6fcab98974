"""One part of the GPU check, in its own process: the device record or a list of experiments.

The parent (:mod:`benchmarks.gpu_check.parent`) starts ``python -m benchmarks.gpu_check
--part NAME ...`` and stops it at the end of its time; this side writes one result file
per point (:func:`benchmarks.results.write_result`, whole or not at all) under
``WORK/results`` and, after every point, the part's status to ``WORK/status/NAME.json``
(also whole or not at all), so the parent knows how far a stopped part got.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import traceback
from pathlib import Path

import torch

from fraq.internals import finite

__all__ = ["NOT_HERE", "run_part", "write_json"]

NOT_HERE = "not on this device"
"""How a result or a part that needs another device begins its reason."""


def write_json(path: Path, obj) -> None:
    """``obj`` as strict JSON at ``path`` (NaN and infinities as null), written beside it and
    renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(finite(obj), indent=1, default=str, allow_nan=False))
    os.replace(tmp, path)


def _smi_table() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def device_record(device: torch.device) -> dict:
    """The machine record of ``device`` and ``nvidia-smi``'s table (None where it is absent)."""
    from fraq.internals import machine_record

    rec = machine_record(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        rec.update(multiprocessors=props.multi_processor_count, gpu_memory_bytes=props.total_memory,
                   capability=f"{props.major}.{props.minor}")
    return dict(record=rec, nvidia_smi=_smi_table() if device.type == "cuda" else f"{NOT_HERE} (cpu)")


def run_part(name: str, experiments: tuple[str, ...], *, device: torch.device, size: str, work: Path,
             until: float) -> int:
    """Measure the part's points until ``until`` (a ``time.time()`` instant) at one torch
    thread; its status file says what happened. Returns the exit status (0)."""
    from benchmarks.measure import threads
    from benchmarks.run import THREADS, _config, plan
    from benchmarks.results import write_result

    t0 = time.time()
    status_path = work / "status" / f"{name}.json"
    if name == "device":
        write_json(work / "device.json", device_record(device))
        write_json(status_path, dict(state="done", measured=1, points=1, seconds=time.time() - t0))
        return 0
    with threads(THREADS):
        points = plan(experiments, size)
        status = dict(state="running", measured=0, points=len(points), failed=[], skipped={}, seconds=0.0)
        write_json(status_path, status)
        for i, (exp, module, config) in enumerate(points):
            if time.time() >= until:
                status.update(state="cut", cut_before=f"{exp}/{module.key(config)}")
                break
            key = module.key(config)
            print(f"[{name}] {i + 1}/{len(points)} {exp}/{key}", flush=True)
            try:
                result = module.measure(config, device)
            except Exception as exc:  # noqa: BLE001 - one point's failure is recorded; the part goes on
                traceback.print_exc()
                status["failed"].append(dict(point=f"{exp}/{key}", error=f"{type(exc).__name__}: {exc}"[:400]))
            else:
                write_result(work / "results", exp, key, _config(config, size), result, device=device)
                status["measured"] += 1
                reason = result.get("skipped")
                if isinstance(reason, str):
                    status["skipped"][reason] = status["skipped"].get(reason, 0) + 1
            status["seconds"] = time.time() - t0
            write_json(status_path, status)
        else:
            status["state"] = "failed" if status["failed"] else "done"
    if status["state"] == "done" and status["points"] and \
            sum(n for r, n in status["skipped"].items() if r.startswith(NOT_HERE)) == status["points"]:
        status["state"] = NOT_HERE
    status["seconds"] = time.time() - t0
    write_json(status_path, status)
    return 0
