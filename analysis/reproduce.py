"""Reproduce the paper's server-side figures and tables on this machine, with one command.

    .venv/bin/python -m analysis.reproduce [--paper] [--out DIR] [--figures-only] [--backends run|reuse|skip]

1. Runs the sweep (:mod:`analysis.sweeps`; reduced by default, about 6 minutes on 2
   cores; ``--paper``: the paper's sizes where feasible, an estimated 1.5-2 hours scaled
   from the reduced run's per-job times, not yet measured end to end), writing one
   JSON per result under ``DIR/results/<experiment>/``, and the backend accuracy-latency
   benchmark (``python -m fraq.experiments.backends --quick``, or the full run with
   ``--paper``) under ``DIR/results/backends/``.
2. Rebuilds every figure (PNG and PDF, ``DIR/figures/``) and table from those files alone
   and writes ``DIR/report.md``: the tables, the figures embedded, and our numbers beside
   the paper's claims, figure by figure. ``--figures-only`` does just this step.

``DIR`` defaults to ``results/reproduce`` (git-ignored).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

__all__ = ["main", "run_sweep", "build"]


def run_sweep(out: Path, mode: str, backends: str = "run") -> float:
    """Run every job of the ``mode`` sweep with a progress bar; returns seconds taken."""
    from tqdm import tqdm

    from analysis import sweeps

    t0 = time.perf_counter()
    jobs = list(sweeps.jobs(mode))
    results = out / "results"
    with tqdm(total=len(jobs) + (backends == "run"), desc=f"{mode} sweep", unit="job", file=sys.stderr) as bar:
        for job in jobs:
            bar.set_postfix_str(f"{job[0]} {job[1]}"[:48])
            sweeps.run_job(results, job)
            bar.update()
        if backends == "run":
            bar.set_postfix_str("fraq.experiments.backends")
            from fraq.experiments import backends as bexp

            log = io.StringIO()
            args = ["--out", str(results / "backends")] + ([] if mode == "paper" else ["--quick"])
            with contextlib.redirect_stdout(log):
                bexp.main(args)
            (results / "backends" / "backends.log").write_text(log.getvalue())
            bar.update()
    return time.perf_counter() - t0


def _backends_files(out: Path, backends: str) -> list[Path]:
    own = sorted((out / "results" / "backends").glob("backends-*.json"))
    if own or backends != "reuse":
        return own[-1:]
    return sorted(Path("results/backends").glob("backends-*.json"))[-1:]


def build(out: Path, backends: str = "run", seconds: float | None = None, mode: str | None = None) -> Path:
    """Figures, tables and ``report.md`` from the files under ``out/results``."""
    import json

    from analysis import agreement, figures, loaders, style, tables
    from analysis.loaders import explode_per_matrix

    style.setup()
    res, figs = out / "results", out / "figures"
    sections: list[str] = []
    made: list[tuple[str, str]] = []

    def figure(name, fig, rows, extra, title, lines, what):
        style.save(fig, figs, name, style.caption(rows, extra))
        made.append((name, what))
        sections.append(f"## {title}\n\n![{title}](figures/{name}.png)\n\n"
                        f"[PDF](figures/{name}.pdf). {what}\n\n" + "\n".join(lines) + "\n")

    t4 = loaders.load_results(res / "table4")
    if not t4.empty:
        tab = tables.table4_ablation(t4)
        c = t4.iloc[0]
        sections.append(f"## Table 4: ablation\n\n{int(c['modules'])} LLaMA-3.2-3B gate/up projections "
                        f"({int(c['m'])} x {int(c['n'])}), {int(c['clients'])} clients of rank {int(c['client_rank'])}, "
                        f"output rank {int(c['p'])}, one batched call. Time: median [IQR] of "
                        f"{int(c['repeats'])} repeats; memory: tensor peak above the inputs. "
                        f"{style.caption(t4)}.\n\n" + tables.markdown(tab) + "\n\n"
                        + "\n".join(agreement.table4_lines(t4)) + "\n")
    f3 = loaders.load_results(res / "fig3")
    if not f3.empty:
        n = int(f3["modules"].iloc[0])
        figure("fig3_scalability", figures.fig3_scalability(f3), f3,
               f"{n} square modules per call, clients of rank {int(f3['client_rank'].iloc[0])}, output rank "
               f"{int(f3['p'].iloc[0])}; median, band = IQR; tensor peak memory above the inputs",
               "Figure 3: runtime and peak memory", agreement.fig3_lines(figures.fig3_summary(f3)),
               "Runtime and tensor peak memory against total rank r and hidden size d; batched solid, "
               "unbatched dashed.")
        t5 = tables.table5_flops(f3)
        sections.append("## Table 5: FLOPs, analytic next to counted next to measured time\n\n"
                        "Batched points of the Fig. 3 sweeps, all modules of one call. *Table 5 GFLOP*: the paper's "
                        "leading-order formulas; *model (code)*: the same pipelines with the constants of what the "
                        "code runs (`fraq.flops.analytic_flops(model='full')`); *counted*: FlopCounterMode with "
                        f"LAPACK formulas (`fraq.measure.count_flops`). {style.caption(f3)}.\n\n"
                        + tables.markdown(t5) + "\n\n" + "\n".join(agreement.table5_lines(t5)) + "\n")
    rk, cd = loaders.load_results(res / "fig4_rank"), loaders.load_results(res / "fig4_cond")
    if not rk.empty and not cd.empty:
        figure("fig4_fidelity", figures.fig4_fidelity(rk, cd), rk,
               f"float32 against float64 references; left: {int(rk['clients'].iloc[0])} clients of rank 8, "
               f"{rk.groupby('group')['layers'].first().sum()} modules, band = 10-90th percentile, the optimum at p = "
               "stacked rank is 0 and not drawn; right: "
               f"{int(cd['batch'].iloc[0])} matrices per kappa, bars = min-max",
               "Figure 4: float32 fidelity", agreement.fig4_lines(
                   figures.fig4_summary(rk), explode_per_matrix(cd, ["relative_error"])),
               "Relative error against output rank (LoRA-like LLaMA-3.2-3B-shaped updates) and against the "
               "condition number at full output rank.")
    f1 = loaders.load_results(res / "fig1")
    if not f1.empty:
        lm, lf = int(f1["layers_measured"].iloc[0]), int(f1["layers_full"].iloc[0])
        figure("fig1_downlink", figures.fig1_downlink(f1), f1,
               f"downlink counted by fraq.aggregators on {lm} of {lf} layers of every projection, scaled x{lf / lm:g} "
               "to the whole model; synthetic LoRA-like client spectra",
               "Figure 1: downlink", agreement.fig1_lines(f1),
               "Per-client downlink of the exact FLoRA stack and of FRAQ at 80/90/95% retained energy, against the "
               "number of clients and the local rank.")
    bfiles = _backends_files(out, backends) if backends != "skip" else []
    if bfiles:
        b = loaders.load_backends(bfiles)
        b["threads"] = 1  # the plotted latency is the 1-thread column (the file also has 2-thread timings)
        summary = json.loads(bfiles[-1].read_text()).get("summary")
        figure("fig_backends", figures.fig_backends(b), b,
               f"python -m fraq.experiments.backends ({b['mode'].iloc[0]}), {bfiles[-1].name}; open markers: "
               "inexact backends; dotted: the 1e-6 target",
               "Backends: accuracy against latency", agreement.backends_lines(b, summary),
               "FRAQ's basis backends: 1-thread latency against the error above the float64 optimum.")

    head = ["# FRAQ server-side reproduction", ""]
    if seconds is not None:
        head.append(f"Sweep: `{mode}`, run in {seconds / 60:.1f} min. ")
    head += ["Every figure and table below is rebuilt from the JSON files under `results/` by "
             "`python -m analysis.reproduce --figures-only --out <this directory>`. Statements marked "
             "**agrees**/**disagrees** compare our numbers with the paper's text; the paper measured on a GH200 "
             "GPU, this run on the CPU named in each caption, so only ratios and trends are comparable.", "",
             "## Figures", ""]
    head += [f"- `figures/{n}.png`: {w}" for n, w in made] + [""]
    report = out / "report.md"
    report.write_text("\n".join(head) + "\n" + "\n".join(sections))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.reproduce", description=__doc__.split("\n")[0])
    ap.add_argument("--paper", action="store_true", help="the paper's sizes where feasible (estimated 1.5-2 hours on 2 cores)")
    ap.add_argument("--out", type=Path, default=Path("results/reproduce"), help="output directory")
    ap.add_argument("--figures-only", action="store_true", help="rebuild figures and report from existing results")
    ap.add_argument("--backends", choices=["run", "reuse", "skip"], default="run",
                    help="run the backend benchmark, reuse the latest results/backends file, or leave it out")
    args = ap.parse_args(argv)
    mode = "paper" if args.paper else "reduced"
    seconds = None
    if not args.figures_only:
        seconds = run_sweep(args.out, mode, args.backends)
    report = build(args.out, "reuse" if args.figures_only else args.backends, seconds, mode)
    print(f"results: {args.out / 'results'}\nfigures: {args.out / 'figures'}\nreport:  {report}"
          + (f"\nsweep took {seconds / 60:.1f} min" if seconds else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
