"""Tables 1-3: every aggregator's downlink and server latency on the model presets, and
their verdicts: the paper's speed-ups (``analysis/paper.json``'s ``speedups``) judged by
what the device can test (:data:`MODEL_BAND` on a CPU), the fixed-rank methods' downlink,
and each dense-SVD method's kernel variant against its dense path
(:func:`analysis.kernel_variants.table_lines`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import kernel_variants, style, tables
from analysis.verdicts import holds, judge, not_measured, ours, paired, samples
from analysis.loaders import paper
from analysis.sections import Section
from analysis.style import NAMES

reads = ("tables123",)


def draw(res) -> list[Section]:
    agg = res["tables123"]
    intro = ("Every aggregator on the model presets, one federated round's server aggregation batched by module "
             "shape, the methods of a preset timed in the same paired rounds over fresh process launches "
             "(`python -m benchmarks.run tables123`; docs/benchmarks.md, Statistics); synthetic LoRA-like "
             "client factors, so the energy-threshold methods' ranks and downlink follow synthetic spectra. "
             "*x FRAQ*: latency over FRAQ's (tau = 0.95), ours and the paper's; *samples*: timed aggregations "
             "per row (fewer where one takes minutes); *how*: rows timed on some modules (a dense method on one "
             "module of every shape, or a preset built on some of its layers) are extrapolated to the whole "
             "model, and say from how many. A `(kernel=fraq)` row is the method of the row above it with its "
             "SVD on FRAQ's kernel (`fraq.svd`: the same triplets from the factors, no m x n matrix), timed in "
             "the same rounds; the paper has no such row. *Exactness*: the worst module's ||update - exact||_F / "
             "||exact||_F against the exact weighted aggregate (the result's certificate, float64 Grams, computed "
             "outside the timed calls; \"<= b (rounding)\" where it is below the certificate's rounding "
             "resolution b). The paper's numbers are one GH200's. " + thresholds(agg)
             + f"{style.caption(agg)}.")
    out = [Section("Tables 1-3: downlink and server latency", intro)]
    for preset in tables.tables123_presets(agg):
        rows = tables.tables123_rows(agg)
        body = tables.markdown(tables.tables123_latency(agg, preset)) + "\n\n" + "\n".join(
            verdict_lines(agg, preset) + kernel_variants.table_lines(rows[rows["preset"] == preset]))
        out.append(Section(tables.PRESET_TITLES.get(preset, preset), body, level=3))
    return out


def thresholds(df: pd.DataFrame) -> str:
    """The energy thresholds FRAQ and FLoRIST ran at, and why they differ: FRAQ at the
    paper's (tau = 0.80 and 0.95: Section 5, the hyperparameter table), FLoRIST at the FLoRIST
    paper's (0.90; 0.85 with mixed ranks: ``benchmarks.experiments.tables123.PAPER_SETTINGS``),
    because the FRAQ paper gives FLoRIST no threshold. The thresholds are read from the rows;
    "" when they do not hold both methods."""
    rows = tables.tables123_rows(df)
    taus = {name: sorted({round(float(t), 4) for t in rows.loc[rows["name"] == name, "tau"].dropna()})
            for name in ("fraq", "florist")}
    if not all(taus.values()):
        return ""
    shown = {name: ", ".join(f"{t:.2f}" for t in ts) for name, ts in taus.items()}
    fraq = ("the paper's energy thresholds, " if taus["fraq"] == PAPER_TAUS["fraq"] else "") + f"tau = {shown['fraq']}"
    florist = (f"the FLoRIST paper's, tau = {shown['florist']} (0.85 where the client ranks differ)"
               if set(taus["florist"]) <= set(PAPER_TAUS["florist"]) else f"tau = {shown['florist']}")
    if set(taus["florist"]) & set(taus["fraq"]):
        return f"FRAQ runs at {fraq}, and FLoRIST at {florist}; *x FRAQ* is against FRAQ at tau = 0.95. "
    return (f"FRAQ runs at {fraq}, and FLoRIST at {florist}: the FRAQ paper's tables give FLoRIST no threshold, so "
            "FLoRIST is at none of FRAQ's and their downlink columns are not like for like; *x FRAQ* is against "
            "FRAQ at tau = 0.95. ")


PAPER_TAUS = {"fraq": [0.8, 0.95], "florist": [0.85, 0.9]}
"""The thresholds of the paper's FRAQ rows and of the FLoRIST paper (0.85 for mixed ranks)."""


def _speedups() -> dict:
    """Per preset, the paper's latency claim and the ratios a GPU run tests
    (``analysis/paper.json``'s ``speedups``, whose ``_about`` gives the rule)."""
    return {k: v for k, v in paper()["speedups"].items() if not k.startswith("_")}


MODEL_BAND = (paper()["cpu_model_band"]["low"], paper()["cpu_model_band"]["high"])
"""On a CPU, the band the measured speed-up over a FLOP model's must fall in
(``analysis/paper.json``'s ``cpu_model_band``, whose ``_about`` gives the reason)."""


def verdict_lines(df: pd.DataFrame, preset: str) -> list[str]:
    """The paper's latency claims for ``preset`` and its downlink counts, against ours."""
    rows = tables.tables123_rows(df)
    rows = rows[rows["preset"] == preset]
    lines = []
    fraq = rows[rows["name"] == "fraq"]
    claimed = _speedups().get(preset)
    claim, tests = (None, ()) if claimed is None else (claimed["claim"], tuple(claimed["over_fraq_min"].items()))
    quoted = {} if claimed is None else claimed["quoted"]  # the paper's words for each ratio: "around 12x"
    if claim is not None:
        parts = []
        for name, thr in tests:
            other = rows[(rows["name"] == name) & rows["kernel"].isna()]  # the paper's row, not a kernel variant
            label = NAMES.get(name, name)
            groups = {f"{label} ({r.method})": samples(r.samples) for r in other.itertuples()}
            groups.update({f"FRAQ ({r.method})": samples(r.samples) for r in fraq.itertuples()})
            missing = [f"{k} ({_why(rows, k)})" for k, v in groups.items() if v.size == 0]
            if other.empty or fraq.empty or missing:
                v = not_measured(f"{preset}: FRAQ faster than {label}", missing or [f"{label} (no result)"])
                parts.append(ours(v, ""))
                continue
            o = [k for k in groups if not k.startswith("FRAQ")]
            f = [k for k in groups if k.startswith("FRAQ")]
            compared = pd.concat([other, fraq])
            ratio = (lambda g: np.min(np.stack([g[k] for k in o]), axis=0)  # noqa: E731
                     / np.max(np.stack([g[k] for k in f]), axis=0))
            ms = {k: v * 1e3 for k, v in groups.items()}
            if _on_gpu(compared):
                v = judge(ms, ratio, above=thr, claim=f"{preset}: FRAQ faster than {label}", machine=compared,
                          paired=paired(compared))
                parts.append(ours(v, f"{v.value:.3g}x", ".3g", "x",
                                   test=f"{label} / FRAQ time above {thr:g}x; the paper: {quoted[name]}"))
                continue
            parts.append(_model_verdicts(ms, ratio, other, fraq, label, quoted[name], preset, compared))
        ms = ", ".join(f"{r.shown} {r.median_s * 1e3:.4g} ms" for r in fraq.itertuples() if pd.notna(r.median_s))
        lines.append(f"- Paper: {claim}. " + "; ".join(parts) + (f". Here: {ms}." if ms else "."))
    fixed = rows[~rows["adaptive"] & rows["paper_pct"].notna() & rows["downlink_pct"].notna()]
    if not fixed.empty:
        diff = fixed[(fixed["downlink_pct"] - fixed["paper_pct"]).abs() > 0.05 + 0.005 * fixed["paper_pct"]]
        others = "; ".join(f"{r.shown} {r.downlink_pct:.3g}% against {r.paper_pct:.3g}%" for r in diff.itertuples())
        lines.append("- Paper: the downlink of the methods whose rank is fixed (no energy threshold) is set by the "
                     "shapes and ranks alone. " + ours(holds(diff.empty), f"ours equals the paper's to its rounding "
                                                        f"for {len(fixed) - len(diff)} of {len(fixed)} methods",
                                                        test="equal to the paper's percentage")
                     + (f" (differs: {others})." if others else "."))
    adaptive = rows[rows["adaptive"] & rows["downlink_pct"].notna()]
    if not adaptive.empty:  # the methods that cut by tau alone: the others' rank is fixed
        lines.append("  - Energy-threshold methods (their rank, and so their downlink, follows the spectra, "
                     "synthetic here): " + "; ".join(f"{r.shown} {r.downlink_pct:.3g}%" + (
                         f" (paper {r.paper_pct:.3g}%)" if pd.notna(r.paper_pct) else "")
                         for r in adaptive.itertuples()) + ".")
    return lines


def _on_gpu(rows: pd.DataFrame) -> bool:
    return "device" in rows and rows["device"].astype(str).str.startswith("cuda").all()


def _model_verdicts(ms: dict, ratio, other: pd.DataFrame, fraq: pd.DataFrame, label: str, quoted: str,
                    preset: str, compared: pd.DataFrame) -> str:
    """A CPU's verdicts on a speed-up: the paper's GPU ratio shown in its own words
    (``quoted``: "around 12x"), not judged; the measured ratio against each FLOP model's
    (:data:`MODEL_BAND`)."""
    lo, hi = MODEL_BAND
    out = [f"{label}: the paper's {quoted} is a GH200 wall-clock ratio, a GPU claim: not judged on a CPU"]
    for col, name in (("flops_table5", "the paper's FLOP model (Table 5)"), ("flops_full", "our routine-true model")):
        o = pd.to_numeric(other[col], errors="coerce") if col in other else pd.Series(dtype=float)
        f = pd.to_numeric(fraq[col], errors="coerce") if col in fraq else pd.Series(dtype=float)
        if o.dropna().empty or f.dropna().empty:
            out.append(f"{name}: no FLOP count in these results")
            continue
        model = float(o.min() / f.max())
        v = judge(ms, lambda g: ratio(g) / model, above=lo, below=hi, machine=compared, paired=paired(compared),
                  claim=f"{preset}: {label} / FRAQ as {name} predicts")
        out.append(ours(v, f"{v.value * model:.3g}x against the {model:.3g}x {name} predicts "
                            f"(measured / model {v.value:.2f})", ".2f",
                         test=f"measured / model within [{lo:g}, {hi:g}]"))
    return "; ".join(out)


def _why(rows: pd.DataFrame, key: str) -> str:
    label = key.split(" (", 1)[1].rstrip(")")
    r = rows[rows["method"] == label]
    if not r.empty and isinstance(r["skipped"].iloc[0], str):
        return r["skipped"].iloc[0].split(";")[0]
    return "no samples"
