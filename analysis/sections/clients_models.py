"""Whole models with many clients: time and peak memory of every method."""

from __future__ import annotations

import pandas as pd

from analysis import style, tables
from analysis.sections import Section
from analysis.style import display_name

reads = ("clients_models",)


def draw(res) -> list[Section]:
    cm = res["clients_models"]
    body = ("Every module of the model preset with K clients of rank 8, each method's whole-model aggregation "
            "(stacking included, batched by module shape; `python -m benchmarks.run clients_models`). A method "
            "whose one-module-per-shape estimate is over the run's budget is timed on one module per shape and "
            "extrapolated (labelled); a model run on its first layers only is extrapolated to every layer "
            "(labelled). Peak: tensor memory above the clients' factors of one timed call, beside the estimate "
            f"the job was checked against before it was built. {style.caption(cm)}.\n\n"
            + tables.markdown(models_table(cm)) + "\n\n" + "\n".join(models_lines(cm)))
    return [Section(MODELS_TITLE, body)]


MODELS_TITLE = "Whole models with many clients"


def models_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, K, method) of the ``clients_models`` results: the median latency
    and IQR (s) of the whole-model aggregation, how it was obtained (timed, or extrapolated
    and from what), the tensor peak above the inputs (MiB) with what it covers, and the
    estimate the job was checked against (MiB)."""
    rows = []
    for _, rec in df.iterrows():
        base = {"model": rec["preset"], "K": int(rec["clients"]), "r": int(rec["stacked_rank"])}
        if isinstance(rec.get("skipped"), str):
            rows.append({**base, "method": "(all)", "note": rec["skipped"]})
            continue
        for r in rec["rows"]:
            lat = r.get("latency") or {}
            rows.append({**base, "method": r["method"],
                         "time s (median)": lat.get("median"),
                         "IQR s": (lat["q75"] - lat["q25"]) if lat else None,
                         "peak MiB": r["peak_bytes"] / 2**20 if "peak_bytes" in r else None,
                         "peak of": r.get("peak_scope"),
                         "estimate MiB": (r["estimated_peak_bytes"] / 2**20 if "estimated_peak_bytes" in r
                                          else None),
                         "note": r.get("skipped") or (f"extrapolated {r['extrapolated']}" if r.get("extrapolated")
                                                      else "timed whole")})
    return pd.DataFrame(rows)


def models_lines(df: pd.DataFrame) -> list[str]:
    """Per job: FRAQ's whole-model time against each other method's, and what was not run."""
    out = []
    for _, rec in df.iterrows():
        name = f"{rec['preset']} with {int(rec['clients'])} clients (r = {int(rec['stacked_rank'])})"
        if isinstance(rec.get("skipped"), str):
            out.append(f"- {name}: not run: {rec['skipped']}.")
            continue
        t = {r["name"]: r["latency"]["median"] for r in rec["rows"] if r.get("latency")}
        if "fraq" in t:
            others = ", ".join(f"{display_name(m)} {v / t['fraq']:.2f}x" for m, v in t.items() if m != "fraq")
            out.append(f"- {name}: FRAQ {t['fraq']:.2f} s for the whole model" + (f"; {others} FRAQ's time" if others
                                                                                  else "") + ".")
        out += [f"- {name}: {r['skipped']}." for r in rec["rows"] if r.get("skipped")]
    return out
