"""The process's resident-set growth over one call, in a fresh process: the cross-check of
the tensor peak (:mod:`benchmarks.measure.memory`).

The tensor peak counts torch's allocator only; a server's memory also holds what BLAS and
LAPACK allocate for themselves (MKL's buffers, OpenBLAS's work areas), the allocator's
fragmentation and the pages the first call of a routine maps. The resident set sees all
of it. :func:`rss_growth` runs an experiment's call (``<experiment>.call(config)``) in a
fresh ``python -m benchmarks.measure.rss`` at one torch thread (where the tensor peak is
taken) and reports, in bytes:

- ``rss_cold``: the high-water mark of the first call above the resident set before it:
  the tensor peak, what the libraries allocate, and their one-time set-up;
- ``rss_warm``: the same for a second call, after freed heap memory is handed back
  (``malloc_trim``): what a server that has run the call before needs again.

The high-water mark is reset before each call by writing 5 to ``/proc/self/clear_refs``
(Linux; ``VmHWM`` in ``/proc/self/status``), so inputs built before the call do not hide
the call's own peak. Where that is not available the growth is not measured (``None``):
``ru_maxrss`` cannot be reset and would report the inputs' peak instead.
"""

from __future__ import annotations

import ctypes
import gc
import json
import re
import subprocess
import sys

from benchmarks.measure.children import child_env, die_with_parent

__all__ = ["rss_growth"]

_MARK = "rss-growth:"


def _status(field: str) -> int | None:
    try:
        text = open("/proc/self/status").read()
    except OSError:
        return None
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return None if m is None else 1024 * int(m.group(1))


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _growth(fn) -> int | None:
    _trim()
    before = _status("VmRSS")
    if before is None or not _reset_peak():
        return None
    out = fn()
    peak = _status("VmHWM")
    del out
    return None if peak is None else max(0, peak - before)


def rss_growth(experiment: str, config: dict, device: str = "cpu", timeout: float = 900.0) -> dict:
    """``{"rss_cold": bytes, "rss_warm": bytes}`` of one call of ``experiment``'s point
    ``config``, measured in a fresh process (see the module docstring); ``None`` values on a
    GPU (the tensor peak there is the device's) or where ``/proc`` cannot reset the mark."""
    if str(device) != "cpu":
        return {"rss_cold": None, "rss_warm": None}
    env = child_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.measure.rss", experiment, json.dumps(config)],
                          capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=die_with_parent())
    line = next((s for s in reversed(proc.stdout.splitlines()) if s.startswith(_MARK)), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"rss_growth({experiment!r}): the measuring process failed (rc {proc.returncode}): "
                           f"{proc.stderr.strip().splitlines()[-1:] or proc.stdout[-200:]}")
    return json.loads(line[len(_MARK):])


def _main(argv: list[str]) -> int:
    import torch

    from benchmarks import experiments

    name, config = argv[0], json.loads(argv[1])
    torch.set_num_threads(1)
    fn = experiments.get(name).call(config, "cpu")
    cold = _growth(fn)
    warm = _growth(fn)
    print(_MARK + json.dumps({"rss_cold": cold, "rss_warm": warm}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
