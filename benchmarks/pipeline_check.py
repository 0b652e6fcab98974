"""FRAQ's pipelines against each other, FLoRA and FLoRIST, on their own: the ``pipeline``
experiment's points, one short command for a lent GPU (runs on the CPU too).

    python -m benchmarks.pipeline_check --out DIR [--device cuda] [--size paper]
        [--presets roberta-base,llama-3.2-3b] [--methods stepwise,static-group,...] [--rounds N] [--layers N]

Measures the points of :mod:`benchmarks.experiments.pipeline` at ``--size`` (default
``paper``: both presets whole, 15 paired rounds), of ``--presets`` and ``--methods`` (keys of
its :data:`~benchmarks.experiments.pipeline.METHODS`) alone where given, with ``--rounds``
and ``--layers`` (every preset's first N layers) in place of the size's where given: per
preset, every method timed in the same paired rounds, each described by one more warm call
(its ranks, synchronizations, kernels against its wall time, host counts). Each result is
written the moment it is measured, whole, to ``DIR/results/pipeline/<preset>-<method>.json``
(the runner's format, :mod:`benchmarks.results`), and a table per preset is printed. On
CUDA it then probes whether the static pass runs as a CUDA graph
(:mod:`benchmarks.experiments.cuda_graphs`, ``DIR/results/cuda_graphs/<preset>.json``), after
every timing, so a budget that cuts it keeps the timings. ``python -m analysis.reproduce
--out DIR`` draws them, with the paired verdicts on which pipeline the device should run.
The same points run in ``make run`` (``reduced``) and in the GPU check's ``pipeline`` part.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

__all__ = ["main", "table"]


def table(results: list[tuple[dict, dict]]) -> str:
    """One preset's ``(config, result)`` pairs as a markdown table, the ranks of FRAQ's
    pipelines against the stepwise one's below it."""
    first = results[0][1]
    c0 = results[0][0]
    lines = [f"{c0['preset']} ({first['modules']} of {first['modules_total']} modules, {first['clients']} clients)",
             "| method | median ms | syncs | host reads | kernels | device busy ms | wall ms |",
             "|---|---|---|---|---|---|---|"]
    for c, r in results:
        busy = "-" if r["device_busy_s"] is None else f"{1e3 * r['device_busy_s']:.2f}"
        syncs = "-" if r["syncs"] is None else r["syncs"]
        lines.append(f"| {c['method']} | {1e3 * r['timing']['median']:.2f} | {syncs} | {r['host_reads']} | "
                     f"{r['kernels']} | {busy} | {1e3 * r['wall_s']:.2f} |")
    stepwise = next((r["ranks"] for c, r in results if c["row"] == "stepwise"), None)
    if stepwise is not None:
        lines += [f"- {c['method']}: module ranks {'equal to' if r['ranks'] == stepwise else 'DIFFERENT from'} the "
                  "stepwise pipeline's" for c, r in results if c["row"] != "stepwise" and c["method"].startswith("fraq")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.device import checked_or_said
    from benchmarks.experiments import cuda_graphs, pipeline
    from benchmarks.results import check_out_dir, write_result
    from benchmarks.run import THREADS, _config
    from benchmarks.sizes import SIZES

    keys = [m.key for m in pipeline.METHODS]
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pipeline_check", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for results/pipeline/*.json")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--size", default="paper", choices=sorted(SIZES), help="the points' size (default paper)")
    ap.add_argument("--presets", help="comma-separated presets (default the size's)")
    ap.add_argument("--methods", help=f"comma-separated methods, of {','.join(keys)} (default all)")
    ap.add_argument("--rounds", type=int, help="paired rounds (default the size's)")
    ap.add_argument("--layers", type=int, help="every preset's first N layers only (default the size's)")
    args = ap.parse_args(argv)

    def names(text):
        return None if text is None else [t.strip() for t in text.split(",") if t.strip()]

    try:
        configs = pipeline.configs(args.size, presets=names(args.presets), methods=names(args.methods),
                                   rounds=args.rounds, layers=args.layers)
    except ValueError as exc:
        ap.error(str(exc))
    check_out_dir(args.out)
    device = checked_or_said(args.device)
    if device is None:
        return 2
    torch.set_num_threads(THREADS)
    results = args.out / "results"
    for preset in dict.fromkeys(c["preset"] for c in configs):
        mine = [c for c in configs if c["preset"] == preset]
        pipeline.prepare_points(mine, device)
        done = []
        for c in mine:
            r = pipeline.measure(c, device)
            write_result(results, "pipeline", pipeline.key(c), _config(c, args.size), r, device=device)
            done.append((c, r))
        print(table(done), flush=True)
    if device.type == "cuda":  # whether the static pass captures as a CUDA graph, after every timing
        from benchmarks.graph_probe import lines

        presets = list(dict.fromkeys(c["preset"] for c in configs))
        for c in cuda_graphs.points(args.size):
            if c["preset"] in presets:
                c = dict(c, layers=args.layers if args.layers is not None else c["layers"])
                r = cuda_graphs.measure(c, device)
                write_result(results, "cuda_graphs", cuda_graphs.key(c), _config(c, args.size), r, device=device)
                print("\n".join(lines([dict(r, preset=c["preset"])])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
