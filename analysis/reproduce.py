"""The paper's server-side figures and tables, drawn from result files alone.

    .venv/bin/python -m analysis.reproduce [--out DIR]

Reads ``DIR/results/`` (written by the runner, ``python -m benchmarks.run --out
DIR/results``; ``make run`` does both) and rebuilds every figure (PNG and PDF,
``DIR/figures/``) and table, and ``DIR/report.md``: the tables, the figures embedded, and
our numbers beside the paper's claims, figure by figure. Captions (device, machine,
threads, versions) come from the result files. Nothing here measures. ``DIR`` defaults
to ``results/reproduce`` (git-ignored).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

__all__ = ["main", "build"]


def build(out: Path) -> Path:
    """Figures, tables and ``report.md`` from the files under ``out/results``.

    Raises :class:`analysis.NoResults` (nothing to draw: the message says what to run) and
    :class:`analysis.MixedResults` (more than one configuration: the message names them).
    Every warning raised while loading and judging (a skipped file, a point not measured,
    results of several commits) is listed in the report's *Not measured or skipped*
    section and re-issued.
    """
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = _build(out)
    finally:
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    notes = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))
    if notes:
        with report.open("a") as f:
            f.write("\n## Not measured or skipped\n\nPoints not measured and files skipped (no verdict above "
                    "rests on them), and results of more than one commit:\n\n"
                    + "\n".join(f"- {n}" for n in notes) + "\n")
    return report


def _build(out: Path) -> Path:
    from analysis import agreement, figures, style, tables
    from analysis.resultset import load
    from analysis.verdicts import HOW

    style.setup()
    res = load(out / "results")
    figs = out / "figures"
    sections: list[str] = []
    made: list[tuple[str, str]] = []

    def figure(name, fig, rows, extra, title, lines, what):
        style.save(fig, figs, name, style.caption(rows, extra))
        made.append((name, what))
        sections.append(f"## {title}\n\n![{title}](figures/{name}.png)\n\n"
                        f"[PDF](figures/{name}.pdf). {what}\n\n" + "\n".join(lines) + "\n")

    t4 = res["table4"]
    if not t4.empty:
        tab = tables.table4_ablation(t4)
        c = t4.iloc[0]
        sections.append(f"## Table 4: ablation\n\n{int(c['modules'])} LLaMA-3.2-3B gate/up projections "
                        f"({int(c['m'])} x {int(c['n'])}), {int(c['clients'])} clients of rank {int(c['client_rank'])}, "
                        f"output rank {int(c['p'])}, one batched call. Time: median [IQR] of "
                        f"{int(c['repeats'])} repeats; memory: tensor peak above the inputs. "
                        f"{style.caption(t4)}.\n\n" + tables.markdown(tab) + "\n\n"
                        + "\n".join(agreement.table4_lines(t4)) + "\n")
    f3 = res["fig3"]
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
                        f"LAPACK formulas (`benchmarks.measure.count_flops`). {style.caption(f3)}.\n\n"
                        + tables.markdown(t5) + "\n\n" + "\n".join(agreement.table5_lines(t5)) + "\n")
    cl = res["clients"]
    if not cl.empty:
        from analysis import clients

        figure("fig_clients", clients.figure(cl), cl, clients.detail(cl), clients.TITLE, clients.lines(cl),
               clients.WHAT)
    rk, cd = res["fig4_rank"], res["fig4_cond"]
    if not rk.empty and not cd.empty:
        figure("fig4_fidelity", figures.fig4_fidelity(rk, cd), rk,
               f"float32 against float64 references; left: {int(rk['clients'].iloc[0])} clients of rank 8, "
               f"{rk.groupby('group')['layers'].first().sum()} modules, band = 10-90th percentile, the optimum at p = "
               "stacked rank is 0 and not drawn; right: "
               f"{int(cd['batch'].iloc[0])} matrices per kappa, bars = min-max",
               "Figure 4: float32 fidelity", agreement.fig4_lines(rk, cd),
               "Relative error against output rank (LoRA-like LLaMA-3.2-3B-shaped updates) and against the "
               "condition number at full output rank.")
    f1 = res["fig1"]
    if not f1.empty:
        lm, lf = int(f1["layers_measured"].iloc[0]), int(f1["layers_full"].iloc[0])
        figure("fig1_downlink", figures.fig1_downlink(f1), f1,
               f"downlink counted by fraq.aggregators on {lm} of {lf} layers of every projection, scaled x{lf / lm:g} "
               "to the whole model; synthetic LoRA-like client spectra",
               "Figure 1: downlink", agreement.fig1_lines(f1),
               "Per-client downlink of the exact FLoRA stack and of FRAQ at 80/90/95% retained energy, against the "
               "number of clients and the local rank.")
    agg = res["tables123"]
    if not agg.empty:
        sections.append("## Tables 1-3: downlink and server latency\n\nEvery aggregator on the model presets, "
                        "batched by module shape; latency median and IQR (`python -m benchmarks.run tables123`); "
                        f"the paper's numbers are one GH200's. {style.caption(agg)}.\n\n"
                        + tables.markdown(tables.tables123_latency(agg)) + "\n")
    pf = res["peft"]
    if not pf.empty:
        from analysis import peft_merge

        figure("fig_peft", peft_merge.figure(pf), pf,
               "round-robin medians, bars = min-max; hatched: per-module ranks (FRAQ's tau rule; peft's svd through "
               f"rank_pattern); peft {pf['peft_version'].iloc[0]}, transformers {pf['transformers_version'].iloc[0]}",
               "FRAQ against peft's own merge", peft_merge.ratio_lines(pf),
               "The same client adapters on a real PeftModel merged by peft's `add_weighted_adapter` (svd, cat) and "
               "by FRAQ, each adding one adapter to the model; error above the float64 optimum (`fraq.reference`). "
               "When to use which: docs/peft.md.")
        sections.append("### FRAQ against peft's own merge: every method\n\n"
                        + tables.markdown(peft_merge.table(pf)) + "\n")
    b = res["backends"]
    if not b.empty:
        figure("fig_backends", figures.fig_backends(b), b,
               f"python -m benchmarks.run backends --size {res.configuration.get('size', '?')}; latency at 1 torch "
               "thread; open markers: "
               "inexact backends; dotted: error 1e-6",
               "Backends: accuracy against latency", agreement.backends_lines(b),
               "FRAQ's basis backends: 1-thread latency against the error above the float64 optimum (this "
               "implementation's choice of backend; the paper makes no claim here).")

    head = ["# FRAQ server-side reproduction", ""]
    size = res.configuration.get("size")
    head.append(f"Measured on {style.caption(res.all)}" + (f"; size `{size}`" if size else "") + ". ")
    head += ["Every figure and table below is rebuilt from the JSON files under `results/` by "
             "`python -m analysis.reproduce --out <this directory>`. Statements marked "
             "**agrees**/**disagrees** compare our numbers with the paper's text; the paper measured on a GH200 "
             "GPU, this run on the device named in each caption, so only ratios and trends are comparable. "
             + HOW, "", "## Figures", ""]
    head += [f"- `figures/{n}.png`: {w}" for n, w in made] + [""]
    report = out / "report.md"
    report.write_text("\n".join(head) + "\n" + "\n".join(sections))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.reproduce", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/reproduce"),
                    help="directory holding results/ (figures/ and report.md are written there)")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")  # a script that writes files: no display
    from analysis.resultset import MixedResults, NoResults

    try:
        report = build(args.out)
    except (NoResults, MixedResults) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"figures: {args.out / 'figures'}\nreport:  {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
