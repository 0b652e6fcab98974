"""FRAQ's basis backends: accuracy against 1-thread latency (no paper claim)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures import FLOOR, legend_top, pyplot
from analysis.style import log_labels, log_tick
from analysis.sections import Figure, Section

reads = ("backends",)


def draw(res) -> list[Section]:
    b = res["backends"]
    fig = Figure("fig_backends", fig_backends(b), b,
                 f"python -m benchmarks.run backends --size {res.configuration.get('size', '?')}; latency at 1 torch "
                 "thread; open markers: inexact backends; dotted: error 1e-6",
                 "FRAQ's basis backends: 1-thread latency against the error above the float64 optimum (this "
                 "implementation's choice of backend; the paper makes no claim here).")
    return [Section("Backends: accuracy against latency", "\n".join(backends_lines(b)), fig)]


def backends_lines(df: pd.DataFrame) -> list[str]:
    """Per case, the fastest backend at one thread and its error above the optimum (no paper
    claim: the backends are this implementation's choice)."""
    lines = []
    lora = df[df["section"] == "lora"] if "section" in df else df
    for case, g in lora.groupby("case"):
        best = g.loc[g["ms_1t"].idxmin()]
        ref = g.set_index("backend")["ms_1t"].get("householder")
        lines.append(f"- {case}: fastest backend {best['backend']} ({best['ms_1t']:.1f} ms, 1 thread"
                     + (f"; Householder {ref:.1f} ms" if ref is not None else "") + "), error above optimum "
                     f"{best['gap_to_optimum']:.1e}.")
    return lines


def two_log_ticks(ax) -> None:
    """Widen a log x axis holding fewer than two of the 1-2-5 values to the nearest ones
    outside it: with fewer, matplotlib's LogLocator falls back to linear ticks (200, 250,
    ..., 600), whose labels run into each other on a narrow panel."""
    lo, hi = ax.get_xlim()
    steps = [m * 10.0**e for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 2)
             for m in (1.0, 2.0, 5.0)]
    if sum(lo <= s <= hi for s in steps) < 2:
        lo = max(s for s in steps if s <= lo)
    if sum(lo <= s <= hi for s in steps) < 2:
        hi = min(s for s in steps if s >= hi)
    ax.set_xlim(lo, hi)


BACKEND_EXACT = 1e-6
"""The error above the optimum drawn dotted on the backends figure (in its legend): the
exact backends lie below it, the inexact ones (open markers) above."""


def fig_backends(df: pd.DataFrame, cases: list[str] | None = None):
    """Accuracy-latency of FRAQ's basis backends (``python -m benchmarks.run backends``):
    1-thread median latency against the error above the float64 optimum, one panel per case."""
    import seaborn as sns
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plt = pyplot()
    d = df.copy()
    if cases is None:
        cases = [c for c in ["roberta-base", "llama-3.2-3b"] if c in set(d["case"])]
        cond = sorted((c for c in d["case"].unique() if str(c).startswith("cond")), key=lambda c: float(c.split()[1]))
        cases += cond[-1:]
    backends = sorted(d["backend"].unique())
    palette = dict(zip(backends, sns.color_palette("tab10", len(backends))))
    markers = dict(zip(backends, "osD^vP*X<>ph"))
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 4.4), squeeze=False)
    for ax, case in zip(axes[0], cases):
        sub = d[d["case"] == case]
        for _, r in sub.iterrows():
            ax.errorbar(r["ms_1t"], max(r["gap_to_optimum"], FLOOR), xerr=r.get("iqr_ms_1t", 0) / 2,
                        color=palette[r["backend"]], marker=markers[r["backend"]], markersize=7, capsize=2,
                        linestyle="none", label=r["backend"], markerfacecolor="white" if not r["exact"] else None)
        ax.axhline(BACKEND_EXACT, color="#999999", linestyle=":", linewidth=1, label=f"error {BACKEND_EXACT:g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        log_labels(ax.yaxis)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, pos: log_tick(x)))  # every 1-2-5 tick labelled
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        two_log_ticks(ax)
        ax.set_xlabel("latency, 1 thread (ms)")
        ax.set_ylabel("relative error above optimum")
        ax.set_title(case)
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    legend_top(fig, handles, labels, min(4, len(labels)))
    return fig
