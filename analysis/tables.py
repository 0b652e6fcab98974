"""One function per table: tidy rows in, a DataFrame shaped like the paper's table out.

:func:`markdown` renders any of them for ``report.md`` (no extra dependency).
"""

from __future__ import annotations

import pandas as pd

from analysis.style import NAMES

__all__ = ["table4_ablation", "table5_flops", "tables123_latency", "markdown"]
VARIANT_LABELS = {"adaptive-gram": "Adaptive + Gram", "fixed-gram": "Fixed + Gram",
                  "adaptive-svd": "Adaptive + coordinate SVD", "library": "fraq.recompress (library)"}


def table4_ablation(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4: per variant, median time (IQR), tensor peak memory, mean relative error
    against the coordinate-SVD product and mean excess over the Eckart-Young optimum,
    with the paper's time and memory (:func:`analysis.loaders.paper`) and our ratios to
    Adaptive + Gram beside them."""
    from analysis.loaders import explode_per_matrix, paper

    d = explode_per_matrix(df, ["gap_to_svd", "excess"])
    table = paper()["table4"]
    d["paper_ms"] = d["variant"].map(lambda v: table[v][0] if v in table else None)
    d["paper_mib"] = d["variant"].map(lambda v: table[v][1] if v in table else None)
    g = d.groupby("variant").agg(ms=("timing.median", "first"), q25=("timing.q25", "first"),
                                 q75=("timing.q75", "first"), peak=("peak_bytes", "first"),
                                 gap=("gap_to_svd", "mean"), excess=("excess", "mean"),
                                 paper_ms=("paper_ms", "first"), paper_mib=("paper_mib", "first"))
    order = [v for v in VARIANT_LABELS if v in g.index]
    g = g.loc[order]
    base_ms, base_mib = g.loc["adaptive-gram", "ms"], g.loc["adaptive-gram", "peak"]
    paper_base = g.loc["adaptive-gram", ["paper_ms", "paper_mib"]]
    rows = []
    for v, r in g.iterrows():
        paper = None if pd.isna(r.paper_ms) else (r.paper_ms, r.paper_mib)
        rows.append({
            "Variant": VARIANT_LABELS[v],
            "Time (ms)": f"{r.ms * 1e3:.1f} [{r.q25 * 1e3:.1f}, {r.q75 * 1e3:.1f}]",
            "x time": f"{r.ms / base_ms:.2f}",
            "Memory (MiB)": f"{r.peak / 2**20:.1f}",
            "x mem": f"{r.peak / base_mib:.2f}",
            "Rel. error vs coord. SVD": "reference" if v == "adaptive-svd" else f"{r.gap:.2e}",
            "Excess over optimum": f"{r.excess:.1e}",
            "Paper ms (x)": "" if paper is None else f"{paper[0]:.2f} ({paper[0] / paper_base['paper_ms']:.2f})",
            "Paper MiB (x)": "" if paper is None else f"{paper[1]:.2f} ({paper[1] / paper_base['paper_mib']:.2f})",
        })
    return pd.DataFrame(rows)


def table5_flops(df: pd.DataFrame) -> pd.DataFrame:
    """Table 5: analytic FLOPs (the paper's leading-order formulas, and the same pipelines
    with the code's constants) next to counted FLOPs next to measured time, for the batched
    points of the Fig. 3 sweeps (all modules of one call)."""
    d = df[df["mode"] == "batched"].copy()
    d = d.sort_values(["sweep", "d", "r", "method"], key=lambda s: s.map({"r": 0, "d": 1}) if s.name == "sweep" else s)
    backend = d["backend"] if "backend" in d else pd.Series(None, index=d.index)
    out = pd.DataFrame({
        "sweep": d["sweep"], "Method": d["method"].map(NAMES), "backend": backend.fillna("-"),
        "d = D": d["d"], "r": d["r"], "p": d["p"],
        "modules": d["modules"],
        "Table 5 GFLOP": d["analytic_flops_table5"] / 1e9,
        "model (code) GFLOP": d["analytic_flops_full"] / 1e9,
        "counted GFLOP": d["counted_flops"] / 1e9,
        "counted / model": d["counted_flops"] / d["analytic_flops_full"],
        "time (ms)": d["timing.median"] * 1e3,
        "GFLOP/s": d["counted_flops"] / d["timing.median"] / 1e9,
    })
    return out.reset_index(drop=True)


def tables123_latency(df: pd.DataFrame) -> pd.DataFrame:
    """Tables 1-3's downlink and latency columns, one row per (preset, method), from the
    ``tables123`` results (each holds one preset's rows), beside the paper's GH200 numbers
    (:func:`analysis.loaders.paper`)."""
    from analysis.loaders import paper as paper_numbers

    numbers = paper_numbers()["tables123"]
    rows = []
    for _, rec in df.iterrows():
        for r in rec["rows"]:
            table = numbers.get(rec["preset"], {})
            lat = r.get("latency") or {}
            paper = table.get(r["method"]) or table.get(r["method"].split(" (")[0]) or [None, None]
            rows.append({"preset": rec["preset"], "method": r["method"],
                         "downlink %FLoRA": r.get("downlink_pct"),
                         "latency ms (median)": lat["median"] * 1e3 if lat else None,
                         "IQR ms": (lat["q75"] - lat["q25"]) * 1e3 if lat else None,
                         "paper %": paper[0], "paper ms": paper[1],
                         "note": "skipped" if "skipped" in r else ("extrapolated" if "extrapolated" in r else "")})
    return pd.DataFrame(rows)


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e4 or abs(v) < 1e-2:
            return f"{v:.3g}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of ``df`` (floats to 3 significant digits)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    return "\n".join(lines)
