"""What the report's tables share: :func:`markdown` renders any table for ``report.md`` (no
extra dependency), and Fig. 3's two tables (Table 5's FLOPs, the memory cross-check).

Each other table is built by its report section (``analysis/sections/<name>.py``, beside its
figure and its verdicts): tidy rows in, a DataFrame shaped like the paper's table out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.columns import column_format, numbers
from analysis.style import described, integers

__all__ = ["markdown", "memory_crosscheck", "table5_flops"]


def table5_flops(df: pd.DataFrame) -> pd.DataFrame:
    """Table 5: analytic FLOPs (the paper's leading-order formulas, and the same pipelines
    with the code's constants) next to counted FLOPs next to measured time, for the batched
    points of the Fig. 3 sweeps (all modules of one call)."""
    model = df["analytic_flops_full"].notna() if "analytic_flops_full" in df else True
    d = df[(df["mode"] == "batched") & model].copy()  # the textbook baselines have no FLOP model: left out
    d = d.sort_values(["sweep", "d", "r", "method"], key=lambda s: s.map({"r": 0, "d": 1}) if s.name == "sweep" else s)
    backend = d["backend"] if "backend" in d else pd.Series(None, index=d.index)
    out = pd.DataFrame({
        "sweep": d["sweep"], "Method": described(d)["method_name"], "backend": backend.fillna("-"),
        "d = D": d["d"], "r": d["r"], "p": d["p"],
        "modules": d["modules"],
        "Table 5 GFLOP": d["analytic_flops_table5"] / 1e9,
        "model (code) GFLOP": d["analytic_flops_full"] / 1e9,
        "counted GFLOP": d["counted_flops"] / 1e9,
        "counted / model": d["counted_flops"] / d["analytic_flops_full"],
        "time (ms)": d["timing.median"] * 1e3,
        "GFLOP/s": d["counted_flops"] / d["timing.median"] / 1e9,
        "% of GEMM bound": 100 * _column(d, "gemm_bound_s") / d["timing.median"],
        "% of roofline": 100 * _column(d, "roof_s") / d["timing.median"],
    })
    return integers(out, ["d = D", "r", "p", "modules"]).reset_index(drop=True)


def _column(d: pd.DataFrame, name: str) -> pd.Series:
    """Column ``name`` of ``d``, NaN where the results do not have it."""
    return pd.to_numeric(d[name], errors="coerce") if name in d else pd.Series(np.nan, index=d.index)


def memory_crosscheck(df: pd.DataFrame) -> pd.DataFrame:
    """The tensor peak beside the resident set's growth over one call in a process that has
    run nothing else (``rss_warm``: a second call; ``rss_cold``: the first, libraries' set-up included), for
    the points that carry both (Fig. 3's batched d sweep); empty where none do."""
    if "rss_warm" not in df:
        return pd.DataFrame()
    d = df[pd.to_numeric(df["rss_warm"], errors="coerce").notna()].sort_values(["d", "method"])
    out = pd.DataFrame({
        "Method": described(d)["method_name"], "d = D": d["d"], "r": d["r"],
        "tensor peak (MiB)": d["peak_bytes"] / 2**20,
        "RSS growth, warm (MiB)": d["rss_warm"] / 2**20,
        "RSS growth, cold (MiB)": d["rss_cold"] / 2**20,
        "warm / tensor": d["rss_warm"] / d["peak_bytes"],
    })
    return integers(out, ["d = D", "r"]).reset_index(drop=True)


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of ``df``: each column's numbers in the one format
    :func:`analysis.columns.column_format` chooses from the whole column, a missing value
    (None, NaN) as ``-``, anything else as its text."""
    cols = list(df.columns)
    fmts = {c: column_format(df[c]) for c in cols}

    def cell(c, v) -> str:
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            return "-"
        return fmts[c](v) if numbers([v]) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(cell(c, r[c]) for c in cols) + " |")
    return "\n".join(lines)
