"""Figure 1: per-client downlink against the number of clients and the local rank."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures import legend_top, purples, pyplot
from analysis.style import log_labels, num
from analysis.verdicts import exact, holds, not_measured, ours
from analysis.sections import Figure, Section

reads = ("fig1",)


def draw(res) -> list[Section]:
    f1 = res["fig1"]
    lm, lf = int(f1["layers_measured"].iloc[0]), int(f1["layers_full"].iloc[0])
    fig = Figure("fig1_downlink", fig1_downlink(f1), f1,
                 f"downlink counted by fraq.aggregators on {lm} of {lf} layers of every projection, scaled "
                 f"x{lf / lm:g} to the whole model; synthetic LoRA-like client spectra",
                 "Per-client downlink of the exact FLoRA stack and of FRAQ at 80/90/95% retained energy, against "
                 "the number of clients and the local rank.")
    return [Section("Figure 1: downlink", "\n".join(fig1_lines(f1)), fig)]


def fig1_lines(df: pd.DataFrame) -> list[str]:
    lines = []
    bad = df[~np.isfinite(pd.to_numeric(df["downlink_params_full"], errors="coerce"))]
    if not bad.empty:
        names = [f"{r.method} K={r.clients} r_k={r.client_rank}" for r in bad.itertuples()]
        v = not_measured("Fig. 1 downlink", names)
        return ["- Paper: exact stacking's per-client downlink grows with the client count and local rank. "
                + ours(v, "")]
    flora = df[df["method"] == "flora"].set_index(["clients", "client_rank"])["downlink_params_full"]
    grows = all(np.all(np.diff(flora.xs(rk, level="client_rank").sort_index().values) > 0)
                for rk in flora.index.get_level_values("client_rank").unique())
    lines.append(f"- Paper: exact stacking's per-client downlink grows with the client count and local rank. "
                 + ours(holds(grows), f"FLoRA's stack goes from {flora.min() / 1e6:.1f} M to "
                         f"{flora.max() / 1e6:.1f} M parameters per client over the grid")
                 + " (it is (m + n) K r_k per module).")
    fr = df[(df["method"] == "fraq") & (df["tau"].round(2) == 0.90)].set_index(["clients", "client_rank"])
    if not fr.empty:
        cut = 100 * (1 - fr["downlink_params_full"] / flora.reindex(fr.index))
        lines.append(f"- Paper: with at least 90% energy retained, recompression cuts the payload by 55.5-87.3% "
                     f"(real LLaMA-3.2-3B updates). "
                     + ours(exact(cut.min(), above=50), f"{cut.min():.1f}-{cut.max():.1f}%",
                             test="a cut of more than 50% at 90% energy")
                     + " (in kind; the spread depends on the synthetic spectra, not real adapters).")
    for tau in sorted(df["tau"].dropna().unique()):
        s = df[(df["method"] == "fraq") & (df["tau"] == tau)].set_index(["clients", "client_rank"])
        pct = 100 * s["downlink_params_full"] / flora.reindex(s.index)
        lines.append(f"  - FRAQ at {100 * tau:.0f}% energy: {pct.min():.1f}-{pct.max():.1f}% of the stack.")
    return lines


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
    plt = pyplot()
    d = _fig1_rows(df)
    ranks = sorted(d["client_rank"].unique())
    clients = sorted(d["clients"].unique())
    r_fix = 8 if 8 in ranks else ranks[len(ranks) // 2]
    k_fix = 8 if 8 in clients else clients[len(clients) // 2]
    labels = ["FLoRA (exact stack)"] + sorted(x for x in d["label"].unique() if x.startswith("FRAQ"))
    colors = {"FLoRA (exact stack)": "#555555", **dict(zip(labels[1:], purples(len(labels) - 1)))}
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
    legend_top(fig, h, lab, len(lab))
    return fig
