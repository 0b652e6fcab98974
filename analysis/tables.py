"""One function per table: tidy rows in, a DataFrame shaped like the paper's table out.

:func:`markdown` renders any of them for ``report.md`` (no extra dependency).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.columns import column_format, numbers
from analysis.style import PAPER_ORDER, described, display_name, integers

__all__ = ["PRESET_TITLES", "shown_name", "table4_ablation", "table5_flops", "tables123_latency",
           "tables123_presets", "tables123_rows", "markdown"]
VARIANT_LABELS = {"adaptive-gram": "Adaptive + Gram", "fixed-gram": "Fixed + Gram",
                  "adaptive-svd": "Adaptive + coordinate SVD", "library": "fraq.recompress (library)"}


def table4_ablation(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4: per variant, median time (IQR), tensor peak memory, mean relative error
    against the coordinate-SVD product, mean excess over the Eckart-Young optimum, the
    largest principal-angle sine to the float64 subspaces beside the smallest Wedin bound
    (first order; where the results carry it),
    with the paper's time and memory (:func:`analysis.loaders.paper`) and our ratios to
    Adaptive + Gram beside them."""
    from analysis.loaders import explode_per_matrix, paper

    cols = ["gap_to_svd", "excess"] + [c for c in ("sin_left", "sin_right", "bound_first") if c in df]
    d = explode_per_matrix(df, cols)
    first = "sin_left" in d
    rss = "rss_warm" in d and pd.to_numeric(d["rss_warm"], errors="coerce").notna().any()
    if first:
        d["sin"] = d[["sin_left", "sin_right"]].max(axis=1)
    table = paper()["table4"]
    d["paper_ms"] = d["variant"].map(lambda v: table[v][0] if v in table else None)
    d["paper_mib"] = d["variant"].map(lambda v: table[v][1] if v in table else None)
    g = d.groupby("variant").agg(ms=("timing.median", "first"), q25=("timing.q25", "first"),
                                 q75=("timing.q75", "first"), peak=("peak_bytes", "first"),
                                 gap=("gap_to_svd", "mean"), excess=("excess", "mean"),
                                 paper_ms=("paper_ms", "first"), paper_mib=("paper_mib", "first"),
                                 **({"sin": ("sin", "max"), "bound": ("bound_first", "min")} if first else {}),
                                 **({"warm": ("rss_warm", "first"), "cold": ("rss_cold", "first")} if rss else {}))
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
            **({"RSS growth MiB, warm (cold)": f"{r.warm / 2**20:.2f} ({r.cold / 2**20:.2f})"} if rss else {}),
            "Rel. error vs coord. SVD": "reference" if v == "adaptive-svd" else f"{r.gap:.2e}",
            "Excess over optimum": f"{r.excess:.1e}",
            **({"sin θ max (Wedin bound)": f"{r.sin:.1e} ({r.bound:.1e})"} if first else {}),
            "Paper ms (x)": "" if paper is None else f"{paper[0]:.2f} ({paper[0] / paper_base['paper_ms']:.2f})",
            "Paper MiB (x)": "" if paper is None else f"{paper[1]:.2f} ({paper[1] / paper_base['paper_mib']:.2f})",
        })
    return pd.DataFrame(rows)


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


PRESET_TITLES = {"roberta-base": "RoBERTa-base (Table 1, text classification)",
                 "llama-3.2-3b": "LLaMA-3.2-3B (Table 2, reasoning)",
                 "llama-3.2-3b-hetero": "LLaMA-3.2-3B, heterogeneous ranks 4..64 (Table 3)"}
"""The paper's table of each preset's downlink and latency columns."""

def tables123_rows(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (preset, method) of the ``tables123`` results (a preset's rows may come
    from several files: the round-robin point and the methods timed on one module per
    shape), in the paper's order, with the paper's numbers (:func:`analysis.loaders.paper`),
    the latency samples (seconds; also as ``timing.samples`` with the pairing's
    ``timing.group``), the analytic FLOPs of one aggregation (``flops_table5``: the paper's
    formulas; ``flops_full``: the routines the code calls), the host's share of a call
    (``host_reads_per_group``, ``ops_per_group``, ``python_ms_16x16``:
    :mod:`benchmarks.experiments.tables123`), a kernel variant's ``kernel`` and ``agreement``
    (None for the other rows; :mod:`analysis.kernel_variants`) and the record's ``loadavg``,
    ``steal``, ``threads`` and ``device``; ``shown``, the name the report shows the row by
    (:func:`shown_name`); the worst module's exactness certificate (``certificate_error``,
    ``certificate_bound``, ``certificate_rounding_level``, ``certificate_module``; None in
    results written without it); ``adaptive``, whether it cuts by the energy rule, and ``tau``, the
    threshold it was given (None: its default, or none). A record's
    ``served`` rows (a dense method timed for one preset, serving another of the same shapes)
    are the other preset's."""
    from analysis.loaders import paper as paper_numbers

    numbers = paper_numbers()["tables123"]
    rows = []
    records = []
    for _, rec in df.iterrows():
        records.append(rec)
        for col in [c for c in rec.index if str(c).startswith("served.")]:  # tables123.SHAPE_ONLY's rows
            if isinstance(rec[col], list):
                copy = rec.copy()
                copy["preset"], copy["rows"] = col.split(".", 1)[1], rec[col]
                records.append(copy)
    for rec in records:
        table = numbers.get(rec["preset"], {})
        for r in rec["rows"]:
            lat = r.get("latency") or {}
            options = r.get("options") or {}
            kernel = options.get("kernel")  # a dense-SVD method on another kernel: a row the paper has not
            paper = table.get(r["method"]) or (None if kernel else table.get(r["method"].split(" (")[0])) \
                or [None, None]
            rows.append({"preset": rec["preset"], "method": r["method"], "name": r["name"],
                         "adaptive": _cuts_by_tau(r), "tau": options.get("tau"),
                         "kernel": kernel, "agreement": r.get("agreement"),
                         "downlink_pct": r.get("downlink_pct"), "samples": list(lat.get("samples", [])),
                         "median_s": lat.get("median"), "q25_s": lat.get("q25"), "q75_s": lat.get("q75"),
                         "modules_measured": r.get("modules_measured"), "modules_total": r.get("modules_total"),
                         "extrapolated": r.get("extrapolated"), "skipped": r.get("skipped"),
                         "paper_pct": paper[0], "paper_ms": paper[1],
                         # what the verdicts need: the pairing and the machine's state when it was measured
                         "timing.samples": list(lat.get("samples", [])), "timing.group": lat.get("group"),
                         "loadavg": rec.get("loadavg"), "steal": rec.get("steal"), "threads": rec.get("threads"),
                         "device": rec.get("device"), "flops_table5": r.get("flops_table5"),
                         "flops_full": r.get("flops_full"), "display_name": r.get("display_name"),
                         "shown": shown_name(r["method"], r["name"], r.get("display_name")),
                         "host_reads_per_group": r.get("host_reads_per_group"),
                         "ops_per_group": r.get("ops_per_group"), "python_ms_16x16": r.get("python_ms_16x16"),
                         **{k: r.get(k) for k in CERTIFICATE_FIELDS},
                         "paper_order": r.get("paper_order", PAPER_ORDER.get(r["name"]))})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    # the paper's order (each row's paper_order, written from its aggregator's class); the
    # methods the paper does not compare after, in the order measured
    order = pd.to_numeric(out["paper_order"], errors="coerce")
    out["_order"] = order.fillna(order.max() + 1 if order.notna().any() else 0)
    presets = tables123_presets(df)
    out["_preset"] = out["preset"].map(presets.index)
    return out.sort_values(["_preset", "_order"], kind="stable").drop(columns=["_order", "_preset"])


CERTIFICATE_FIELDS = ("certificate_error", "certificate_bound", "certificate_rounding_level", "certificate_module")
"""A Tables 1-3 row's worst-module certificate (:meth:`fraq.aggregators.Certificate.summary`)."""


def exactness(r) -> str:
    """A row's worst-module certificate as shown: the relative error, ``<= bound (rounding)``
    when it is below the certificate's resolution, or "-" when the result has none."""
    bound = r.get("certificate_bound")
    if bound is None or pd.isna(bound):
        return "-"
    if bool(r.get("certificate_rounding_level")):
        return f"<= {bound:.0e} (rounding)"
    return f"{r['certificate_error']:.2e}"


def _cuts_by_tau(row: dict) -> bool:
    """Whether a Tables 1-3 row's method cuts its rank by the energy rule: its recorded
    ``energy_rule`` (the class's, :mod:`benchmarks.measure.described`; a method from outside
    the package says so itself), else, for results written without it, whether the row was
    given a ``tau``."""
    recorded = row.get("energy_rule")
    return recorded if isinstance(recorded, bool) else "tau" in (row.get("options") or {})


def shown_name(label: str, name: str, recorded=None) -> str:
    """The name a Tables 1-3 row is shown by: the ``display_name`` its result records (the
    method's class's, :meth:`fraq.aggregators.Aggregator.describe`, with the row's options:
    ``FRAQ (tau=0.80)``, ``LoRA-A² (B round)``, a method from outside the package by its own
    name), else, for results written without it, :func:`analysis.style.display_name` of the
    registry ``name`` followed by the rest of the row's ``label``."""
    if isinstance(recorded, str) and recorded:
        return recorded
    return display_name(name) + (label[len(name):] if label.startswith(name) else f" ({label})")


def _how(r) -> str:
    if isinstance(r["skipped"], str):
        return "not measured: " + r["skipped"].split(";")[0]
    if isinstance(r["extrapolated"], str):
        return "extrapolated " + r["extrapolated"]
    return f"all {int(r['modules_total'])} modules" if pd.notna(r["modules_total"]) else "measured"


def tables123_presets(df: pd.DataFrame) -> list[str]:
    """The presets of the ``tables123`` results, in the paper's table order."""
    have = set(df["preset"]) | {str(c).split(".", 1)[1] for c in df.columns
                                if str(c).startswith("served.") and df[c].map(lambda v: isinstance(v, list)).any()}
    return [p for p in PRESET_TITLES if p in have] + sorted(have - set(PRESET_TITLES))


def tables123_latency(df: pd.DataFrame, preset: str) -> pd.DataFrame:
    """Tables 1-3's downlink and latency columns for ``preset``: ours beside the paper's,
    latency median [IQR] with the number of samples, each method's latency over FRAQ's
    (tau = 0.95) in ours and in the paper's, the worst module's exactness certificate
    (:func:`exactness`), and how the latency was obtained."""
    rows = tables123_rows(df)
    rows = rows[rows["preset"] == preset]
    fraq = rows[rows["method"] == "fraq (tau=0.95)"]
    ours0 = fraq["median_s"].iloc[0] if len(fraq) and pd.notna(fraq["median_s"].iloc[0]) else None
    paper0 = fraq["paper_ms"].iloc[0] if len(fraq) else None
    out = []
    ms = column_format(1e3 * pd.concat([pd.to_numeric(rows[c], errors="coerce")
                                        for c in ("median_s", "q25_s", "q75_s")]))  # the column's one format
    for _, r in rows.iterrows():
        measured = pd.notna(r["median_s"])
        out.append({
            "Method": r["shown"],
            "Downlink %": r["downlink_pct"], "paper %": r["paper_pct"],
            "Latency ms, median [IQR]": (f"{ms(1e3 * r['median_s'])} [{ms(1e3 * r['q25_s'])}, "
                                         f"{ms(1e3 * r['q75_s'])}]" if measured else "-"),
            "samples": len(r["samples"]) if measured else 0,
            "x FRAQ": r["median_s"] / ours0 if measured and ours0 else None,
            "paper ms": r["paper_ms"],
            "paper x FRAQ": r["paper_ms"] / paper0 if pd.notna(r["paper_ms"]) and pd.notna(paper0) else None,
            "Exactness (worst module)": exactness(r),
            "how": _how(r),
        })
    return pd.DataFrame(out)


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
