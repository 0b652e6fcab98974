"""Figure 4: float32 fidelity against output rank and against the condition number."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures import FLOOR, legend_top, pyplot
from analysis.style import NAMES, described, log_labels, styles
from analysis.verdicts import exact, judge, not_measured, ours, samples
from analysis.sections import Figure, Section

reads = ("fig4_rank", "fig4_cond")


def draw(res) -> list[Section]:
    rk, cd = res["fig4_rank"], res["fig4_cond"]
    fig = Figure("fig4_fidelity", fig4_fidelity(rk, cd), rk,
                 f"float32 against float64 references; left: {int(rk['clients'].iloc[0])} clients of rank 8, "
                 f"{rk.groupby('group')['layers'].first().sum()} modules, band = 10-90th percentile, the optimum at "
                 f"p = stacked rank is 0 and not drawn; right: {int(cd['batch'].iloc[0])} matrices per kappa, "
                 "bars = min-max",
                 "Relative error against output rank (LoRA-like LLaMA-3.2-3B-shaped updates) and against the "
                 "condition number at full output rank.")
    return [Section("Figure 4: float32 fidelity", "\n".join(fig4_lines(rk, cd)), fig)]


def _per_point(df: pd.DataFrame, key: str, col: str) -> dict:
    """``{(method, key value): per-matrix array}``, the rows of one (method, key) concatenated."""
    out = {}
    for (m, k), g in df.groupby(["method", key]):
        out[(m, k)] = np.concatenate([samples(v) for v in g[col]]) if len(g) else np.array([])
    return out


MATCH_FLORIST = 10.0
"""FRAQ "matches FLoRIST's fidelity" where its largest principal-angle sine to the float64
subspace is below 10x FLoRIST's at every truncating p: both are first-order rounding errors,
eps times a gap-dependent factor, so within one decade they are the same order."""

NEAR_1E7 = 1e-6
"""FRAQ "stays near 1e-7": its mean error below 1e-6 at every kappa, one decade above the
paper's figure (float32's eps is 6e-8; a factor of 10 covers the dimension constants)."""

TWO_ORDERS = 30.0
"""FlexLoRA "roughly two orders of magnitude less accurate": its mean error above 30x FRAQ's
at every kappa, 10^1.5, the geometric middle between one order and two."""


def _decade(x: float) -> str:
    """A power of ten as the paper writes it: ``1e-6``."""
    return f"{x:.0e}".replace("e-0", "e-").replace("e+0", "e")


def _max_over(keys):
    return lambda g: np.max(np.stack([g[k] for k in keys]), axis=0)


def _min_over(keys):
    return lambda g: np.min(np.stack([g[k] for k in keys]), axis=0)


def fig4_lines(rank: pd.DataFrame, cond: pd.DataFrame) -> list[str]:
    """``rank``, ``cond``: the fig4_rank and fig4_cond rows (per-matrix lists, as loaded)."""
    return _rank_lines(rank) + _cond_lines(cond)


def _rank_lines(rank: pd.DataFrame) -> list[str]:
    """The left panel: the Eckart-Young claim at first order, FLoRIST's fidelity, the error
    at p = stacked rank."""
    lines = []
    err, opt = _per_point(rank, "p", "relative_error"), _per_point(rank, "p", "optimal_error")
    ps = sorted(p for (m, p) in err if m == "fraq")
    trunc = [p for p in ps if np.nanmean(opt[("fraq", p)]) > 1e-15]
    if trunc and "sin_left" in rank:
        lines.extend(_first_order_lines(rank, trunc))
    elif trunc:
        v = not_measured("FRAQ tracks the Eckart-Young optimum", ["the first-order metrics (results without them)"])
        lines.append(f"- Paper: FRAQ tracks the Eckart-Young optimum. {ours(v, '')}")
    both = [p for p in ps if ("florist", p) in err and p in trunc]
    if both and "sin_left" in rank:
        lines.extend(_florist_match_lines(rank, both))
    full = [p for p in ps if p not in trunc]
    if full:
        p = max(full)
        lines.append(f"  - At p = stacked rank ({int(p)}, no truncation) FRAQ's error is {np.nanmean(err[('fraq', p)]):.1e}"
                     + (f", FLoRIST's {np.nanmean(err[('florist', p)]):.1e}" if ("florist", p) in err else "") + ".")
    if "flexlora" not in set(rank["method"]):
        lines.append("  - FlexLoRA is not in the left panel here: its dense SVD of every LLaMA module (d >= 1024) is "
                     "too slow for this sweep (`--size paper` runs it on the d = 1024 modules).")
    return lines


def _florist_match_lines(rank: pd.DataFrame, both: list) -> list[str]:
    """FRAQ matches FLoRIST's fidelity: the ratio of their principal-angle sines (:data:`MATCH_FLORIST`)."""
    first = _per_point(rank, "p", "sin_left")
    g = {f"p={p}": _finite_ratio(first.get(("fraq", p)), first.get(("florist", p))) for p in both}
    g = {k: v for k, v in g.items() if v.size}
    if not g:
        return []
    v = judge(g, _max_over(list(g)), below=MATCH_FLORIST, center=np.mean, claim="FRAQ matches FLoRIST's fidelity")
    test = f"FRAQ / FLoRIST largest principal-angle sine below {MATCH_FLORIST:g} at every truncating p"
    return [f"- Paper: FRAQ matches FLoRIST's fidelity. {ours(v, f'{v.value:.2g}', '.2g', test=test)}"
            " (first order; the total errors, which truncation dominates, agree by construction)."]


def _cond_lines(cond: pd.DataFrame) -> list[str]:
    """The right panel: the kappa axis as measured, FRAQ's error against kappa, the cut
    matrices' subspaces, and FlexLoRA's and FLoRIST's errors against FRAQ's."""
    lines = []
    cond_cut = cut_rank(cond)
    cond = full_rank(cond)
    c = _per_point(cond, "kappa", "relative_error")
    kappas = sorted({k for (_, k) in c})
    measured = _per_point(cond, "kappa", "kappa_measured") if "kappa_measured" in cond else {}
    if measured:
        worst = {k: float(np.nanmean(v)) for (m, k), v in measured.items() if m == "fraq"}
        off = [f"{k:.0e} measures {w:.1e}" for k, w in sorted(worst.items()) if abs(w / k - 1) > 0.01]
        lines.append("- The kappa axis is the condition number measured on the inputs as rounded to float32"
                     + (f" ({'; '.join(off)})." if off else " (within 1% of the nominal at every point)."))
    if any(m == "fraq" for m, _ in c):
        g = {f"kappa={k:.0e}": c.get(("fraq", k), np.array([])) for k in kappas}
        v = judge(g, _max_over(list(g)), below=NEAR_1E7, center=np.mean, claim="FRAQ stays near 1e-7 through kappa=1e10")
        lines.append(f"- Paper: FRAQ stays near 1e-7 through kappa = 1e10 (full output rank). "
                     f"{ours(v, f'{v.value:.1e}', '.1e', test=f'mean error below {_decade(NEAR_1E7)} at every kappa')}, the "
                     f"largest over kappa = {kappas[0]:.0e}..{kappas[-1]:.0e}; at full rank no eigenvector error "
                     "can show (Q U U^T H = Q H for any orthogonal U).")
    if not cond_cut.empty and "sin_left" in cond_cut:
        lines.extend(_cut_lines(cond_cut))
    if any(m == "fraq" for m, _ in c):
        lines.extend(_against_fraq_lines(c, kappas))
    return lines


def _against_fraq_lines(c: dict, kappas: list) -> list[str]:
    """FlexLoRA's error against FRAQ's, judged (:data:`TWO_ORDERS`), and FLoRIST's, shown."""
    lines = []
    for other, claim, thr in (("flexlora", "FlexLoRA is roughly two orders of magnitude less accurate than FRAQ",
                               TWO_ORDERS), ("florist", "FLoRIST is close to FRAQ", None)):
        if not any(m == other for m, _ in c):
            continue
        g = {}
        for k in kappas:
            a, b = c.get((other, k), np.array([])), c.get(("fraq", k), np.array([]))
            g[f"kappa={k:.0e}"] = a / b if a.shape == b.shape and a.size else np.array([])
        name = NAMES[other]
        if thr is None:
            vals = np.concatenate([x for x in g.values() if x.size])
            lines.append(f"- Paper: {claim}. Ours: {name} / FRAQ = {np.nanmin(vals):.1f}-{np.nanmax(vals):.1f}x "
                         f"over the matrices.")
            continue
        v = judge(g, _min_over(list(g)), above=thr, center=np.mean, claim=claim)
        lines.append(f"- Paper: {claim}. "
                     f"{ours(v, f'{v.value:.1f}x', '.1f', 'x', test=f'{name} / FRAQ above {thr:g}x at every kappa')}"
                     ", the smallest mean ratio.")
    return lines


def _finite_ratio(a, b) -> np.ndarray:
    """Elementwise a / b over the entries where both are finite (defined subspaces)."""
    if a is None or b is None or a.shape != b.shape:
        return np.array([])
    keep = np.isfinite(a) & np.isfinite(b) & (b > 0)
    return a[keep] / b[keep]


def _within(df: pd.DataFrame, method: str) -> tuple[int, int, float]:
    """(matrices within the Wedin bound, matrices it can judge, worst sin / bound) of ``method``: a
    matrix is judged where its subspace is defined and the bound is below 1 (a sine cannot exceed it)."""
    rows = df[df["method"] == method]
    ratios = []
    for _, r in rows.iterrows():
        for a, b, w in zip(r["sin_left"], r["sin_right"], r["bound_first"]):
            if a == a and b == b and w == w and w < 1:
                ratios.append(max(a, b) / w)
    ratios = np.asarray(ratios)
    return int((ratios <= 1).sum()), int(ratios.size), float(ratios.max()) if ratios.size else float("nan")


def _first_order_lines(rank: pd.DataFrame, trunc: list) -> list[str]:
    """The rank sweep judged at first order: principal angles against the Wedin bound at
    float32's eps, per configuration (the library default and the paper's)."""
    cut = rank[rank["p"].isin(trunc)]
    lines = []
    for method, label in (("fraq", "the library default"), ("fraq-paper", "the paper's configuration: product Gram, "
                                                                          "float32 eigensolver")):
        if method not in set(cut["method"]):
            continue
        ok, n, worst = _within(cut, method)
        if n == 0:
            continue
        v = exact(worst, below=1.0)
        lines.append(f"- Paper: FRAQ tracks the Eckart-Young optimum; tested on {label}, at first order. "
                     f"{ours(v, f'{ok}/{n} modules within the Wedin bound, worst sin / bound {worst:.2g}', test='the largest principal-angle sine to the float64 subspaces within Wedin bound at every truncating p')}"
                     f" (p = {int(min(trunc))}..{int(max(trunc))}).")
    if "excess_quadrature" in rank:
        eq, op = _per_point(cut, "p", "excess_quadrature"), _per_point(cut, "p", "optimal_error")
        worst = max((float(np.nanmax(eq[("fraq", p)] / op[("fraq", p)])) for p in trunc if ("fraq", p) in eq),
                    default=float("nan"))
        lines.append(f"  - FRAQ's own error in quadrature, sqrt(rel^2 - opt^2), is at most {worst:.1e} of the "
                     "optimum over the truncating ranks (rel - opt, second order, would show its square).")
    return lines


def _cut_lines(cut: pd.DataFrame) -> list[str]:
    """The kappa sweep cut below full rank: each method's subspaces against the Wedin bound."""
    p = int(cut["p"].iloc[0])
    parts = []
    for m in [m for m in NAMES if m in set(cut["method"])]:
        ok, n, worst = _within(cut, m)
        if n:
            parts.append(f"{NAMES[m]} {ok}/{n} (worst {worst:.2g}x the bound)")
    return [f"- At p = {p} of {int(cut['rank'].iloc[0])} (sigma_p / sigma_1 below sqrt(eps) from kappa ~ 1e5), "
            "matrices whose kept subspaces lie within the Wedin bound at float32's eps: " + "; ".join(parts) + "."]


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
    plt = pyplot()
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
    legend_top(fig, [handles[i] for i in order], [labels[i] for i in order], min(len(order), 5))
    return fig


def _fig4_rank_panel(ax, s: pd.DataFrame, look: dict) -> None:
    """Fig. 4 left: each method's error against p (:func:`fig4_summary` rows ``s``), the optimum dashed."""
    for name, sub in described(s).groupby("method_name"):
        color, marker = look[name]["color"], look[name]["marker"]
        sub = sub.sort_values("p")
        # The ranks that truncate form the curve; a rank with nothing left to truncate (optimum 0)
        # is a marker of its own, so no line crosses the ranks between, where nothing was measured.
        trunc, whole = sub[sub["optimum"] > 1e-15], sub[sub["optimum"] <= 1e-15]
        ax.plot(trunc["p"], trunc["mean"].clip(lower=FLOOR), color=color, marker=marker, label=name,
                zorder=look[name]["zorder"])
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
                    label=name, capsize=2, zorder=look[name]["zorder"])
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
                label=name, zorder=look[name]["zorder"])
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
