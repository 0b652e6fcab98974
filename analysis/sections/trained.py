"""Tables 1-3's downlink and exactness on trained adapters: one federated round of BANKING77's uploads.

Draws the ``trained`` results (:mod:`benchmarks.experiments.trained`): every Tables 1-3 row
aggregating the uploads its own method's clients sent in round 1 of the federated harness,
beside the synthetic spectra of the Tables 1-3 section; a row the saved round cannot serve
says why. Nothing here measures.
"""

from __future__ import annotations

import pandas as pd

from analysis import tables
from analysis.sections import Section

reads = ("trained",)

CITATION = ("BANKING77: Casanueva, Temčinas, Gerz, Henderson, Vulić. *Efficient Intent Detection with Dual Sentence "
            "Encoders.* NLP4ConvAI 2020, arXiv:2003.04807; CC BY 4.0")
"""The data set's publishers, cited wherever its results appear."""


def table(rec: pd.Series) -> pd.DataFrame:
    """One line per row: downlink (parameters per client, % of FLoRA's), the largest global
    rank, the worst module's exactness and which module, the uploads aggregated."""
    out = []
    for r in rec["rows"]:
        shown = r.get("display_name") or r["method"]
        if r.get("skipped"):
            out.append({"Method": shown, "Downlink params / client": "-", "Downlink %": "-", "Rank (max)": "-",
                        "Exactness (worst module)": "-", "uploads": f"not measured: {r['skipped']}"})
            continue
        ranks = [max(v) if isinstance(v, list) else v for v in r["ranks"].values()]
        out.append({"Method": shown, "Downlink params / client": f"{r['downlink_params']:,.0f}",
                    "Downlink %": f"{r['downlink_pct']:.2f}", "Rank (max)": str(max(ranks)),
                    "Exactness (worst module)": f"{r['exactness_max']:.2e} ({r['exactness_module']})",
                    "uploads": r["uploads"]})
    return pd.DataFrame(out)


def draw(res) -> list[Section]:
    df = res["trained"]
    rec = df.iloc[0]
    meta = rec.get("meta") if isinstance(rec.get("meta"), dict) else {}
    intro = (f"The Tables 1-3 rows on trained adapters rather than synthetic spectra: round {meta.get('round', 1)} "
             f"of the federated harness ({meta.get('model', 'all-MiniLM-L6-v2')}, {int(rec['clients'])} clients of "
             f"ranks {sorted(set(rec['client_ranks']))}, modules {', '.join(rec['modules'])}) on {CITATION}; "
             "the uploads are committed (benchmarks/data/banking77-round1/, its README says how they were produced) "
             "and each row aggregates those its own method's clients sent. *Exactness*: the worst module's "
             "||S - G||_F / ||S||_F, S the exact weighted aggregate formed in float64 from the uploads alone, G what "
             "a client's weights change by (the largest over clients); *Downlink %*: of FLoRA's stack. Counts and "
             "float64 errors, untimed.")
    return [Section("Tables 1-3 on trained adapters: BANKING77, one round", intro + "\n\n" + tables.markdown(table(rec)))]
