"""Our numbers beside the paper's claims, figure by figure: one function per figure/table,
each returning markdown bullet lines computed from the tidy rows (nothing typed by hand
but the paper's own statements, which are quoted). Tables 1-3's verdicts, whose claims and
thresholds are ``analysis/paper.json``'s, are their section's
(:func:`analysis.sections.tables123.verdict_lines`).

Every agree/disagree statement is a :class:`analysis.verdicts.Verdict` and prints the
interval it rests on (:data:`analysis.verdicts.HOW` says how it is computed); a claim over
a point that was not measured gets no verdict, and the point is named.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import NAMES, num
from analysis.verdicts import Verdict, exact, holds, judge, not_measured, paired

__all__ = ["fig1_lines", "fig3_lines", "fig4_lines", "table4_lines", "table5_lines",
           "backends_lines"]


def _ours(v: Verdict, text: str, fmt: str = ".3g", unit: str = "", test: str = "") -> str:
    """``Ours **word** (tested: test): text [lo, hi]``, or the points not measured."""
    tested = f" (tested: {test})" if test else ""
    if v.word == "no verdict":
        return f"Ours {v.bold()}{tested}: {v.interval()}"
    iv = v.interval(fmt, unit)
    return f"Ours {v.bold()}{tested}: {text} {'(exact)' if iv == 'exact' else iv}"


def _arr(x) -> np.ndarray:
    return np.asarray(x if isinstance(x, (list, tuple, np.ndarray)) else [x], dtype=float)


# ----------------------------------------------------------------------------- Fig. 1


def fig1_lines(df: pd.DataFrame) -> list[str]:
    lines = []
    bad = df[~np.isfinite(pd.to_numeric(df["downlink_params_full"], errors="coerce"))]
    if not bad.empty:
        names = [f"{r.method} K={r.clients} r_k={r.client_rank}" for r in bad.itertuples()]
        v = not_measured("Fig. 1 downlink", names)
        return ["- Paper: exact stacking's per-client downlink grows with the client count and local rank. "
                + _ours(v, "")]
    flora = df[df["method"] == "flora"].set_index(["clients", "client_rank"])["downlink_params_full"]
    grows = all(np.all(np.diff(flora.xs(rk, level="client_rank").sort_index().values) > 0)
                for rk in flora.index.get_level_values("client_rank").unique())
    lines.append(f"- Paper: exact stacking's per-client downlink grows with the client count and local rank. "
                 + _ours(holds(grows), f"FLoRA's stack goes from {flora.min() / 1e6:.1f} M to "
                         f"{flora.max() / 1e6:.1f} M parameters per client over the grid")
                 + " (it is (m + n) K r_k per module).")
    fr = df[(df["method"] == "fraq") & (df["tau"].round(2) == 0.90)].set_index(["clients", "client_rank"])
    if not fr.empty:
        cut = 100 * (1 - fr["downlink_params_full"] / flora.reindex(fr.index))
        lines.append(f"- Paper: with at least 90% energy retained, recompression cuts the payload by 55.5-87.3% "
                     f"(real LLaMA-3.2-3B updates). "
                     + _ours(exact(cut.min(), above=50), f"{cut.min():.1f}-{cut.max():.1f}%",
                             test="a cut of more than 50% at 90% energy")
                     + " (in kind; the spread depends on the synthetic spectra, not real adapters).")
    for tau in sorted(df["tau"].dropna().unique()):
        s = df[(df["method"] == "fraq") & (df["tau"] == tau)].set_index(["clients", "client_rank"])
        pct = 100 * s["downlink_params_full"] / flora.reindex(s.index)
        lines.append(f"  - FRAQ at {100 * tau:.0f}% energy: {pct.min():.1f}-{pct.max():.1f}% of the stack.")
    return lines


# ----------------------------------------------------------------------------- Fig. 3


def _slope(x, y) -> float:
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def _slope_rows(lx: np.ndarray, ys: list) -> np.ndarray:
    """Least-squares slope of log y on ``lx`` (log x), elementwise over the draws in ``ys``."""
    ly = np.log(np.stack([np.asarray(y, float) for y in ys]))
    dx = (lx - lx.mean()).reshape((-1,) + (1,) * (ly.ndim - 1))
    return (dx * (ly - ly.mean(axis=0))).sum(axis=0) / (dx ** 2).sum()


def _ms(row) -> np.ndarray:
    return 1e3 * _arr(row["timing.samples"])


EXP = "FlexLoRA's exponent of d minus FRAQ's above 1"


def fig3_lines(d: pd.DataFrame) -> list[str]:
    """``d``: :func:`analysis.figures.fig3_summary` rows (with ``timing.samples``)."""
    lines = []
    groups, points, slower, absent, sets = {}, [], [], [], []
    lowest = total = 0
    for (sweep, x, mode), g in d.groupby(["sweep", "x", "mode"]):
        name = f"{sweep}={int(x)} {mode}"
        if "FRAQ" not in set(g["method_name"]):
            absent.append(f"{name} FRAQ (no result)")
            continue
        if len(g) < 2:
            continue
        total += 1
        sets.append(g)
        keys = {}
        for _, r in g.iterrows():
            keys[r["method_name"]] = f"{name} {r['method_name']}"
            groups[keys[r["method_name"]]] = _ms(r)
        points.append((keys["FRAQ"], [k for m, k in keys.items() if m != "FRAQ"]))
        f = g[g["method_name"] == "FRAQ"].iloc[0]
        others = g[g["method_name"] != "FRAQ"]
        if not f["ms"] <= others["ms"].min():
            o = others.loc[others["ms"].idxmin()]
            slower.append(f"{name}: {o['method_name']} {o['ms']:.1f} ms vs FRAQ {f['ms']:.1f} ms")
        lowest += int(f["peak_mib"] <= others["peak_mib"].min() * 1.001)

    def margin(g):  # the smallest, over points, of (fastest other method) / FRAQ
        return np.min(np.stack([np.min(np.stack([g[o] for o in others]), axis=0) / g[f] for f, others in points]),
                      axis=0)

    if absent:
        v = not_measured("FRAQ is the fastest method", absent)
        lines.append(f"- Paper: FRAQ is the fastest method across both sweeps. {_ours(v, '')}")
    elif points:
        v = judge(groups, margin, above=1.0, claim="FRAQ is the fastest method", machine=d, paired=paired(*sets))
        lines.append(f"- Paper: FRAQ is the fastest method across both sweeps. "
                     + _ours(v, f"{v.value:.2f}x", ".2f", "x", test=f"the fastest other method's time over FRAQ's "
                             f"above 1 at each of the {total} points, the smallest ratio")
                     + f"; FRAQ's median is the fastest at {total - len(slower)} of {total}"
                     + (f" (not at {'; '.join(slower)})" if slower else "") + ".")
        lines.append(f"- Paper: FRAQ keeps low peak memory. Ours: FRAQ's tensor peak is the lowest at {lowest} of "
                     f"{total} points (exact).")
    for name in ["FRAQ", "FLoRIST", "FlexLoRA"]:
        for sweep, var in (("d", "d"), ("r", "r")):
            s = d[(d["method_name"] == name) & (d["sweep"] == sweep) & (d["mode"] == "batched")]
            if len(s) >= 2:
                lines.append(f"  - {name}, batched, time ~ {var}^{_slope(s['x'], s['ms']):.2f} over {var} = "
                             f"{int(s['x'].min())}..{int(s['x'].max())} ({s['ms'].min():.1f} -> {s['ms'].max():.1f} ms), "
                             f"peak memory ~ {var}^{_slope(s['x'], s['peak_mib']):.2f}.")
    fl = d[(d["method_name"] == "FlexLoRA") & (d["sweep"] == "d") & (d["mode"] == "batched")].sort_values("x")
    fr = d[(d["method_name"] == "FRAQ") & (d["sweep"] == "d") & (d["mode"] == "batched")].sort_values("x")
    if len(fl) >= 2 and len(fr) >= 2:
        g = {f"FlexLoRA d={int(r['x'])}": _ms(r) for _, r in fl.iterrows()}
        g.update({f"FRAQ d={int(r['x'])}": _ms(r) for _, r in fr.iterrows()})
        lfl, lfr = np.log(fl["x"].to_numpy(float)), np.log(fr["x"].to_numpy(float))
        kfl, kfr = [f"FlexLoRA d={int(x)}" for x in fl["x"]], [f"FRAQ d={int(x)}" for x in fr["x"]]
        v = judge(g, lambda g: _slope_rows(lfl, [g[k] for k in kfl]) - _slope_rows(lfr, [g[k] for k in kfr]),
                  above=1.0, claim="FlexLoRA's time grows faster with d", machine=pd.concat([fl, fr]),
                  paired=list(fl["x"]) == list(fr["x"]) and paired(*[pd.concat([fl[fl["x"] == x], fr[fr["x"] == x]])
                                                                    for x in fl["x"]]))
        lines.append(f"- Paper: FlexLoRA's runtime and memory grow rapidly with d (dense d x D aggregate and SVD), "
                     f"FRAQ's do not. "
                     f"{_ours(v, f'{v.value:.2f}', '.2f', test=EXP)}; FlexLoRA's time grows as "
                     f"d^{_slope(fl['x'], fl['ms']):.1f} (FRAQ's as d^{_slope(fr['x'], fr['ms']):.1f}) and its memory "
                     f"as d^{_slope(fl['x'], fl['peak_mib']):.1f}, measured up to d = {int(fl['x'].max())} (larger d "
                     "skipped as too slow here; the dense SVD's asymptote is d^3).")
    pt = d[(d["mode"] == "batched")]
    for (sweep, x), g in pt.groupby(["sweep", "x"]):
        if set(g["method_name"]) >= {"FRAQ", "FLoRIST", "FlexLoRA"} and sweep == "d":
            t = g.set_index("method_name")["ms"]
            lines.append(f"- At d = {num(x)}, r = {int(g['r'].iloc[0])} (batched): FRAQ {t['FRAQ']:.1f} ms, FLoRIST "
                         f"{t['FLoRIST'] / t['FRAQ']:.1f}x slower, FlexLoRA {t['FlexLoRA'] / t['FRAQ']:.0f}x slower "
                         f"(paper, GPU, whole models: 8-15x and 190-2,300x).")
    return lines


# ----------------------------------------------------------------------------- Fig. 4


def _per_point(df: pd.DataFrame, key: str, col: str) -> dict:
    """``{(method, key value): per-matrix array}``, the rows of one (method, key) concatenated."""
    out = {}
    for (m, k), g in df.groupby(["method", key]):
        out[(m, k)] = np.concatenate([_arr(v) for v in g[col]]) if len(g) else np.array([])
    return out


def _max_over(keys):
    return lambda g: np.max(np.stack([g[k] for k in keys]), axis=0)


def _min_over(keys):
    return lambda g: np.min(np.stack([g[k] for k in keys]), axis=0)


def fig4_lines(rank: pd.DataFrame, cond: pd.DataFrame) -> list[str]:
    """``rank``, ``cond``: the fig4_rank and fig4_cond rows (per-matrix lists, as loaded)."""
    from analysis.figures import cut_rank, full_rank

    lines = []
    err, opt = _per_point(rank, "p", "relative_error"), _per_point(rank, "p", "optimal_error")
    ps = sorted(p for (m, p) in err if m == "fraq")
    trunc = [p for p in ps if np.nanmean(opt[("fraq", p)]) > 1e-15]
    if trunc and "sin_left" in rank:
        lines.extend(_first_order_lines(rank, trunc))
    elif trunc:
        v = not_measured("FRAQ tracks the Eckart-Young optimum", ["the first-order metrics (results without them)"])
        lines.append(f"- Paper: FRAQ tracks the Eckart-Young optimum. {_ours(v, '')}")
    both = [p for p in ps if ("florist", p) in err and p in trunc]
    if both and "sin_left" in rank:
        first = _per_point(rank, "p", "sin_left")
        g = {f"p={p}": _finite_ratio(first.get(("fraq", p)), first.get(("florist", p))) for p in both}
        g = {k: v for k, v in g.items() if v.size}
        if g:
            v = judge(g, _max_over(list(g)), below=10.0, center=np.mean, claim="FRAQ matches FLoRIST's fidelity")
            lines.append(f"- Paper: FRAQ matches FLoRIST's fidelity. "
                         f"{_ours(v, f'{v.value:.2g}', '.2g', test='FRAQ / FLoRIST largest principal-angle sine below 10 at every truncating p')}"
                         " (first order; the total errors, which truncation dominates, agree by construction).")
    full = [p for p in ps if p not in trunc]
    if full:
        p = max(full)
        lines.append(f"  - At p = stacked rank ({int(p)}, no truncation) FRAQ's error is {np.nanmean(err[('fraq', p)]):.1e}"
                     + (f", FLoRIST's {np.nanmean(err[('florist', p)]):.1e}" if ("florist", p) in err else "") + ".")
    if "flexlora" not in set(rank["method"]):
        lines.append("  - FlexLoRA is not in the left panel here: its dense SVD of every LLaMA module (d >= 1024) is "
                     "too slow for this sweep (`--size paper` runs it on the d = 1024 modules).")
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
        v = judge(g, _max_over(list(g)), below=1e-6, center=np.mean, claim="FRAQ stays near 1e-7 through kappa=1e10")
        lines.append(f"- Paper: FRAQ stays near 1e-7 through kappa = 1e10 (full output rank). "
                     f"{_ours(v, f'{v.value:.1e}', '.1e', test='mean error below 1e-6 at every kappa')}, the "
                     f"largest over kappa = {kappas[0]:.0e}..{kappas[-1]:.0e}; at full rank no eigenvector error "
                     "can show (Q U U^T H = Q H for any orthogonal U).")
    if not cond_cut.empty and "sin_left" in cond_cut:
        lines.extend(_cut_lines(cond_cut))
    for other, claim, thr in (("flexlora", "FlexLoRA is roughly two orders of magnitude less accurate than FRAQ", 30),
                              ("florist", "FLoRIST is close to FRAQ", None)):
        if not any(m == other for m, _ in c) or not any(m == "fraq" for m, _ in c):
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
                     f"{_ours(v, f'{v.value:.1f}x', '.1f', 'x', test=f'{name} / FRAQ above {thr}x at every kappa')}"
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
                     f"{_ours(v, f'{ok}/{n} modules within the Wedin bound, worst sin / bound {worst:.2g}', test='the largest principal-angle sine to the float64 subspaces within Wedin bound at every truncating p')}"
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


# ----------------------------------------------------------------------------- Table 4


def table4_lines(df: pd.DataFrame) -> list[str]:
    rows = {r["variant"]: r for _, r in df.iterrows()}
    need = ["adaptive-gram", "fixed-gram", "adaptive-svd"]
    missing = [n for n in need if n not in rows]
    if missing:
        v = not_measured("Table 4", [f"{n} (no result)" for n in missing])
        return [f"- Paper: Table 4's ablation. {_ours(v, '')}"]
    a, f, s = (rows[n] for n in need)
    t = {n: _ms(rows[n]) for n in need}
    mib = {n: float(rows[n]["peak_bytes"]) / 2**20 for n in need}
    same = paired(df[df["variant"].isin(need)])
    orient = judge({"fixed": t["fixed-gram"], "adaptive": t["adaptive-gram"]}, lambda g: g["fixed"] / g["adaptive"],
                   above=1.0, claim="adaptive orientation is faster than fixed", machine=df, paired=same)
    gram = judge({"svd": t["adaptive-svd"], "gram": t["adaptive-gram"]}, lambda g: g["svd"] / g["gram"], above=2.0,
                 claim="Gram recovery is faster than coordinate SVD", machine=df, paired=same)
    gaps = {"adaptive": _arr(a["gap_to_svd"]), "fixed": _arr(f["gap_to_svd"])}
    gap = judge(gaps, lambda g: np.maximum(g["adaptive"], g["fixed"]), below=1e-3, center=np.mean,
                claim="Gram variants within 0.1% of coordinate SVD")
    less = 100 * (1 - mib["adaptive-gram"] / mib["adaptive-svd"])
    gap_text = f"{np.mean(gaps['adaptive']):.1e} and {np.mean(gaps['fixed']):.1e}"
    return [
        f"- Paper: adaptive orientation is 1.83x faster than fixed, at equal memory. "
        f"{_ours(orient, f'{orient.value:.2f}x', '.2f', 'x', test='fixed / adaptive time above 1')}, memory ratio "
        f"{mib['fixed-gram'] / mib['adaptive-gram']:.2f} (exact).",
        f"- Paper: Gram recovery is 4.38x faster than coordinate SVD and uses 54.7% less memory. "
        f"{_ours(gram, f'{gram.value:.2f}x', '.2f', 'x', test='coordinate SVD / Gram time above 2')}; "
        f"{_ours(exact(less, above=0), f'{less:.1f}% less', test='less tensor memory')}.",
        f"- Paper: both Gram variants within 0.1% of the coordinate-SVD reference (2.56e-4, 8.51e-4). "
        f"{_ours(gap, gap_text, '.1e', test='both mean errors below 1e-3')} "
        "(LoRA-like synthetic stacks, CPU float32).",
        f"- Absolute numbers are not comparable (GH200 vs {int(df['modules'].iloc[0])} modules on this machine): "
        f"Adaptive + Gram {np.median(t['adaptive-gram']):.1f} ms and {mib['adaptive-gram']:.1f} MiB here.",
    ]


# ----------------------------------------------------------------------------- Table 5


def table5_lines(t5: pd.DataFrame) -> list[str]:
    lines = []
    for name, g in t5.groupby("Method"):
        lo, hi = g["counted / model"].min(), g["counted / model"].max()
        lines.append(f"- {name}: counted / analytic (code constants) FLOPs = {lo:.2f}-{hi:.2f}"
                     + (" (the model accounts for what runs)." if hi < 1.05 and lo > 0.95 else
                        " -- **the analytic model misses work the code does** (see the note below)."))
    bad = t5[~np.isfinite(pd.to_numeric(t5["counted GFLOP"], errors="coerce"))]
    claim = "- Paper (Table 5): FRAQ needs the fewest FLOPs, FlexLoRA the most. "
    if not bad.empty:
        v = not_measured("Table 5 FLOPs", [f"{r.Method} {r.sweep} d={r._4} r={r.r}" for r in bad.itertuples()])
        return lines + [claim + _ours(v, "")]
    order_ok = True
    for _, g in t5.groupby(["sweep", "d = D", "r"]):
        c = g.set_index("Method")["counted GFLOP"]
        if "FRAQ" in c and (c.drop("FRAQ") < c["FRAQ"]).any():
            order_ok = False
    lines.append(claim + _ours(holds(order_ok), "on counted FLOPs at every batched point of the sweeps") + ".")
    return lines


# ----------------------------------------------------------------------------- backends


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
