"""One benchmark of every asv suite file, called directly, without asv: where asv is absent.

    python -m benchmarks.suite_once --out FILE.json [--device cuda] [--size tiny] [--bench REGEX]

asv runs each benchmark in processes of its own, from its own environment; a bare GPU
image has no asv (docs/benchmarks.md, "When a GPU is lent"), yet the suite's benchmarks
are what a user tracks on a GPU, peak memory included. This runs the benchmark
:data:`ONE_OF_EACH` names in every suite file the way ``asv run --quick`` does, in this
process: the class's ``setup_cache`` once (its value handed to ``setup`` and the method
as their first argument, as asv hands it), then for every combination of the class's
``params``: ``setup``, the method once (a ``time_`` method once more, timed, after its
warm-up call, synchronized on CUDA), ``teardown``. A ``setup`` that raises
NotImplementedError is asv's skip and is recorded as one, with its reason.

Per combination it records the value (a ``time_`` method's seconds, a ``track_``
method's return and its ``unit``), and on CUDA the device's peak memory over the
method's call (``torch.cuda.max_memory_allocated`` after a reset: what asv's
``peakmem_`` would say of the device, which asv itself cannot see). ``--size`` is the
suite's size (``FRAQ_ASV_SIZE``, read when the suite's modules are imported), ``--device``
its device (``FRAQ_BENCH_DEVICE``); ``--bench`` keeps the benchmarks whose name it
matches (as asv's ``--bench``). Writes ``FILE`` whole (beside, then renamed), after
every benchmark, so a run stopped from outside leaves what it measured. The exit status is
0 when no benchmark failed (a skip is not a failure), else 1.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

__all__ = ["ONE_OF_EACH", "main", "run_benchmark"]

ONE_OF_EACH = {
    "bench_ablation": "bench_ablation.Table4.time_run",
    "bench_clients": "bench_clients.ClientsSweep.time_run",
    "bench_fidelity": "bench_fidelity.RankFidelity.track_excess",
    "bench_host": "bench_host.Host.track_host_reads",
    "bench_presets": "bench_presets.Presets.track_downlink_pct",
    "bench_recompress": "bench_recompress.HiddenSweep.time_run",
}
"""Suite file -> the one benchmark of it that is run (``file.Class.method``): a benchmark
whose class's ``setup_cache`` and ``setup`` are the file's own (a failing set-up shows in
it). Every ``benchmarks/bench_*.py`` has an entry (``tests/bench/test_asv_run.py``)."""


def _combinations(cls) -> list[tuple]:
    """Every combination of the class's ``params`` (asv: a list of lists is a product; a
    flat list one parameter), in asv's order; one empty combination without ``params``."""
    params = getattr(cls, "params", None)
    if params is None:
        return [()]
    if not params or not isinstance(params[0], (list, tuple)):
        params = [params]
    return list(itertools.product(*params))


def run_benchmark(name: str, device) -> list[dict]:
    """Benchmark ``name`` (``file.Class.method`` under ``benchmarks``) at every combination of
    its class's parameters, as the module docstring says: one record per combination."""
    import torch

    from benchmarks.measure.timing import sync

    file, cls_name, method_name = name.split(".")
    cls = getattr(importlib.import_module(f"benchmarks.{file}"), cls_name)
    names = list(getattr(cls, "param_names", []))
    bench = cls()
    lead: tuple = ()
    records = []
    if hasattr(bench, "setup_cache"):
        t0 = time.perf_counter()
        try:
            lead = (bench.setup_cache(),)
        except NotImplementedError as exc:  # asv's skip, for the whole class
            return [dict(benchmark=name, params={}, state="skipped", reason=str(exc)[:300],
                         seconds=time.perf_counter() - t0)]
    method = getattr(bench, method_name)
    for combo in _combinations(cls):
        rec = dict(benchmark=name, params={str(k): str(v) for k, v in zip(names, combo)})
        t0 = time.perf_counter()
        try:
            if hasattr(bench, "setup"):
                bench.setup(*lead, *combo)
        except NotImplementedError as exc:
            records.append(dict(rec, state="skipped", reason=str(exc)[:300], seconds=time.perf_counter() - t0))
            continue
        except Exception as exc:  # noqa: BLE001 - one combination's failure is recorded; the others run
            traceback.print_exc()
            records.append(dict(rec, state="failed", error=f"{type(exc).__name__}: {exc}"[:400],
                                seconds=time.perf_counter() - t0))
            continue
        try:
            if device.type == "cuda":
                sync(device)
                torch.cuda.reset_peak_memory_stats(device)
            value = method(*lead, *combo)
            sync(device)
            peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
            if method_name.startswith("time_"):  # the call above was the warm-up
                t = time.perf_counter()
                method(*lead, *combo)
                sync(device)
                value = time.perf_counter() - t
            unit = "seconds" if method_name.startswith("time_") else getattr(method, "unit", None)
            records.append(dict(rec, state="measured", value=value, unit=unit, peak_device_bytes=peak,
                                seconds=time.perf_counter() - t0))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            records.append(dict(rec, state="failed", error=f"{type(exc).__name__}: {exc}"[:400],
                                seconds=time.perf_counter() - t0))
        finally:
            if hasattr(bench, "teardown"):
                bench.teardown(*lead, *combo)
    return records


def _write(path: Path, obj) -> None:
    from fraq.internals import finite, replacing_file

    with replacing_file(path) as tmp:
        tmp.write_text(json.dumps(finite(obj), indent=1, default=str, allow_nan=False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.suite_once", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSON file written")
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default FRAQ_BENCH_DEVICE, else cpu)")
    ap.add_argument("--size", default=None, help="the suite's size (default FRAQ_ASV_SIZE, else reduced)")
    ap.add_argument("--bench", default=None, help="a regular expression: only the benchmarks it matches")
    args = ap.parse_args(argv)
    from benchmarks.device import ENV, checked_or_said
    from benchmarks.sizes import SIZES

    if args.size is not None and args.size not in SIZES:
        print(f"error: --size(={args.size!r}) must be one of {', '.join(SIZES)}", file=sys.stderr)
        return 2
    try:
        chosen = [n for n in ONE_OF_EACH.values() if args.bench is None or re.search(args.bench, n)]
    except re.error as exc:
        print(f"error: --bench(={args.bench!r}) is not a regular expression: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print(f"error: --bench(={args.bench!r}) matches none of {', '.join(ONE_OF_EACH.values())}", file=sys.stderr)
        return 2
    device = checked_or_said(args.device)
    if device is None:
        return 2
    os.environ[ENV] = str(device)  # the suite's classes read both when imported and set up
    if args.size is not None:
        os.environ["FRAQ_ASV_SIZE"] = args.size
    from fraq.internals import machine_record

    out = dict(device=str(device), size=os.environ.get("FRAQ_ASV_SIZE") or "reduced",
               machine=machine_record(device), benchmarks=[])
    failed = False
    for name in chosen:
        t0 = time.perf_counter()
        recs = run_benchmark(name, device)
        out["benchmarks"] += recs
        states = [r["state"] for r in recs]
        failed |= "failed" in states
        print(f"{name}: {', '.join(f'{states.count(s)} {s}' for s in ('measured', 'skipped', 'failed') if s in states)}"
              f" in {time.perf_counter() - t0:.1f} s", flush=True)
        _write(args.out, out)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
