"""The one runner: measure cases from :mod:`benchmarks.cases`, one JSON per result.

    .venv/bin/python -m benchmarks.run [EXPERIMENT ...] [--size reduced|paper|tiny]
        [--out results/reproduce/results] [--device cpu|cuda|cuda:N] [--threads N]

Experiments (default: the sweep's five and ``backends``, what ``make run`` reproduces):

- ``table4``, ``fig4_cond``, ``fig4_rank``, ``fig1``, ``fig3``: the sweep of
  :mod:`benchmarks.sweeps` at ``--size`` (``reduced`` about 1 min on 2 cores; ``paper``: the
  paper's sizes where feasible, 1.5-2 h estimated);
- ``backends``: every basis backend on LoRA-like, ill-conditioned and duplicate-client
  inputs (:mod:`benchmarks.experiments.backends`; quick unless ``--size paper``);
- ``aggregators``: Tables 1-3's downlink and latency (quick unless ``--size paper``);
- ``eig_precision``: float32 vs float64 eigensolver;
- ``peft``: FRAQ against peft's own ``add_weighted_adapter`` (svd, cat) on real PeftModels
  (:mod:`benchmarks.experiments.peft_compare`; MiniLM and 2 RoBERTa-base layers, with
  two LLaMA-3.2-3B-shaped layers at ``--size paper``).

Every result is ``<out>/<experiment>/<key>.json`` in :mod:`benchmarks.results`' format
(config, result, machine, versions, git sha, device; a sweep result's config also records
its ``size``); a rerun replaces its files.
``analysis.reproduce`` draws the figures and the report from them. The device is
``--device``, else ``FRAQ_BENCH_DEVICE``, else cpu; a device this machine does not have
stops the run at once with a one-line error (exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

import torch

SWEEP = ("table4", "fig4_cond", "fig4_rank", "fig1", "fig3")
EXPERIMENTS = (*SWEEP, "backends", "aggregators", "eig_precision", "peft")
DEFAULT = (*SWEEP, "backends", "peft")
THREADS = 1
"""Default torch threads: on 2-core machines shared with other jobs, 2-thread LAPACK calls
have been seen to slow 100x."""


def run(out: Path, experiments=DEFAULT, *, size: str = "reduced", device: torch.device = torch.device("cpu"),
        threads: int = THREADS, progress: bool = True) -> float:
    """Run ``experiments`` at ``threads`` torch threads and write their result files under
    ``out`` (each records the thread count it ran at); returns seconds taken."""
    from benchmarks.measure import threads as torch_threads

    with torch_threads(threads):
        return _run(Path(out), experiments, size, torch.device(device), progress)


def _run(out: Path, experiments, size: str, device: torch.device, progress: bool) -> float:
    from tqdm import tqdm

    from benchmarks import sweeps
    from benchmarks.results import write_result

    t0 = time.perf_counter()
    jobs = [j for j in sweeps.jobs(size, device) if j[0] in experiments]
    if "peft" in experiments:
        from benchmarks.experiments import peft_compare

        jobs += [("peft", peft_compare.key(c), c, lambda c=c: peft_compare.measure(c, device))
                 for c in peft_compare.points(size)]
    extra = [e for e in ("backends", "aggregators", "eig_precision") if e in experiments]
    quick = size != "paper"
    with tqdm(total=len(jobs) + len(extra), desc=f"{size} run on {device}", unit="job", file=sys.stderr,
              disable=not progress) as bar:
        for experiment, key, config, measure in jobs:
            bar.set_postfix_str(f"{experiment} {key}"[:48])
            result = measure()
            for k, cfg, res in result["many"] if "many" in result else [(key, config, result)]:
                write_result(out, experiment, k, {**cfg, "size": size}, res, device=device)
            bar.update()
        for name in extra:
            bar.set_postfix_str(name)
            log = io.StringIO()
            with contextlib.redirect_stdout(log):
                if name == "backends":
                    from benchmarks.experiments import backends

                    backends.run(out, quick=quick, device=device)
                elif name == "aggregators":
                    from benchmarks.experiments import aggregators

                    aggregators.run(out, quick=quick, device=device)
                else:
                    from benchmarks.experiments import eig_precision

                    eig_precision.run(out)
            (out / f"{name}.log").write_text(log.getvalue())
            bar.update()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    from benchmarks.cases import check_environment
    from benchmarks.device import checked
    from benchmarks.sweeps import CONFIGS
    from fraq._files import check_dir_out

    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    ap.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                    help=f"any of {', '.join(EXPERIMENTS)} (default: {' '.join(DEFAULT)})")
    ap.add_argument("--size", choices=sorted(CONFIGS), default="reduced")
    ap.add_argument("--out", type=Path, default=Path("results/reproduce/results"), help="results directory")
    ap.add_argument("--device", help="cpu, cuda or cuda:N (default: FRAQ_BENCH_DEVICE, else cpu)")
    ap.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS})")
    args = ap.parse_args(argv)
    unknown = [e for e in args.experiments if e not in EXPERIMENTS]
    if unknown:
        ap.error(f"EXPERIMENT(={unknown[0]!r}) is not one of {', '.join(EXPERIMENTS)}")
    try:
        device = checked(args.device)
        check_dir_out(args.out, "--out")
        check_environment()
    except ValueError as exc:  # malformed, or not on this machine: one line, before any work
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads < 1:
        ap.error(f"--threads(={args.threads}) must be >= 1")
    seconds = run(args.out, tuple(args.experiments) or DEFAULT, size=args.size, device=device, threads=args.threads)
    print(f"results: {args.out} ({seconds / 60:.1f} min, device {device}, {args.threads} thread(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
