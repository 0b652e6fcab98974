"""``make demo``: FRAQ on the model presets with synthetic LoRA-like clients.

    .venv/bin/python -m benchmarks.demo [--preset P]... [--tau T]... [--backend B] [--device D] [--json FILE]

For each preset (:func:`benchmarks.cases.preset_stacks`) it stacks the clients' factors
per module group, recompresses every adapted matrix in batched kernels, and prints per
preset and tau: server latency (median and spread), the selected ranks, the downlink
relative to the uncompressed FLoRA stack, and the relative error against a float64
reference together with the float64 Eckart-Young optimum at the same ranks. ``--json``
also writes the rows as one result file (:mod:`benchmarks.results`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import fraq
from fraq.backends import resolve_backend
from benchmarks import cases
from benchmarks.device import checked, to_device
from benchmarks.measure import timed
from fraq.presets import PRESETS, get_preset
from fraq.reference import optimal_error, relative_error

__all__ = ["main", "run_preset"]

DEFAULT_PRESETS = ("roberta-base", "llama-3.2-3b")


def run_preset(name: str, taus, *, repeats: int = 5, seed: int = 0, backend: str = "auto",
               device: torch.device = torch.device("cpu")) -> list[dict]:
    """Measure FRAQ on one preset; one row per tau."""
    preset = get_preset(name)
    stacks = cases.preset_stacks(name, seed)
    on_device = [to_device((B, A), device) for _, B, A in stacks]
    rows = []
    for tau in taus:
        def run():
            return [fraq.recompress(B, A, tau=tau, backend=backend) for B, A in on_device]

        timing = timed(run, repeats=repeats, warmup=1, device=device)
        results = [(res.B.cpu(), res.A.cpu(), res.rank.cpu()) for res in run()]
        ranks = torch.cat([p.reshape(-1) for _, _, p in results])
        sent = sum(int(p.sum()) * (g.m + g.n) for (g, _, _), (_, _, p) in zip(stacks, results))
        errs = torch.cat([relative_error(B, A, Bg, Ag) for (_, B, A), (Bg, Ag, _) in zip(stacks, results)])
        opts = torch.cat([optimal_error(B, A, p) for (_, B, A), (_, _, p) in zip(stacks, results)])
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
                   headers=["preset", "tau", "latency ms", "rank min/med/max", "downlink %FLoRA", "rel err (med)",
                            "excess vs opt"], disable_numparse=True, colalign=("left",) + ("right",) * 6))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", action="append", choices=sorted(PRESETS),
                        help=f"preset to run (repeatable; default: {', '.join(DEFAULT_PRESETS)})")
    parser.add_argument("--tau", type=float, action="append", help="energy threshold (repeatable; default 0.8 and 0.95)")
    parser.add_argument("--backend", default="auto", choices=["auto", *sorted(fraq.BACKENDS)],
                        help="basis backend (default auto: the device's default, fraq.backends.DEVICE_DEFAULTS)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (default 5)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: FRAQ_BENCH_DEVICE, else cpu)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the rows as one result file here (replaced whole; "
                                                   "a symbolic link's target is written)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats(={args.repeats}) must be >= 1")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads(={args.threads}) must be >= 1")
        torch.set_num_threads(args.threads)
    if args.json is not None:
        from fraq._files import check_file_target

        try:  # before any work: a file (links followed) in a writable directory, not a directory or a FIFO
            check_file_target(args.json, "--json")
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    taus = args.tau or [0.8, 0.95]
    for t in taus:
        if not 0.0 < t <= 1.0:
            parser.error(f"--tau(={t}) must be in (0, 1]")
    try:
        device = checked(args.device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from fraq._machine import machine_record

    machine = machine_record(device)
    print(f"fraq {fraq.__version__} | torch {machine['torch']} | {machine['gpu'] or machine['cpu']} | "
          f"{machine['threads']} threads | BLAS {machine['blas']} | float32, synthetic LoRA-like clients")
    rows = []
    for name in args.preset or DEFAULT_PRESETS:
        rows += run_preset(name, taus, repeats=args.repeats, seed=args.seed, backend=args.backend, device=device)
    _print(rows)
    if args.json:
        from benchmarks.results import result_record

        import json

        from fraq._files import replacing_file

        rec = result_record("demo", args.json.stem, {"presets": list(args.preset or DEFAULT_PRESETS), "taus": taus,
                                                     "backend": args.backend, "seed": args.seed},
                            {"rows": rows}, device=device)
        try:  # swapped in whole; a symbolic link's target is replaced, the mode of a replaced file kept
            with replacing_file(args.json) as tmp:
                tmp.write_text(json.dumps(rec, indent=1, default=str))
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
