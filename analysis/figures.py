"""What the report's figures share: matplotlib on demand, the legend above the panels,
octave and log ticks, the floor a log axis draws exact zeros at, a sweep's measured columns.

Each figure is drawn by its report section (``analysis/sections/<name>.py``, beside its
table and its verdicts), from the rows of its experiment as
:func:`analysis.loaders.load_results` returns them, with seaborn's style;
:func:`analysis.style.save` adds the caption line (machine, dtype, threads, versions) and
writes PNG and PDF.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import described, log_labels, styles

__all__ = ["FLOOR", "fig3_scalability", "fig3_summary", "legend_top", "measured_columns", "octave_ticks", "purples",
           "pyplot"]

FLOOR = 1e-17
"""Errors below this (exact zeros in float64) are drawn at it on log axes."""


def pyplot():
    """matplotlib.pyplot, imported when a figure is drawn: the analysis imports without it."""
    import matplotlib.pyplot as plt

    return plt


def purples(n: int) -> list:
    """n purples, light to dark: the paper's three for up to three thresholds, else sampled."""
    if n <= 3:
        return ["#CAB2D6", "#9E7BB5", "#6A3D9A"][3 - n:]
    from matplotlib import colormaps

    return [colormaps["Purples"](x) for x in np.linspace(0.35, 0.95, n)]


def legend_top(fig, handles, labels, ncol) -> None:
    """One legend for the figure, its lower edge on the figure's top edge: however many rows
    it takes, it never covers a panel title (files and inline figures are cut to fit it)."""
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 1.0))


def measured_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a sweep's results with the columns its figures plot: median and IQR time
    (ms), peak MiB, counted GFLOP (NaN where not counted), ``excess`` (the error above the
    float64 optimum in quadrature) and ``excess_plain`` (relative error minus the optimum)."""
    d = df.copy()
    d["ms"] = d["timing.median"] * 1e3
    d["q25_ms"] = d["timing.q25"] * 1e3
    d["q75_ms"] = d["timing.q75"] * 1e3
    d["peak_mib"] = d["peak_bytes"] / 2**20
    d["gflop"] = d["counted_flops"] / 1e9 if "counted_flops" in d else np.nan
    d["excess_plain"] = d["excess"] if "excess" in d else np.nan
    d["excess"] = d["excess_quadrature"] if "excess_quadrature" in d else np.nan
    return d


def fig3_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (sweep, method, mode, d, r): median and IQR time (ms), peak MiB, counted
    GFLOP (batched points) and the error above the float64 optimum (``excess``)."""
    d = described(measured_columns(df))
    d["x"] = np.where(d["sweep"] == "r", d["r"], d["d"])
    return d.sort_values(["sweep", "method_name", "mode", "x"])


def octave_ticks(ax, xs) -> None:
    """Ticks labelled at ``xs`` on a log2 axis and nowhere else; labels turned upright
    when two are less than 0.6 octave apart (768 and 1024 would run into each other)."""
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(xs)
    ax.set_xticklabels([str(int(v)) for v in xs])
    ax.xaxis.set_minor_formatter(NullFormatter())
    if len(xs) > 1 and np.min(np.diff(np.log2(np.asarray(xs, float)))) < 0.6:
        for t in ax.get_xticklabels():
            t.set_rotation(90)


FIG3_ROWS = [("ms", "runtime (ms)"), ("peak_mib", "tensor peak memory (MiB)"), ("gflop", "counted GFLOP (batched)"),
             ("excess", "float32 error above the\nfloat64 optimum")]
"""The sweep figure's rows, one metric each: time, memory, FLOPs, fidelity."""


def fig3_scalability(df: pd.DataFrame):
    """Runtime, tensor peak memory, counted FLOPs and the float32 result's error above the
    float64 optimum (in quadrature) against total rank r (at the fixed d, left) and hidden
    size d (at the fixed r, right): methods as colours, batched solid, unbatched dashed, log
    axes."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    d = fig3_summary(df)
    look = styles(d)
    fig, axes = plt.subplots(len(FIG3_ROWS), 2, figsize=(10, 3.4 * len(FIG3_ROWS)), squeeze=False)
    for col, sweep in enumerate(["r", "d"]):
        sub = d[d["sweep"] == sweep]
        if sub.empty:
            continue
        fixed = f"d = {int(sub['d'].iloc[0])}" if sweep == "r" else f"r = {int(sub['r'].iloc[0])}"
        for row, (y, ylabel) in enumerate(FIG3_ROWS):
            ax = axes[row, col]
            for (name, mode), s in sub.groupby(["method_name", "mode"]):
                s = s[s[y].notna()]
                if s.empty:
                    continue
                batched = mode == "batched"
                values = s[y].clip(lower=FLOOR) if y == "excess" else s[y]
                color, marker = look[name]["color"], look[name]["marker"]
                ax.plot(s["x"], values, color=color, marker=marker, linestyle="-" if batched else "--",
                        markerfacecolor=color if batched else "white", linewidth=1.6)
                if y == "ms":
                    ax.fill_between(s["x"], s["q25_ms"], s["q75_ms"], color=color, alpha=0.15, linewidth=0)
            if y == "excess":
                ax.axhline(np.finfo(np.float32).eps, color="#999999", linestyle=":", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            log_labels(ax.yaxis)
            octave_ticks(ax, sorted(sub["x"].unique()))
            ax.set_xlabel("total stacked rank r" if sweep == "r" else "hidden size d (square d x d modules)")
            ax.set_ylabel(ylabel)
            label = "error above optimum" if y == "excess" else ylabel.split(" (")[0]  # titles fit their panel
            ax.set_title(f"({'abcdefgh'[2 * row + col]}) {label} vs {sweep} at {fixed}")
    # every method drawn, the textbook ones and any registered from outside the package too
    handles = [Line2D([], [], color=v["color"], marker=v["marker"], label=n) for n, v in look.items()]
    handles += [Line2D([], [], color="k", linestyle="-", marker="o", label="batched"),
                Line2D([], [], color="k", linestyle="--", marker="o", markerfacecolor="white", label="unbatched"),
                Line2D([], [], color="#999999", linestyle=":", linewidth=1, label="float32 eps")]
    legend_top(fig, handles, [h.get_label() for h in handles], len(handles))
    return fig


