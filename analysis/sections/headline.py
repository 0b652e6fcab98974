"""The report's headline: what this run found, per claim of the paper, in at most 15 lines.

It opens ``report.md`` (:func:`analysis.reproduce.build`), above the statistics. Per claim:
**confirmed**, **refuted** or **not tested here**, on this run's device, and the numbers
behind it, each peer at its best first (its fastest kernel on the same batched primitives,
device routes and output rank as FRAQ: ``florist:kernel=qr``, ``flexlora:kernel=rsvd``, the
textbook QR-QR-SVD) and as its authors publish it beside. Ratios are written as "time /
FRAQ's" with faster or slower in words, never a bare "x FRAQ".

What decides each word is the section's own verdict, never a stand-in: a GPU wall-clock
claim (the paper's GH200 ratios) is **not tested here** on a CPU, its CPU ratio shown for
what it is; on a GPU the median ratio is set against the paper's range (within / above /
below); Fig. 3's word is its section's paired verdict (agrees: confirmed, disagrees:
refuted, anything else: not decided here). The sections below carry the intervals; the headline carries the medians.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.loaders import paper

__all__ = ["MAX_LINES", "lines"]

MAX_LINES = 15
"""The headline's length, in lines: a reader sees every finding before the statistics."""


def lines(res) -> list[str]:
    """The headline's markdown lines (at most :data:`MAX_LINES`), from the loaded results
    ``res`` (:func:`analysis.resultset.load`); [] when no experiment it reads has results."""
    out = []
    if "tables123" in res.experiments and not res["tables123"].empty:
        out += _tables_lines(res["tables123"])
    if "fig3" in res.experiments and not res["fig3"].empty:
        out += _fig3_lines(res["fig3"])
    if not out:
        return []
    return ["## Headline", ""] + out[: MAX_LINES - 3] + [""]


def _ratio(t: float) -> str:
    """``t`` (a peer's time over FRAQ's) as words: "2.3x FRAQ's time (slower)"."""
    if not np.isfinite(t):
        return "not measured"
    word = "slower" if t > 1 else "faster" if t < 1 else "the same"
    return f"{t:.2g}x FRAQ's time ({word})"


def _median_ms(rows: pd.DataFrame, name: str, kernel: str | None) -> tuple[float, bool]:
    """The median latency (ms) of ``name``'s row on ``kernel`` (None: its published kernel)
    and whether it was extrapolated from some modules; NaN where not measured. Of several
    such rows, the one at FRAQ's reference threshold (tau = 0.95: FRAQ's own output) first."""
    sel = rows[(rows["name"] == name) & (rows["kernel"].isna() if kernel is None else rows["kernel"] == kernel)]
    sel = sel[sel["samples"].map(len) > 0]
    at_fraqs = sel[pd.to_numeric(sel["tau"], errors="coerce") == 0.95]
    sel = at_fraqs if not at_fraqs.empty else sel
    if sel.empty:
        return float("nan"), False
    r = sel.iloc[0]
    return float(np.median(r["samples"])) * 1e3, isinstance(r["extrapolated"], str)


def _tables_lines(df: pd.DataFrame) -> list[str]:
    from analysis.sections.tables123 import REFERENCE, _on_gpu, tables123_presets, tables123_rows

    rows = tables123_rows(df)
    claims = {k: v for k, v in paper()["speedups"].items() if not k.startswith("_")}
    out = []
    for i, preset in enumerate(tables123_presets(df)):
        pr = rows[rows["preset"] == preset]
        ref = pr[pr["spec"] == REFERENCE]
        if ref.empty or not len(ref.iloc[0]["samples"]):
            continue
        fraq_ms = float(np.median(ref.iloc[0]["samples"])) * 1e3
        if i == 0:
            out += _faster_lines(pr, preset, fraq_ms)
        gpu = _on_gpu(pr)
        claim = claims.get(preset, {})
        for name, best_kernel in (("florist", "qr"), ("flexlora", "rsvd")):
            best, best_x = _median_ms(pr, name, best_kernel)
            pub, pub_x = _median_ms(pr, name, None)
            if not (np.isfinite(best) or np.isfinite(pub)):
                continue
            low = claim.get("over_fraq_min", {}).get(name)
            high = claim.get("over_fraq_max", {}).get(name)
            said = claim.get("quoted", {}).get(name, f"{low:g}x" if low else None)
            if said is None:
                verdict = "the paper states no ratio"
            elif not gpu:
                verdict = f"paper {said} on a GH200: **not tested here** (a GPU wall-clock claim; this run is on a CPU)"
            else:
                t = pub / fraq_ms
                inside = t >= low and (high is None or t <= high)
                where = "within" if inside else "below" if t < low else "above"
                verdict = (f"paper {said} on a GH200: **{'confirmed' if inside else 'refuted'}** as published "
                           f"({where} the paper's range)")
            shown = {"florist": "FLoRIST", "flexlora": "FlexLoRA"}[name]
            same = name == "florist" and (pr[(pr["name"] == name) & (pr["kernel"] == best_kernel)]["tau"] == 0.95).any()
            output = ", tau=0.95: FRAQ's output" if same else ""
            out.append(f"- {preset}, FRAQ (tau=0.95) {_ms(fraq_ms)} against {shown}: at its best "
                       f"(kernel={best_kernel}{output}) {_ratio(best / fraq_ms)}{' (extrapolated)' if best_x else ''}, "
                       f"as published {_ratio(pub / fraq_ms)}{' (extrapolated)' if pub_x else ''}; {verdict}.")
    return out


def _ms(ms: float) -> str:
    """A latency in ms, three significant digits, no exponent: "50.8 ms", "5,050 ms"."""
    digits = max(0, 2 - int(np.floor(np.log10(ms)))) if ms > 0 else 0
    return f"{round(ms, digits):,.{digits}f} ms"


def _faster_lines(rows: pd.DataFrame, preset: str, fraq_ms: float) -> list[str]:
    """The published rows faster than FRAQ on ``preset``, with their downlink: what they
    skip (recompression to a small adapter) shows in that column."""
    fast = []
    for r in rows.itertuples():
        if r.spec == "fraq:tau=0.95" or r.name == "fraq" or not len(r.samples) or isinstance(r.kernel, str):
            continue
        t = float(np.median(r.samples)) * 1e3 / fraq_ms
        if t < 1:
            fast.append(f"{r.shown} {t:.2g}x (downlink {r.downlink_pct:.3g}%)")
    if not fast:
        return []
    return [f"- {preset}: faster than FRAQ (tau=0.95, {_ms(fraq_ms)}) as published: " + ", ".join(fast)
            + "; FRAQ's own downlink is in Tables 1-3."]


def _fig3_lines(df: pd.DataFrame) -> list[str]:
    """Fig. 3: the section's paired verdict on "FRAQ is the fastest method" (its own test:
    the fastest other method's time over FRAQ's above 1 at every point), then at how many
    points FRAQ's median is the fastest and which peers beat it where."""
    from analysis.sections.fig3 import INEXACT, _fastest_lines, fig3_summary, inexact

    d = fig3_summary(df)
    if "method_name" not in d or "ms" not in d:
        return []
    approx = inexact(d)
    total, fastest, beaten = 0, 0, {}
    for _, g in d[~d["method_name"].isin(approx)].groupby(["sweep", "x", "mode"]):
        f = g[g["method_name"] == "FRAQ"]
        others = g[g["method_name"] != "FRAQ"]
        if f.empty or others.empty:
            continue
        total += 1
        ms = float(f["ms"].iloc[0])
        faster = others[others["ms"] < ms]
        fastest += faster.empty
        for m in faster["method_name"]:
            beaten[m] = beaten.get(m, 0) + 1
    if not total:
        return []
    top = sorted(beaten.items(), key=lambda kv: -kv[1])[:4]
    who = "; ".join(f"{m} at {k}" for m, k in top)
    device = "a GPU" if any(str(v).startswith("cuda") for v in df.get("device", [])) else "the CPU"
    apart = " and ".join(sorted(approx))
    verb = "return" if len(approx) > 1 else "returns"
    return [f"- Fig. 3 (paper: FRAQ the fastest method across the r and d sweeps): {_word(_fastest_lines(d))} on "
            f"{device} by the section's paired test over every exact method, each peer at its best included; "
            f"FRAQ's median is the fastest at {fastest} of {total} points"
            + (f"; faster than FRAQ: {who} (points)" if who else "")
            + (f"; {apart} {verb} another output (up to {max(approx.values(), default=0):.2g} above the optimum, past "
               f"{INEXACT:.0e}), counted apart in the section" if apart else "") + "."]


WORDS = {"agrees": "**confirmed**", "disagrees": "**refuted**"}
"""A section's verdict word as the headline says it; any other (inconclusive, descriptive, no
verdict) is **not decided here**."""


def _word(section_lines: list[str]) -> str:
    """The headline's word for a claim from its section's first verdict line ("Ours **word**")."""
    import re

    m = re.search(r"Ours \*\*([a-z ]+)\*\*", section_lines[0]) if section_lines else None
    return WORDS.get(m.group(1), "**not decided here**") if m else "**not decided here**"
