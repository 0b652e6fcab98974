"""The campaign's measuring process: torch, the device and CuPy started once, then point after point.

:mod:`benchmarks.gpu_check.campaign` starts it as ``python -m benchmarks.gpu_check
--measurer --device DEV --size SIZE --out DIR --start T`` and talks to it in JSON lines:
orders on its stdin, answers on its stdout. The answers are the only thing on stdout: as it
starts, file descriptor 1 is pointed at stderr (the campaign's log), so whatever the
measured code prints, from Python or from a library, lands in the log. Answers:

- ``{"hello": KIND, "seconds": s}`` once torch is imported, the device holds a context,
  CuPy is imported where it is installed, and ``DIR/device.json`` is written (the first
  start only): KIND is the ledger's device kind (:func:`device_kind`);
- for ``{"unit": [[EXPERIMENT, KEY], ...]}`` (consecutive points of one experiment, those
  of one group where the experiment times a group's methods together): per point
  ``{"start": i}``, ``{"step": NAME, "seconds": s}`` as each step ends, then ``{"done": i,
  "seconds": s, "steps": {...}, "skipped": reason or null}`` or ``{"failed": i, "error":
  "...", "seconds": s}``; after the last point ``{"unit_done": true}``;
- ``{"stop": true}``, or the end of stdin: it exits with status 0.

A point's steps: ``prepare`` (the first point of a unit whose experiment has
``prepare_points``: the paired timing of the unit's points, :mod:`benchmarks.experiments`),
``measure`` (``measure(config, device)``, :func:`benchmarks.run.described`) and ``write``
(:func:`benchmarks.results.write_result` into ``DIR/results``, whole or not at all). The
result file records ``prepare`` and ``measure`` as its ``steps`` and their sum as its
``seconds`` (:func:`fraq._results.result_record`); the log gets a line per step with its
seconds.

**Test-only fault hook.** :data:`FAULT_ENV` makes this process crash or hang at a named
point, so that a test on a CPU can watch the campaign restart it and its watchdog fire. It
is read here alone, at the ``measure`` step, and nothing outside ``tests/`` sets it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

__all__ = ["FAULT_ENV", "FAULT_EXIT", "device_kind", "faults", "serve"]

FAULT_ENV = "FRAQ_CAMPAIGN_FAULT"
"""Test-only: ``crash:EXPERIMENT/KEY`` (the process exits with :data:`FAULT_EXIT` at that
point's measure step, as a crash in a CUDA library would end it) or ``hang:EXPERIMENT/KEY``
(it sleeps there for ever), several joined by commas."""

FAULT_EXIT = 70
"""The exit status of a crash :data:`FAULT_ENV` asks for."""


def faults(text: str | None) -> dict[str, str]:
    """``EXPERIMENT/KEY -> crash | hang`` from :data:`FAULT_ENV`'s value; ValueError naming an
    entry that is neither."""
    out = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        what, _, point = item.partition(":")
        if what not in ("crash", "hang") or "/" not in point:
            raise ValueError(f"{FAULT_ENV}(={text!r}): {item!r} is not crash:EXPERIMENT/KEY or hang:EXPERIMENT/KEY")
        out[point] = what
    return out


def device_kind(device) -> str:
    """The ledger's device kind: the GPU's name (``torch.cuda.get_device_name``, what the
    result files' ``machine["gpu"]`` records), or the CPU's model on a CPU."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from fraq.internals import machine_record

    return machine_record("cpu").get("cpu") or "cpu"


class _Log:
    """Lines on stderr (the campaign's log), each with the seconds since the campaign's start."""

    def __init__(self, start: float):
        self.start = start

    def __call__(self, text: str) -> None:
        print(f"[+{time.time() - self.start:7.1f} s] measurer {os.getpid()}: {text}", file=sys.stderr, flush=True)


def _startup(device, out: Path, log: _Log) -> str:
    """Bring the device up (a context, a first kernel, CuPy where installed) and write
    ``DIR/device.json`` where it is absent; returns the device kind."""
    import torch

    t = time.time()
    torch.ones(1, device=device).sum().item()
    if device.type == "cuda":
        try:
            import cupy  # noqa: F401 - imported once here, not inside a point's time
        except ImportError:
            log("CuPy not installed: its routes say so")
    cache = os.environ.get("CUPY_CACHE_DIR")
    if cache:
        log(f"CuPy's kernel cache: {cache} ({sum(1 for _ in Path(cache).iterdir())} kernels at the start)")
    log(f"device {device} up {time.time() - t:.2f} s")
    if not (out / "device.json").is_file():
        from benchmarks.gpu_check.child import device_record, write_json

        t = time.time()
        write_json(out / "device.json", device_record(device))
        log(f"device record {time.time() - t:.2f} s")
    return device_kind(device)


def _point(exp: str, key: str, configs: dict, device, size: str, out: Path, prepare: list | None,
           fault: str | None, log: _Log, say) -> dict:
    """Measure one point in its steps; returns its answer (``done`` or ``failed``)."""
    from benchmarks.results import write_result
    from benchmarks.run import _config, described
    from benchmarks.experiments import get

    module, config = get(exp), configs[key]
    steps: dict[str, float] = {}
    t0 = time.time()
    try:
        if prepare is not None:
            t = time.time()
            module.prepare_points(prepare, device)
            steps["prepare"] = time.time() - t
            log(f"{exp}/{key}: prepare {steps['prepare']:.2f} s ({len(prepare)} points' paired timing)")
            say(step="prepare", seconds=steps["prepare"])
        if fault == "crash":
            log(f"{exp}/{key}: crashing ({FAULT_ENV})")
            os._exit(FAULT_EXIT)
        if fault == "hang":
            log(f"{exp}/{key}: hanging ({FAULT_ENV})")
            while True:
                time.sleep(60)
        t = time.time()
        result = described(config, module.measure(config, device))
        steps["measure"] = time.time() - t
        log(f"{exp}/{key}: measure {steps['measure']:.2f} s")
        say(step="measure", seconds=steps["measure"])
        t = time.time()
        write_result(out / "results", exp, key, _config(config, size), result, device=device, steps=steps)
        steps["write"] = time.time() - t
        log(f"{exp}/{key}: write {steps['write']:.2f} s")
    except Exception as exc:  # noqa: BLE001 - one point's failure is answered; the process goes on
        traceback.print_exc()
        log(f"{exp}/{key}: failed after {time.time() - t0:.2f} s: {type(exc).__name__}: {exc}"[:500])
        return dict(error=f"{type(exc).__name__}: {exc}"[:400], seconds=time.time() - t0)
    skipped = result.get("skipped")
    return dict(seconds=steps.get("prepare", 0.0) + steps["measure"], steps=steps,
                skipped=skipped if isinstance(skipped, str) else None)


def serve(*, device: str, size: str, out: Path, start: float) -> int:
    """The measuring process's loop (see the module's docstring); returns its exit status."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # fd 1 (print, C libraries) into the log; the answers have their own copy of the pipe
    log = _Log(start)

    def say(**msg) -> None:
        proto.write(json.dumps(msg, allow_nan=False) + "\n")
        proto.flush()

    t0 = time.time()
    import torch

    from benchmarks.experiments import get
    from benchmarks.measure import threads
    from benchmarks.run import THREADS

    dev = torch.device(device)
    planted = faults(os.environ.get(FAULT_ENV))
    configs: dict[str, dict] = {}
    with threads(THREADS):
        kind = _startup(dev, out, log)
        log(f"ready in {time.time() - t0:.2f} s: {kind}")
        say(hello=kind, seconds=time.time() - t0)
        for line in sys.stdin:
            order = json.loads(line)
            if order.get("stop"):
                break
            unit = [tuple(p) for p in order["unit"]]
            for exp, _ in unit:
                if exp not in configs:
                    module = get(exp)
                    configs[exp] = {module.key(c): c for c in module.points(size)}
            first = get(unit[0][0])
            prepare = [configs[e][k] for e, k in unit] if hasattr(first, "prepare_points") else None
            for i, (exp, key) in enumerate(unit):
                say(start=i)
                answer = _point(exp, key, configs[exp], dev, size, out, prepare if i == 0 else None,
                                planted.get(f"{exp}/{key}"), log, say)
                say(**({"failed": i} if "error" in answer else {"done": i}), **answer)
            say(unit_done=True)
    log("stopped")
    return 0
