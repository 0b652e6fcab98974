"""Our numbers beside the paper's claims, figure by figure: one function per figure/table,
each returning markdown bullet lines computed from the tidy rows (nothing typed by hand
but the paper's own statements, which are quoted)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import NAMES

__all__ = ["fig1_lines", "fig3_lines", "fig4_lines", "table4_lines", "table5_lines", "backends_lines"]


def _verdict(ok: bool) -> str:
    return "**agrees**" if ok else "**disagrees**"


def fig1_lines(df: pd.DataFrame) -> list[str]:
    flora = df[df["method"] == "flora"].set_index(["clients", "client_rank"])["downlink_params_full"]
    lines = []
    grows = all(np.all(np.diff(flora.xs(rk, level="client_rank").sort_index().values) > 0)
                for rk in flora.index.get_level_values("client_rank").unique())
    lines.append(f"- Paper: exact stacking's per-client downlink grows with the client count and local rank. "
                 f"Ours {_verdict(grows)}: FLoRA's stack goes from {flora.min() / 1e6:.1f} M to "
                 f"{flora.max() / 1e6:.1f} M parameters per client over the grid (it is (m + n) K r_k per module).")
    fr = df[(df["method"] == "fraq") & (df["tau"].round(2) == 0.90)].set_index(["clients", "client_rank"])
    if not fr.empty:
        cut = 100 * (1 - fr["downlink_params_full"] / flora.reindex(fr.index))
        ok = cut.min() >= 50
        lines.append(f"- Paper: with at least 90% energy retained, recompression cuts the payload by 55.5-87.3% "
                     f"(real LLaMA-3.2-3B updates). Ours at 90% energy: {cut.min():.1f}-{cut.max():.1f}% "
                     f"({_verdict(ok)} in kind; the spread depends on the synthetic spectra, not real adapters).")
    for tau in sorted(df["tau"].dropna().unique()):
        s = df[(df["method"] == "fraq") & (df["tau"] == tau)].set_index(["clients", "client_rank"])
        pct = 100 * s["downlink_params_full"] / flora.reindex(s.index)
        lines.append(f"  - FRAQ at {100 * tau:.0f}% energy: {pct.min():.1f}-{pct.max():.1f}% of the stack.")
    return lines


def _slope(x, y) -> float:
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def fig3_lines(d: pd.DataFrame) -> list[str]:
    """``d``: :func:`analysis.figures.fig3_summary` rows."""
    lines = []
    total = fastest = lowest = 0
    slower = []
    for (sweep, x, mode), g in d.groupby(["sweep", "x", "mode"]):
        if len(g) < 2 or "FRAQ" not in set(g["method_name"]):
            continue
        total += 1
        f = g[g["method_name"] == "FRAQ"].iloc[0]
        others = g[g["method_name"] != "FRAQ"]
        if f["ms"] <= others["ms"].min():
            fastest += 1
        else:
            o = others.loc[others["ms"].idxmin()]
            slower.append(f"{sweep}={x} {mode}: {o['method_name']} {o['ms']:.1f} ms vs FRAQ {f['ms']:.1f} ms")
        lowest += int(f["peak_mib"] <= others["peak_mib"].min() * 1.001)
    lines.append(f"- Paper: FRAQ is the fastest method across both sweeps. Ours {_verdict(fastest == total)}: "
                 f"fastest (median) at {fastest} of {total} points" + (f"; not at {'; '.join(slower)}" if slower else "")
                 + ".")
    lines.append(f"- Paper: FRAQ keeps low peak memory. Ours: FRAQ's tensor peak is the lowest at {lowest} of "
                 f"{total} points.")
    for name in ["FRAQ", "FLoRIST", "FlexLoRA"]:
        for sweep, var in (("d", "d"), ("r", "r")):
            s = d[(d["method_name"] == name) & (d["sweep"] == sweep) & (d["mode"] == "batched")]
            if len(s) >= 2:
                lines.append(f"  - {name}, batched, time ~ {var}^{_slope(s['x'], s['ms']):.2f} over {var} = "
                             f"{int(s['x'].min())}..{int(s['x'].max())} ({s['ms'].min():.1f} -> {s['ms'].max():.1f} ms), "
                             f"peak memory ~ {var}^{_slope(s['x'], s['peak_mib']):.2f}.")
    fl = d[(d["method_name"] == "FlexLoRA") & (d["sweep"] == "d") & (d["mode"] == "batched")]
    fr = d[(d["method_name"] == "FRAQ") & (d["sweep"] == "d") & (d["mode"] == "batched")]
    if len(fl) >= 2 and len(fr) >= 2:
        k, kf = _slope(fl["x"], fl["ms"]), _slope(fr["x"], fr["ms"])
        lines.append(f"- Paper: FlexLoRA's runtime and memory grow rapidly with d (dense d x D aggregate and SVD), "
                     f"FRAQ's do not. Ours {_verdict(k > kf + 1)}: FlexLoRA's time grows as d^{k:.1f} (FRAQ's as "
                     f"d^{kf:.1f}) and its memory as d^{_slope(fl['x'], fl['peak_mib']):.1f}, measured up to "
                     f"d = {int(fl['x'].max())} (larger d skipped as too slow here; the dense SVD's asymptote is d^3).")
    pt = d[(d["mode"] == "batched")]
    for (sweep, x), g in pt.groupby(["sweep", "x"]):
        if set(g["method_name"]) >= {"FRAQ", "FLoRIST", "FlexLoRA"} and sweep == "d":
            t = g.set_index("method_name")["ms"]
            lines.append(f"- At d = {x}, r = {int(g['r'].iloc[0])} (batched): FRAQ {t['FRAQ']:.1f} ms, FLoRIST "
                         f"{t['FLoRIST'] / t['FRAQ']:.1f}x slower, FlexLoRA {t['FlexLoRA'] / t['FRAQ']:.0f}x slower "
                         f"(paper, GPU, whole models: 8-15x and 190-2,300x).")
    return lines


def fig4_lines(summary: pd.DataFrame, cond: pd.DataFrame) -> list[str]:
    """``summary``: :func:`analysis.figures.fig4_summary`; ``cond``: exploded fig4_cond rows."""
    lines = []
    f = summary[summary["method"] == "fraq"].set_index("p")
    trunc = f[f["optimum"] > 1e-15]
    rel_excess = ((trunc["mean"] - trunc["optimum"]) / trunc["optimum"]).abs().max()
    lines.append(f"- Paper: FRAQ tracks the Eckart-Young optimum. Ours {_verdict(rel_excess < 1e-3)}: over the "
                 f"truncated ranks p = {int(trunc.index.min())}..{int(trunc.index.max())} FRAQ's mean error is within "
                 f"a relative {rel_excess:.1e} of the optimum.")
    fl = summary[summary["method"] == "florist"].set_index("p")
    if not fl.empty:
        both = f.join(fl.add_suffix("_fl"), how="inner")
        ratio = (both["mean"] / both["mean_fl"])
        lines.append(f"- Paper: FRAQ matches FLoRIST's fidelity. Ours {_verdict(ratio.max() < 1.01)}: FRAQ / FLoRIST "
                     f"mean error {ratio.min():.3g}-{ratio.max():.3g} across p (below 1 where FRAQ is more accurate).")
    full = f[f["optimum"] <= 1e-15]
    if not full.empty:
        lines.append(f"  - At p = stacked rank ({int(full.index.max())}, no truncation) FRAQ's error is "
                     f"{full['mean'].iloc[-1]:.1e}" + (f", FLoRIST's {fl.loc[full.index.max(), 'mean']:.1e}"
                                                       if full.index.max() in fl.index else "") + ".")
    if "flexlora" not in set(summary["method"]):
        lines.append("  - FlexLoRA is not in the left panel here: its dense SVD of every LLaMA module (d >= 1024) is "
                     "too slow for this sweep (`--paper` runs it on the d = 1024 modules).")
    c = cond.groupby(["method", "kappa"])["relative_error"].mean().unstack("method")
    if "fraq" in c:
        worst = c["fraq"].max()
        lines.append(f"- Paper: FRAQ stays near 1e-7 through kappa = 1e10. Ours {_verdict(worst < 1e-6)}: FRAQ's mean "
                     f"error is {c['fraq'].min():.1e}-{worst:.1e} over kappa = {c.index.min():.0e}..{c.index.max():.0e}.")
    if "flexlora" in c and "fraq" in c:
        r = (c["flexlora"] / c["fraq"])
        lines.append(f"- Paper: FlexLoRA is roughly two orders of magnitude less accurate than FRAQ. Ours "
                     f"{_verdict(r.min() > 30)}: FlexLoRA / FRAQ = {r.min():.1f}-{r.max():.1f}x "
                     f"(FlexLoRA's error {c['flexlora'].min():.1e}-{c['flexlora'].max():.1e}).")
    if "florist" in c and "fraq" in c:
        r = (c["florist"] / c["fraq"])
        lines.append(f"- Paper: FLoRIST is close to FRAQ. Ours: FLoRIST / FRAQ = {r.min():.1f}-{r.max():.1f}x "
                     f"(FLoRIST's error {c['florist'].min():.1e}-{c['florist'].max():.1e}).")
    return lines


def table4_lines(df: pd.DataFrame) -> list[str]:
    from analysis.loaders import explode_per_matrix

    g = explode_per_matrix(df, ["gap_to_svd"]).groupby("variant").agg(
        ms=("timing.median", "first"), mib=("peak_bytes", "first"), gap=("gap_to_svd", "mean"))
    a, f, s = g.loc["adaptive-gram"], g.loc["fixed-gram"], g.loc["adaptive-svd"]
    lines = [
        f"- Paper: adaptive orientation is 1.83x faster than fixed, at equal memory. Ours "
        f"{_verdict(f.ms / a.ms > 1.1)}: {f.ms / a.ms:.2f}x, memory ratio {f.mib / a.mib:.2f}.",
        f"- Paper: Gram recovery is 4.38x faster than coordinate SVD and uses 54.7% less memory. Ours "
        f"{_verdict(s.ms / a.ms > 2 and s.mib > a.mib)}: {s.ms / a.ms:.2f}x faster, "
        f"{100 * (1 - a.mib / s.mib):.1f}% less tensor memory.",
        f"- Paper: both Gram variants within 0.1% of the coordinate-SVD reference (2.56e-4, 8.51e-4). Ours "
        f"{_verdict(max(a.gap, f.gap) < 1e-3)}: {a.gap:.1e} and {f.gap:.1e} (LoRA-like synthetic stacks, CPU float32).",
        f"- Absolute numbers are not comparable (GH200 vs {int(df['modules'].iloc[0])} modules on this CPU): "
        f"Adaptive + Gram {a.ms * 1e3:.1f} ms and {a.mib / 2**20:.1f} MiB here.",
    ]
    return lines


def table5_lines(t5: pd.DataFrame) -> list[str]:
    lines = []
    for name, g in t5.groupby("Method"):
        lo, hi = g["counted / model"].min(), g["counted / model"].max()
        lines.append(f"- {name}: counted / analytic (code constants) FLOPs = {lo:.2f}-{hi:.2f}"
                     + (" (the model accounts for what runs)." if hi < 1.05 and lo > 0.95 else
                        " -- **the analytic model misses work the code does** (see the note below)."))
    order_ok = True
    for _, g in t5.groupby(["sweep", "d = D", "r"]):
        c = g.set_index("Method")["counted GFLOP"]
        if "FRAQ" in c and (c.drop("FRAQ") < c["FRAQ"]).any():
            order_ok = False
    lines.append(f"- Paper (Table 5): FRAQ needs the fewest FLOPs, FlexLoRA the most. Ours {_verdict(order_ok)} "
                 f"on counted FLOPs at every batched point of the sweeps.")
    return lines


def backends_lines(df: pd.DataFrame, summary: list[str] | None) -> list[str]:
    lines = [f"- {s.strip()}" for s in (summary or [])]
    hard = df[df["exact"].astype(bool) & df["section"].isin(["condition", "rank-deficient"])] if summary is None else df[:0]
    if not hard.empty:
        worst = hard.loc[hard["gap_to_optimum"].idxmax()]
        lines.append(f"- worst exact-backend error above the optimum on the ill-conditioned and rank-deficient cases: "
                     f"{worst['gap_to_optimum']:.2e} ({worst['backend']}, {worst['case']}).")
    lora = df[df["section"] == "lora"]
    for case, g in lora.groupby("case"):
        best = g.loc[g["ms_1t"].idxmin()]
        lines.append(f"- {case}: fastest backend {best['backend']} ({best['ms_1t']:.1f} ms, 1 thread; "
                     f"Householder {g.set_index('backend').loc['householder', 'ms_1t']:.1f} ms), error above optimum "
                     f"{best['gap_to_optimum']:.1e}.")
    return lines
