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


__all__ = ["FLOOR", "legend_top", "measured_columns", "purples", "pyplot"]

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
    it takes, it never covers a panel title (files and inline figures are cut to fit it).

    At most ``ncol`` columns, fewer where a row of ``ncol`` entries would be wider than the
    figure: a legend wider than its figure reaches past the left edge, where a notebook's
    inline figure (and any viewer that shows the figure's own box) cuts it."""
    ncol = max(1, min(ncol, len(labels)))
    while True:
        legend = fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 1.0))
        if ncol == 1 or legend.get_window_extent(_renderer(fig)).width <= fig.bbox.width:
            return
        legend.remove()
        ncol -= 1


def _renderer(fig):
    """A renderer of ``fig`` to measure texts with (Agg's where the figure has no canvas that draws)."""
    try:
        return fig.canvas.get_renderer()
    except AttributeError:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        return FigureCanvasAgg(fig).get_renderer()


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


