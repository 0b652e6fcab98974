"""One function per figure: tidy DataFrame in (:mod:`analysis.loaders`), matplotlib Figure out.

Each function takes the rows of its experiment as :func:`analysis.loaders.load_results`
returns them and draws with seaborn's style; :func:`analysis.style.save` adds the caption
line (machine, dtype, threads, versions) and writes PNG and PDF.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import described, log_labels, log_tick, num, styles

__all__ = ["fig1_downlink", "fig1_table", "fig3_scalability",
           "fig4_fidelity", "fig_backends", "fig4_summary", "fig3_summary"]

FLOOR = 1e-17
"""Errors below this (exact zeros in float64) are drawn at it on log axes."""


def _plt():
    import matplotlib.pyplot as plt

    return plt


def _purples(n: int) -> list:
    """n purples, light to dark: the paper's three for up to three thresholds, else sampled."""
    if n <= 3:
        return ["#CAB2D6", "#9E7BB5", "#6A3D9A"][3 - n:]
    from matplotlib import colormaps

    return [colormaps["Purples"](x) for x in np.linspace(0.35, 0.95, n)]


def _legend_top(fig, handles, labels, ncol) -> None:
    """One legend for the figure, its lower edge on the figure's top edge: however many rows
    it takes, it never covers a panel title (files and inline figures are cut to fit it)."""
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 1.0))


# ----------------------------------------------------------------------------- Fig. 1


def _fig1_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 1's rows with ``label`` (the legend's) and ``M`` (downlink, M parameters)."""
    d = df.copy()
    d["label"] = np.where(d["method"] == "flora", "FLoRA (exact stack)",
                          "FRAQ, " + (100 * d["tau"].fillna(0)).round().astype(int).astype(str) + "% energy")
    d["M"] = d["downlink_params_full"] / 1e6
    return d


def fig1_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 1's numbers: per-client downlink (parameters, whole model), one row per (clients,
    local rank), one column per line of the figure (no column for a pair never measured)."""
    d = _fig1_rows(df)
    t = d.pivot_table(index=["clients", "client_rank"], columns="label", values="downlink_params_full")
    t = t[[c for c in ["FLoRA (exact stack)", *sorted(c for c in t.columns if c.startswith("FRAQ"))]
           if c in t.columns]]
    t.columns.name = None
    t.index = pd.MultiIndex.from_tuples([tuple(int(x) for x in i) for i in t.index], names=["clients", "local rank"])
    return t.round().astype("Int64")


def fig1_downlink(df: pd.DataFrame):
    """Per-client downlink (M parameters, whole model) against the number of clients
    (at the middle local rank) and the local rank (at 8 clients, or the nearest)."""
    plt = _plt()
    d = _fig1_rows(df)
    ranks = sorted(d["client_rank"].unique())
    clients = sorted(d["clients"].unique())
    r_fix = 8 if 8 in ranks else ranks[len(ranks) // 2]
    k_fix = 8 if 8 in clients else clients[len(clients) // 2]
    labels = ["FLoRA (exact stack)"] + sorted(x for x in d["label"].unique() if x.startswith("FRAQ"))
    colors = {"FLoRA (exact stack)": "#555555", **dict(zip(labels[1:], _purples(len(labels) - 1)))}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (x, fixed, fixval, xlabel) in zip(axes, [("clients", "client_rank", r_fix, "number of clients K"),
                                                      ("client_rank", "clients", k_fix, "local LoRA rank $r_k$")]):
        sub = d[d[fixed] == fixval]
        for lab in labels:
            s = sub[sub["label"] == lab].sort_values(x)
            ax.plot(s[x], s["M"], marker="D" if lab.startswith("FLoRA") else "o", color=colors.get(lab), label=lab,
                    linestyle="--" if lab.startswith("FLoRA") else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        log_labels(ax.yaxis)
        ax.set_xticks(sorted(sub[x].unique()))
        ax.set_xticklabels([num(v) for v in sorted(sub[x].unique())])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("downlink per client (M parameters)")
        fixname = f"$r_k$ = {num(fixval)}" if fixed == "client_rank" else f"K = {num(fixval)}"
        ax.set_title(f"LLaMA-3.2-3B, {fixname}")
    h, lab = axes[0].get_legend_handles_labels()
    _legend_top(fig, h, lab, len(lab))
    return fig


# ----------------------------------------------------------------------------- Fig. 3


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


def _octave_ticks(ax, xs) -> None:
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

    plt = _plt()
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
            _octave_ticks(ax, sorted(sub["x"].unique()))
            ax.set_xlabel("total stacked rank r" if sweep == "r" else "hidden size d (square d x d modules)")
            ax.set_ylabel(ylabel)
            label = "error above optimum" if y == "excess" else ylabel.split(" (")[0]  # titles fit their panel
            ax.set_title(f"({'abcdefgh'[2 * row + col]}) {label} vs {sweep} at {fixed}")
    # every method drawn, the textbook ones and any registered from outside the package too
    handles = [Line2D([], [], color=v["color"], marker=v["marker"], label=n) for n, v in look.items()]
    handles += [Line2D([], [], color="k", linestyle="-", marker="o", label="batched"),
                Line2D([], [], color="k", linestyle="--", marker="o", markerfacecolor="white", label="unbatched"),
                Line2D([], [], color="#999999", linestyle=":", linewidth=1, label="float32 eps")]
    _legend_top(fig, handles, [h.get_label() for h in handles], len(handles))
    return fig


# ----------------------------------------------------------------------------- Fig. 4


def fig4_summary(rank_df: pd.DataFrame) -> pd.DataFrame:
    """Per (method, p): mean, 10th and 90th percentile of the relative error over modules,
    and the mean Eckart-Young optimum."""
    from analysis.loaders import explode_per_matrix

    e = explode_per_matrix(rank_df, ["relative_error", "optimal_error", "orthogonality"])
    g = e.groupby(["method", "p"])
    out = pd.DataFrame({
        "mean": g["relative_error"].mean(), "p10": g["relative_error"].quantile(0.1),
        "p90": g["relative_error"].quantile(0.9), "optimum": g["optimal_error"].mean(),
        "modules": g["relative_error"].size()}).reset_index()
    for col in [c for c in _FIELDS if c in rank_df]:  # how each method is shown (analysis.style.described)
        out[col] = out["method"].map(rank_df.groupby("method")[col].first())
    return out


_FIELDS = ("display_name", "family", "paper_order")
"""The result fields that say how a method is shown (:func:`analysis.style.described`)."""


def full_rank(cond_df: pd.DataFrame) -> pd.DataFrame:
    """The fig4_cond rows cut to their full rank (rows without ``p`` are full-rank results)."""
    if "p" not in cond_df:
        return cond_df
    return cond_df[cond_df["p"].isna() | (cond_df["p"] == cond_df["rank"])]


def cut_rank(cond_df: pd.DataFrame) -> pd.DataFrame:
    """The fig4_cond rows cut below their full rank (where eigenvector errors show)."""
    if "p" not in cond_df:
        return cond_df.iloc[0:0]
    return cond_df[cond_df["p"].notna() & (cond_df["p"] < cond_df["rank"])]


def _kappa_axis(df: pd.DataFrame) -> pd.Series:
    """The condition number measured on the rounded inputs (mean over the batch), or the
    nominal kappa for results without it."""
    if "kappa_measured" not in df:
        return df["kappa"]
    return df.apply(lambda r: float(np.nanmean(r["kappa_measured"])) if isinstance(r["kappa_measured"], list)
                    else r["kappa"], axis=1)


def fig4_fidelity(rank_df: pd.DataFrame, cond_df: pd.DataFrame):
    """Left: relative error against output rank (mean over modules, 10-90th percentile band,
    Eckart-Young optimum dashed). Middle: relative error against the condition number at
    full output rank (mean over matrices, min-max bars). Right: at 3/4 of the full rank,
    the largest sine of the principal angles between the kept subspaces and the float64
    SVD's (first order), with the Wedin bound at float32's eps dotted. Both kappa axes are
    the condition number measured on the inputs as rounded to float32."""
    plt = _plt()
    cut = cut_rank(cond_df)
    panels = 3 if not cut.empty and "sin_left" in cut else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2))
    s = fig4_summary(rank_df)
    full = full_rank(cond_df).copy()
    look = styles(described(pd.concat([s[["method"] + [c for c in _FIELDS if c in s]],
                                       full[["method"] + [c for c in _FIELDS if c in full]]])))
    _fig4_rank_panel(axes[0], s, look)
    _fig4_cond_panel(axes[1], full, cond_df, look)
    if panels == 3:
        _fig4_cut_panel(axes[2], cut, look)
    handles, labels = [], []
    for ax in axes[::-1]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    order = [labels.index(n) for n in [*look, "Optimal", "Wedin bound, float32"] if n in labels]
    _legend_top(fig, [handles[i] for i in order], [labels[i] for i in order], min(len(order), 5))
    return fig


def _fig4_rank_panel(ax, s: pd.DataFrame, look: dict) -> None:
    """Fig. 4 left: each method's error against p (:func:`fig4_summary` rows ``s``), the optimum dashed."""
    for name, sub in described(s).groupby("method_name"):
        color, marker = look[name]["color"], look[name]["marker"]
        sub = sub.sort_values("p")
        # The ranks that truncate form the curve; a rank with nothing left to truncate (optimum 0)
        # is a marker of its own, so no line crosses the ranks between, where nothing was measured.
        trunc, whole = sub[sub["optimum"] > 1e-15], sub[sub["optimum"] <= 1e-15]
        ax.plot(trunc["p"], trunc["mean"].clip(lower=FLOOR), color=color, marker=marker, label=name)
        ax.fill_between(trunc["p"], trunc["p10"].clip(lower=FLOOR), trunc["p90"].clip(lower=FLOOR),
                        color=color, alpha=0.2, linewidth=0)
        ax.plot(whole["p"], whole["mean"].clip(lower=FLOOR), color=color, marker=marker,
                linestyle="none")
    opt = s.groupby("p")["optimum"].mean()
    opt = opt[opt > 1e-15]  # at p = stacked rank the optimum is 0, which a log axis cannot show
    ax.plot(opt.index, opt.values, color="#222222", linestyle="--", linewidth=1.6, label="Optimal",
            zorder=5)  # drawn over the method curves, which lie on it
    ax.set_yscale("log")
    log_labels(ax.yaxis)
    ax.set_xlabel("output rank p")
    ax.set_ylabel(r"relative error $\|M - B_gA_g\|_F / \|M\|_F$")
    n_mod = int(s["modules"].max()) if not s.empty else 0
    ax.set_title(f"LLaMA-3.2-3B-shaped updates ({n_mod} modules)")


def _fig4_cond_panel(ax, full: pd.DataFrame, cond_df: pd.DataFrame, look: dict) -> None:
    """Fig. 4 middle: each method's error at full output rank against the measured kappa, min-max bars."""
    from analysis.loaders import explode_per_matrix

    full["kappa_axis"] = _kappa_axis(full)
    c = explode_per_matrix(described(full), ["relative_error"])
    c = c.groupby(["method_name", "kappa_axis"])["relative_error"].agg(["mean", "min", "max"]).reset_index()
    for name, sub in c.groupby("method_name"):
        sub = sub.sort_values("kappa_axis")
        mean = sub["mean"].clip(lower=FLOOR)
        err = np.vstack([mean - sub["min"].clip(lower=FLOOR), sub["max"].clip(lower=FLOOR) - mean])
        ax.errorbar(sub["kappa_axis"], mean, yerr=err, color=look[name]["color"], marker=look[name]["marker"],
                    label=name,
                    capsize=2)
    ax.axhline(np.finfo(np.float32).eps, color="#999999", linestyle=":", linewidth=1)
    ax.text(1.3, np.finfo(np.float32).eps * 1.05, "float32 eps", fontsize=9, color="#666666", va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    log_labels(ax.xaxis)
    log_labels(ax.yaxis)
    ax.set_xlabel(r"measured condition number $\kappa$")
    ax.set_ylabel("relative error (full output rank)")
    if not cond_df.empty:
        ax.set_title(f"rank-{int(cond_df['rank'].iloc[0])} aggregates, "
                     f"{int(cond_df['m'].iloc[0])} x {int(cond_df['n'].iloc[0])}")


def _fig4_cut_panel(ax, cut: pd.DataFrame, look: dict) -> None:
    """Fig. 4 right: the largest principal-angle sine of the cut matrices against kappa, the
    Wedin bound at float32's eps dotted (where it is below 1: above, nothing can be tested)."""
    cut = described(cut)
    cut["kappa_axis"] = _kappa_axis(cut)
    rows = []
    for _, r in cut.iterrows():
        sins = [max(a, b) for a, b in zip(r["sin_left"], r["sin_right"]) if a == a and b == b]
        bounds = [b for b in r["bound_first"] if b == b]
        rows.append(dict(method_name=r["method_name"], kappa_axis=r["kappa_axis"],
                         sin=max(sins) if sins else np.nan, bound=max(bounds) if bounds else np.nan))
    d = pd.DataFrame(rows)
    d = d[d["bound"] < 1]  # where the bound reaches 1 the subspace is too ill-separated to test
    for name, sub in d.groupby("method_name"):
        sub = sub.sort_values("kappa_axis").dropna(subset=["sin"])
        ax.plot(sub["kappa_axis"], sub["sin"].clip(lower=FLOOR), color=look[name]["color"], marker=look[name]["marker"],
                label=name)
    bound = d.groupby("kappa_axis")["bound"].max().dropna()
    ax.plot(bound.index, bound.values, color="#999999", linestyle=":", linewidth=1.2,
            label="Wedin bound, float32")
    ax.set_xscale("log")
    ax.set_yscale("log")
    log_labels(ax.xaxis)
    log_labels(ax.yaxis)
    ax.set_xlabel(r"measured condition number $\kappa$")
    ax.set_ylabel(r"$\sin\theta_{\max}$ to the float64 subspaces")
    ax.set_title(f"cut to p = {int(cut['p'].iloc[0])} (first order)")


# ----------------------------------------------------------------------------- backends


def _two_log_ticks(ax) -> None:
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

    plt = _plt()
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
        _two_log_ticks(ax)
        ax.set_xlabel("latency, 1 thread (ms)")
        ax.set_ylabel("relative error above optimum")
        ax.set_title(case)
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    _legend_top(fig, handles, labels, min(4, len(labels)))
    return fig
