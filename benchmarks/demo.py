"""``make demo``: FRAQ on the model presets with synthetic LoRA-like clients.

    .venv/bin/python -m benchmarks.demo [--preset P]... [--tau T]... [--backend B] [--device D] [--json FILE]

For each preset (:func:`benchmarks.cases.preset_stacks`) it stacks the clients' factors
per module group, recompresses every adapted matrix in batched kernels, and prints per
preset and tau: server latency (median and spread), the selected ranks, the downlink
relative to the uncompressed FLoRA stack, and the relative error against a float64
reference together with the float64 Eckart-Young optimum at the same ranks. ``--json``
also writes the rows as one result file (:mod:`benchmarks.results`).

The references cost what the method costs: the float64 error and optimum come from the
factors' small Grams (:func:`benchmarks.measure.gram_error.gram_errors`, no QR of the
m x r factors and no m x n matrix). Each step prints a line to stderr as it ends. It runs
at 1 torch thread by default, as the runner does (``--threads`` to change it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import fraq
from fraq.backends import resolve_backend
from benchmarks import cases
from benchmarks.device import checked_or_said, to_device
from benchmarks.measure import timed
from fraq.presets import PRESETS, get_preset
from benchmarks.measure.gram_error import gram_errors
from fraq.internals import plain

__all__ = ["main", "run_preset"]

DEFAULT_PRESETS = ("roberta-base", "llama-3.2-3b")


def run_preset(name: str, taus, *, repeats: int = 5, seed: int = 0, backend: str = "auto",
               device: torch.device = torch.device("cpu"), log=None) -> list[dict]:
    """Measure FRAQ on one preset; one row per tau. ``log(line)`` hears each step's end."""
    log = log or (lambda line: None)
    preset = get_preset(name)
    t0 = time.perf_counter()
    stacks = cases.preset_stacks(name, seed)
    on_device = [to_device((B, A), device) for _, B, A in stacks]
    log(f"{name}: {preset.modules} modules x {preset.clients} clients built in {time.perf_counter() - t0:.1f} s")
    rows = []
    for tau in taus:
        def run():
            return [fraq.recompress(B, A, tau=tau, backend=backend) for B, A in on_device]

        t0 = time.perf_counter()
        timing = timed(run, repeats=repeats, warmup=1, device=device)
        results = [(res.B.cpu(), res.A.cpu(), res.rank.cpu()) for res in run()]
        log(f"{name}, tau {tau:g}: {repeats} timed calls in {time.perf_counter() - t0:.1f} s "
            f"(median {timing.median * 1e3:.1f} ms)")
        t0 = time.perf_counter()
        ranks = torch.cat([p.reshape(-1) for _, _, p in results])
        sent = sum(int(p.sum()) * (g.m + g.n) for (g, _, _), (_, _, p) in zip(stacks, results))
        refs = [gram_errors(B, A, Bg, Ag, p) for (_, B, A), (Bg, Ag, p) in zip(stacks, results)]
        errs = torch.cat([e.reshape(-1) for e, _ in refs])
        opts = torch.cat([o.reshape(-1) for _, o in refs])
        log(f"{name}, tau {tau:g}: float64 references in {time.perf_counter() - t0:.1f} s")
        rows.append({
            "preset": name, "tau": tau, "backend": resolve_backend(backend, device), "modules": preset.modules,
            "clients": preset.clients, "stacked_rank": sum(preset.ranks),
            "latency_ms": timing.median * 1e3, "latency_iqr_ms": timing.iqr * 1e3,
            "latency_samples_s": list(timing.samples), "threads": timing.threads, "device": str(device),
            "rank_min": int(ranks.min()), "rank_median": float(ranks.float().median()),
            "rank_max": int(ranks.max()),
            "downlink_pct_flora": 100.0 * sent / preset.stack_params(),
            "rel_error_median": float(errs.median()), "rel_error_max": float(errs.max()),
            "excess_over_optimum_max": float((errs - opts).max()),
        })
    return rows


def _print(rows) -> None:
    from tabulate import tabulate

    print(tabulate([[r["preset"], f"{r['tau']:.2f}", f"{r['latency_ms']:.1f} ± {r['latency_iqr_ms']:.1f}",
                     f"{r['rank_min']}/{r['rank_median']:g}/{r['rank_max']}", f"{r['downlink_pct_flora']:.1f}",
                     f"{r['rel_error_median']:.3e}", f"{r['excess_over_optimum_max']:.1e}"] for r in rows],
                   headers=["preset", "tau", "latency ms (median ± IQR)", "rank min/med/max", "downlink %FLoRA",
                            "rel err (med)", "excess vs opt"], disable_numparse=True, colalign=("left",) + ("right",) * 6))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.demo", description=plain(__doc__.split("\n\n")[0]))
    parser.add_argument("--preset", action="append", choices=sorted(PRESETS),
                        help=f"preset to run (repeatable; default: {', '.join(DEFAULT_PRESETS)})")
    parser.add_argument("--tau", type=float, action="append", help="energy threshold (repeatable; default 0.8 and 0.95)")
    parser.add_argument("--backend", default="auto", choices=["auto", *sorted(fraq.BACKENDS)],
                        help="basis backend (default auto: the device's default, fraq._defaults.DEFAULTS)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (default 5)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1, as the runner: shared 2-core machines stall 2-thread LAPACK)")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: FRAQ_BENCH_DEVICE, else cpu)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the rows as one result file here (replaced whole; "
                                                   "a symbolic link's target is written)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats(={args.repeats}) must be >= 1")
    if args.threads < 1:
        parser.error(f"--threads(={args.threads}) must be >= 1")
    torch.set_num_threads(args.threads)
    if args.json is not None:
        from fraq.internals import check_file_target

        try:  # before any work: a file (links followed) in a writable directory, not a directory or a FIFO
            check_file_target(args.json, "--json")
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    taus = args.tau or [0.8, 0.95]
    for t in taus:
        if not 0.0 < t <= 1.0:
            parser.error(f"--tau(={t}) must be in (0, 1]")
    device = checked_or_said(args.device)
    if device is None:
        return 2
    from fraq.internals import machine_record

    machine = machine_record(device)
    print(f"fraq {fraq.__version__} | torch {machine['torch']} | {machine['gpu'] or machine['cpu']} | "
          f"{machine['threads']} thread{'s' if machine['threads'] != 1 else ''} | BLAS {machine['blas']} | "
          "float32, synthetic LoRA-like clients")
    rows, t0 = [], time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - t0:5.1f} s] {line}", file=sys.stderr, flush=True)

    for name in args.preset or DEFAULT_PRESETS:
        rows += run_preset(name, taus, repeats=args.repeats, seed=args.seed, backend=args.backend, device=device,
                           log=log)
    _print(rows)
    if args.json:
        from benchmarks.results import result_record

        import json

        from fraq.internals import finite, replacing_file

        rec = result_record("demo", args.json.stem, {"presets": list(args.preset or DEFAULT_PRESETS), "taus": taus,
                                                     "backend": args.backend, "seed": args.seed},
                            {"rows": rows}, device=device)
        try:  # swapped in whole; a symbolic link's target is replaced, the mode of a replaced file kept
            with replacing_file(args.json) as tmp:
                tmp.write_text(json.dumps(finite(rec), indent=1, default=str, allow_nan=False))
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
