"""FRAQ against peft's own merge: the table, the figure and the time ratios, from result files.

Reads the ``peft`` experiment's results (:mod:`benchmarks.experiments.peft_compare`, one
file per model with one row per method) as :func:`analysis.loaders.load_results` returns
them. The ratio peft-svd / FRAQ is computed per model and setting from the round-robin
samples, paired by round, as the report's other paired timings are
(:mod:`analysis.verdicts`): the median over rounds of the per-round ratio, with the
sign-test 95% interval of that median from :data:`analysis.verdicts.MIN_ROUNDS` rounds on;
below that no interval reaches 95%, and none is printed. Nothing here measures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["flop_lines", "rows", "table", "ratios", "ratio_lines", "figure"]

MODEL_NAMES = {"minilm": "all-MiniLM-L6-v2", "roberta-base": "RoBERTa-base (random)",
               "llama-3.2-3b": "LLaMA-3.2-3B (random)", "tiny-bert": "tiny BERT (random)"}
COLORS = {"peft-cat": "#999999", "peft-svd": "#E66101", "peft-svd-thin": "#FDB863", "fraq": "#6A3D9A"}
PAIRS = (("rank", "peft-svd-thin", "fraq"), ("rank", "peft-svd", "fraq"), ("tau", "peft-svd-thin", "fraq"),
         ("tau", "peft-svd", "fraq"))
"""(setting kind, baseline, method): peft's svd at its best (the reduced SVD) and as published
(its defaults) against FRAQ at rank p, and at FRAQ's tau-selected ranks (peft through
``rank_pattern``): the at-its-best comparison first."""
BASELINES = {"peft-svd": "peft's svd", "peft-svd-thin": "peft's svd at its best (svd_full_matrices=False)"}
FLOOR = 1e-12
"""Errors below this (float32 rounding of an exact merge) are drawn at it on the log axis."""


SERIES = {("peft-cat", "exact"): "peft cat (exact)", ("peft-svd", "rank"): "peft svd (rank p)",
          ("peft-svd-thin", "rank"): "peft svd, thin (rank p)", ("fraq", "rank"): "FRAQ (rank p)",
          ("peft-svd", "tau"): "peft svd (FRAQ's ranks, rank_pattern)",
          ("peft-svd-thin", "tau"): "peft svd, thin (FRAQ's ranks, rank_pattern)", ("fraq", "tau"): "FRAQ (tau)"}
"""Legend entry per (method, kind), in drawing order."""


def _model(r) -> str:
    # every layer: ``layers`` is null, and a column null in every file is not loaded at all
    n = r.get("layers")
    layers = "" if pd.isna(n) else f", {int(n)} layer{'' if int(n) == 1 else 's'}"
    return f"{MODEL_NAMES.get(r['model'], r['model'])}{layers}, p={int(r['p'])}"


def rows(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (point, method): the point's config and machine columns plus the method's
    ``method``, ``setting``, ``label``, ``samples_s``, ``median_s``, ``peak_bytes``, ranks,
    ``params``, ``excess_max``, ...; ``model_label`` names the point (model, layers, p);
    ``kind`` is ``exact``, ``rank`` or ``tau`` (peft's rank_pattern row is paired with
    FRAQ's tau row); ``series`` is the legend entry (:data:`SERIES`)."""
    out = []
    order = {m: i for i, m in enumerate(MODEL_NAMES)}
    df = df.assign(_o=df["model"].map(order).fillna(len(order))).sort_values(["_o", "p"]).drop(columns="_o")
    for _, point in df.iterrows():
        for r in point["rows"]:
            row = {k: v for k, v in point.items() if k != "rows"}
            row.update(r)
            row["model_label"] = _model(point)
            s = r["setting"]
            row["kind"] = "exact" if s == "exact" else ("rank" if s.startswith("rank=") else "tau")
            row["series"] = SERIES.get((r["method"], row["kind"]), r["label"])
            out.append(row)
    return pd.DataFrame(out)


def _ratio(base: list[float], ours: list[float]) -> tuple[float, float, float, int]:
    """(median of the per-round ratios, its sign-test interval or NaN below
    :data:`~analysis.verdicts.MIN_ROUNDS` rounds, rounds): round k of both lists is one round
    of the round-robin (a method left out of later rounds has fewer samples)."""
    from analysis.verdicts import MIN_ROUNDS, sign_interval

    n = min(len(base), len(ours))
    per_round = np.asarray(base[:n], dtype=float) / np.asarray(ours[:n], dtype=float)
    ratio = float(np.median(per_round))
    if n < MIN_ROUNDS:
        return ratio, float("nan"), float("nan"), n
    lo, hi, _ = sign_interval(per_round)
    return ratio, lo, hi, n


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per model, setting and peft baseline (:data:`PAIRS`: at its best first, then as
    published): the median over paired rounds of the baseline's time over FRAQ's,
    its 95% sign-test interval (NaN below :data:`analysis.verdicts.MIN_ROUNDS` rounds), the
    rounds paired, and both sides' worst excess over the float64 optimum."""
    d = rows(df)
    out = []
    for (model, kind), g in d.groupby(["model_label", "kind"], sort=False):
        if kind == "exact":
            continue
        for pair_kind, baseline, method in PAIRS:
            if pair_kind != kind or (g["method"] == baseline).sum() == 0:
                continue  # results written before the thin row have none
            base = g[g["method"] == baseline].iloc[0]
            ours = g[g["method"] == method].iloc[0]
            out.append(_pair_row(model, kind, baseline, base, ours))
    return pd.DataFrame(out)


def _pair_row(model: str, kind: str, baseline: str, base, ours) -> dict:
    ratio, lo, hi, n = _ratio(base["samples_s"], ours["samples_s"])
    return dict(model=model, kind=kind, baseline=baseline, setting=ours["setting"], p=int(ours["p"]), ratio=ratio,
                lo=lo, hi=hi, n=n, peft_ms=base["median_s"] * 1e3, fraq_ms=ours["median_s"] * 1e3,
                peft_excess=base["excess_max"], fraq_excess=ours["excess_max"],
                rank_mean=ours["rank_mean"], modules=int(ours["modules"]), clients=int(ours["clients"]))


def ratio_lines(df: pd.DataFrame) -> list[str]:
    """One sentence per model and setting, for the report: below
    :data:`analysis.verdicts.MIN_ROUNDS` paired rounds the median alone, said to be
    descriptive (:data:`analysis.verdicts.DESCRIPTIVE`)."""
    from analysis.verdicts import DESCRIPTIVE

    lines = []
    for _, r in ratios(df).iterrows():
        what = ("at the same rank" if r["kind"] == "rank" else
                f"at FRAQ's {r['setting']} ranks (mean {r['rank_mean']:.1f}; peft through `rank_pattern`)")
        rounds = f"{r['n']} paired round{'' if r['n'] == 1 else 's'}"
        spread = (f"95% interval {r['lo']:.1f}-{r['hi']:.1f}x over {rounds}" if np.isfinite(r["lo"])
                  else f"median of {rounds}; {DESCRIPTIVE}")
        lines.append(f"- {r['model']} ({r['modules']} modules, {r['clients']} clients), {what}: "
                     f"{BASELINES.get(r['baseline'], r['baseline'])} takes "
                     f"**{r['ratio']:.1f}x** FRAQ's time ({spread}; {r['peft_ms']:.0f} ms vs {r['fraq_ms']:.0f} ms); "
                     f"worst excess over the float64 optimum {r['peft_excess']:.1e} (peft) and "
                     f"{r['fraq_excess']:.1e} (FRAQ).")
    return lines


def flop_lines(df: pd.DataFrame) -> list[str]:
    """Per model, peft's svd merge at the one rank p (at its best and as published) against
    FRAQ's: the measured time / FRAQ's (the median of the paired rounds), the ratio of the
    routine-true FLOP models (``flops_full`` of each row: :func:`fraq.flops.peft_svd_flops`,
    FRAQ's :func:`fraq.aggregators.analytic_flops`) and measured / predicted, within or
    outside :data:`analysis.flop_check.TARGET` for the at-its-best row; results recorded
    without the FLOP counts say so once."""
    from analysis.flop_check import TARGET, side

    d = rows(df)
    if "flops_full" not in d:
        return ["- FLOP-model check: no FLOP count in these results (recorded before peft_compare counted them)."]
    lines = []
    for model, g in d[d["kind"] == "rank"].groupby("model_label", sort=False):
        ours = g[g["method"] == "fraq"]
        if ours.empty or pd.isna(ours.iloc[0]["flops_full"]):
            continue
        f = ours.iloc[0]
        for baseline in ("peft-svd-thin", "peft-svd"):
            b = g[g["method"] == baseline]
            if b.empty or pd.isna(b.iloc[0]["flops_full"]):
                continue
            measured = _ratio(b.iloc[0]["samples_s"], f["samples_s"])[0]
            predicted = float(b.iloc[0]["flops_full"]) / float(f["flops_full"])
            q = measured / predicted
            target = (f": {side(q, TARGET)} (the project's target for a peer at its best)"
                      if baseline == "peft-svd-thin" else "")
            lines.append(f"- FLOP-model check (not a claim, no verdict), {model}, {BASELINES[baseline]} / FRAQ at "
                         f"rank p: measured {measured:.3g}x; the routine-true FLOP models predict {predicted:.3g}x; "
                         f"measured / predicted {q:.2f}{target}.")
    return lines


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Per model and method: ranks, parameters, time, peak memory and errors."""
    out = []
    for _, r in rows(df).iterrows():
        ranks = (f"{r['rank_min']}" if r["rank_min"] == r["rank_max"]
                 else f"{r['rank_min']}-{r['rank_max']} (mean {r['rank_mean']:.1f})")
        out.append({
            "Model": r["model_label"], "Method": r["method"], "Setting": r["setting"], "Output rank": ranks,
            "Params (M)": f"{r['params'] / 1e6:.3f}",
            "Time ms, median [min, max]": f"{r['median_s'] * 1e3:.1f} [{r['min_s'] * 1e3:.1f}, "
                                          f"{r['max_s'] * 1e3:.1f}] (n={r['n']}"
                                          + (": the first call" if r.get("first_call_sample") is True else "") + ")",
            "Peak MiB": f"{r['peak_bytes'] / 2**20:.1f}",
            "Rel. error (mean)": f"{r['relative_error_mean']:.3f}",
            "Excess over optimum (max)": f"{r['excess_max']:.1e}",
        })
    return pd.DataFrame(out)


def figure(df: pd.DataFrame):
    """Left: median time per method (bars: min-max), per model, log scale. Right: the mean
    relative error against the exact aggregate per method, the float64 optimum at the
    same ranks as a black tick (an exact merge's error is its float32 rounding)."""
    import matplotlib.pyplot as plt

    from analysis.style import log_labels

    d = rows(df)
    models = list(dict.fromkeys(d["model_label"]))
    labels = [v for v in SERIES.values() if v in set(d["series"])]
    labels += [v for v in dict.fromkeys(d["series"]) if v not in labels]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    width = 0.8 / len(labels)
    for j, label in enumerate(labels):
        sub = d[d["series"] == label].set_index("model_label").reindex(models)
        x = np.arange(len(models)) + (j - (len(labels) - 1) / 2) * width
        color = COLORS.get(sub["method"].dropna().iloc[0], "#333333")
        hatch = "//" if sub["kind"].dropna().iloc[0] == "tau" else None
        t = sub["median_s"].to_numpy(float) * 1e3
        err = np.vstack([t - sub["min_s"].to_numpy(float) * 1e3, sub["max_s"].to_numpy(float) * 1e3 - t])
        axes[0].bar(x, t, width, yerr=err, color=color, hatch=hatch, edgecolor="white", label=label, capsize=2)
        rel = np.array([np.mean(v) if isinstance(v, list) else np.nan for v in sub["relative_error"]])
        opt = np.array([np.mean(np.subtract(r, e)) if isinstance(r, list) else np.nan
                        for r, e in zip(sub["relative_error"], sub["excess"])])
        axes[1].bar(x, np.maximum(rel, FLOOR), width, color=color, hatch=hatch, edgecolor="white")
        shown = opt > FLOOR
        axes[1].scatter(x[shown], opt[shown], marker="_", s=120, color="black", zorder=3,
                        label="float64 optimum" if j == 1 else None)
    for ax, ylabel in zip(axes, ["merge time (ms)", "rel. error vs exact\n(mean over modules)"]):
        ax.set_xticks(np.arange(len(models)), [_tick(m) for m in models], fontsize=9)
        ax.set_yscale("log")
        log_labels(ax.yaxis)
        ax.set_ylabel(ylabel)
    # one legend above the figure (as analysis.figures' legends), the optimum's tick in it: a
    # legend inside a panel sits on a bar whichever corner it takes
    handles, names = axes[0].get_legend_handles_labels()
    extra, extra_names = axes[1].get_legend_handles_labels()
    fig.legend(handles + extra, names + extra_names, loc="lower center", ncol=min(len(names) + len(extra), 3),
               frameon=False, bbox_to_anchor=(0.5, 1.0))
    return fig


def _tick(model_label: str) -> str:
    """A model's tick label, one part a line (name, "(random)", layers and p): four models
    side by side on a panel half a page wide do not fit their names on one line."""
    return model_label.replace(" (", "\n(", 1).replace(", ", "\n")
