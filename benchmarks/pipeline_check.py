"""FRAQ's whole-model aggregation, its pipelines against each other and FLoRA and FLoRIST,
with the host's share of it: one short command for a lent GPU (runs on the CPU too).

    python -m benchmarks.pipeline_check --out DIR [--device cuda] [--presets roberta-base,llama-3.2-3b]
        [--methods 'SPEC|SPEC|...'] [--rounds 15] [--layers N]

Per preset, the methods' ``aggregate`` of one round (the preset's clients and modules,
float32, TF32 as the process has it) is timed in paired rounds
(:func:`benchmarks.measure.paired.paired_rounds`: every method once a round, the order
rotated, synchronized on CUDA), so a method's samples and its neighbours' share the
machine's state. Each method is then described by
one more warm call: the device synchronizations it made (CUDA:
``torch.cuda.set_sync_debug_mode("warn")``'s warnings, counted), and, under torch's
profiler, its kernels and the GPU time they took against the call's wall time (the
host's share is the rest), and the kernels that took most of it (``top_kernels``: on a CPU
the aten ops of most self time). Methods that cannot be built here (an option this code does
not know) are named and skipped. Writes ``DIR/pipeline.json`` (whole, beside then
renamed) after every preset and prints a table. On CUDA it then probes whether the static
pass runs as a CUDA graph (:mod:`benchmarks.graph_probe`, the record's ``graphs``): a few
seconds per preset, after every timing, so a budget that cuts it keeps the timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

from fraq.internals import finite, replacing_file

__all__ = ["DEFAULT_METHODS", "main", "measure_preset"]

DEFAULT_METHODS = ("fraq:tau=0.95,pipeline=stepwise", "fraq:tau=0.95,pipeline=static,reads=group",
                   "fraq:tau=0.95,pipeline=static,reads=call", "flora", "florist:tau=0.9")
"""FRAQ's two pipelines, each named (``"auto"`` is one or the other per device:
:data:`fraq._defaults.DEFAULTS`): the stepwise one (every verdict read as it comes) and
the static one, read per shape group and per call (FRAQ's ``reads``:
the same table's ``reads``, which a device changes only from this
comparison); FLoRA (stacking alone: the floor of any exact method's host work) and FLoRIST
(the paper's comparison)."""


def _device_time(event) -> float:
    """A profiler event's device time in microseconds (``device_time``; ``cuda_time`` in
    torch releases before it, read only there: it warns where both exist)."""
    return event.device_time if hasattr(event, "device_time") else getattr(event, "cuda_time", 0.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _aggregators(specs) -> tuple[dict, dict]:
    from fraq.aggregators import get_aggregator
    from fraq.methods import MethodSpec

    out, skipped = {}, {}
    for text in specs:
        try:
            spec = MethodSpec.parse(text)
            out[text] = get_aggregator(spec.name, **spec.kwargs)
        except Exception as exc:  # noqa: BLE001 - an option this code lacks: named, the others measured
            skipped[text] = f"{type(exc).__name__}: {exc}"[:300]
    return out, skipped


def _syncs(fn, device: torch.device) -> int | None:
    """Device synchronizations one call of ``fn`` makes (None off CUDA)."""
    if device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in seen)


def _profile(fn, device: torch.device) -> dict:
    """Kernels and their device time in one warm call, against its wall time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    _sync(device)
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        fn()
        _sync(device)
        wall = time.perf_counter() - t0
    events = prof.events()
    if device.type == "cuda":
        kernels = [e for e in events if getattr(e, "device_type", None) is not None
                   and str(e.device_type).endswith("CUDA")]
        busy = sum(_device_time(e) for e in kernels) * 1e-6
        top = _top((e.name, _device_time(e)) for e in kernels)
    else:
        kernels, busy = [], None
        top = _top((e.name, e.self_cpu_time_total) for e in events if e.name.startswith("aten::"))
    return dict(wall_s=wall, kernels=len(kernels), device_busy_s=busy,
                aten_ops=sum(1 for e in events if e.name.startswith("aten::")),
                top_kernels=dict(by="device time" if device.type == "cuda" else "self CPU time of aten ops",
                                 rows=top))


TOP_KERNELS = 10
"""Rows of a record's ``top_kernels``: the kernels (CUDA) or aten ops (CPU) that took the
most time in the profiled call, each name's calls and time summed."""


def _top(timed) -> list[dict]:
    """``(name, microseconds)`` pairs summed by name: the :data:`TOP_KERNELS` names of most
    time, most first, as ``{"name", "calls", "seconds"}``."""
    total: dict[str, list] = {}
    for name, us in timed:
        row = total.setdefault(name, [0, 0.0])
        row[0] += 1
        row[1] += us
    ranked = sorted(total.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    return [dict(name=name, calls=calls, seconds=us * 1e-6) for name, (calls, us) in ranked]


def measure_preset(name: str, specs, *, device: torch.device, rounds: int, layers: int | None = None) -> dict:
    """The record of one preset (module docstring)."""
    from benchmarks.experiments.tables123 import model_for
    from benchmarks.measure.paired import paired_rounds

    t0 = time.perf_counter()
    model = model_for(name, quick=False, device=device, layers=layers)
    updates = model.updates()
    build_s = time.perf_counter() - t0
    aggs, skipped = _aggregators(specs)
    calls = {label: (lambda a=agg: a.aggregate(updates)) for label, agg in aggs.items()}
    ranks = {}
    for label, fn in calls.items():  # warm-up: lazy set-up, CuPy's plans, the allocator
        res = fn()
        _sync(device)
        got = getattr(res, "ranks", None)
        ranks[label] = {str(k): int(v) for k, v in got.items()} if isinstance(got, dict) else None
    timed = paired_rounds(calls, rounds, device=device)
    rows = {}
    for label, fn in calls.items():
        s = timed[label]["samples"]
        rows[label] = dict(median_s=statistics.median(s), min_s=min(s), samples=s, syncs=_syncs(fn, device),
                           ranks=ranks[label], **_profile(fn, device))
    first = next(iter(ranks.values()), None)
    same = {label: r == first for label, r in ranks.items() if label.startswith("fraq")}  # FRAQ's pipelines agree
    return dict(preset=name, modules=len(model.shapes), clients=model.preset.clients, layers=model.layers,
                build_s=build_s, rounds=rounds, rows=rows, skipped=skipped, fraq_ranks_as_first=same)


def _write(path: Path, obj) -> None:
    with replacing_file(path) as tmp:  # whole: beside, then renamed
        tmp.write_text(json.dumps(finite(obj), indent=1, default=str, allow_nan=False))


def _table(rec: dict) -> str:
    lines = [f"{rec['preset']} ({rec['modules']} modules, {rec['clients']} clients; inputs built in "
             f"{rec['build_s']:.1f} s)", "| method | median ms | min ms | syncs | kernels | device busy ms | wall ms |",
             "|---|---|---|---|---|---|---|"]
    for label, r in rec["rows"].items():
        busy = "-" if r["device_busy_s"] is None else f"{1e3 * r['device_busy_s']:.2f}"
        lines.append(f"| {label} | {1e3 * r['median_s']:.2f} | {1e3 * r['min_s']:.2f} | {r['syncs'] if r['syncs'] is not None else '-'} | "
                     f"{r['kernels']} | {busy} | {1e3 * r['wall_s']:.2f} |")
    lines += [f"- skipped {k}: {v}" for k, v in rec["skipped"].items()]
    lines += [f"- {k}: module ranks {'equal to' if v else 'DIFFERENT from'} the first method's"
              for k, v in rec["fraq_ranks_as_first"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.device import checked_or_said
    from fraq.internals import machine_record

    ap = argparse.ArgumentParser(prog="python -m benchmarks.pipeline_check", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for pipeline.json")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--presets", default="roberta-base,llama-3.2-3b", help="comma-separated presets")
    ap.add_argument("--methods", default="|".join(DEFAULT_METHODS),
                    help=f"methods in the method grammar, separated by '|' (default {'|'.join(DEFAULT_METHODS)})")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    ap.add_argument("--layers", type=int, help="the presets' first N layers only (default all)")
    args = ap.parse_args(argv)
    device = checked_or_said(args.device)
    if device is None:
        return 2
    if args.rounds < 1:
        ap.error(f"--rounds(={args.rounds}) must be >= 1")
    specs = tuple(m.strip() for m in args.methods.split("|") if m.strip())
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    out = dict(machine=machine_record(device), device=str(device), presets=[])
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    for name in presets:
        rec = measure_preset(name, specs, device=device, rounds=args.rounds, layers=args.layers)
        out["presets"].append(rec)
        _write(args.out / "pipeline.json", out)
        print(_table(rec), flush=True)
    if device.type == "cuda":  # whether the static pass captures as a CUDA graph (benchmarks.graph_probe)
        from benchmarks.graph_probe import lines, probe

        out["graphs"] = probe(presets, device, layers=args.layers)
        _write(args.out / "pipeline.json", out)
        print("\n".join(lines(out["graphs"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
