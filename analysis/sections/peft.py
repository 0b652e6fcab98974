"""FRAQ against peft's own merge (``add_weighted_adapter``) on real PeftModels."""

from __future__ import annotations

from analysis import peft_merge, tables
from analysis.sections import Figure, Section

reads = ("peft",)


def draw(res) -> list[Section]:
    pf = res["peft"]
    fig = Figure("fig_peft", peft_merge.figure(pf), pf,
                 "round-robin medians, bars = min-max; hatched: per-module ranks (FRAQ's tau rule; peft's svd "
                 f"through rank_pattern); peft {pf['peft_version'].iloc[0]}, transformers "
                 f"{pf['transformers_version'].iloc[0]}",
                 "The same client adapters on a real PeftModel merged by peft's `add_weighted_adapter` (svd, cat) "
                 "and by FRAQ, each adding one adapter to the model; error above the float64 optimum "
                 "(`fraq.reference`). When to use which: docs/peft.md.")
    return [Section("FRAQ against peft's own merge", "\n".join(peft_merge.ratio_lines(pf) + peft_merge.flop_lines(pf)),
                    fig),
            Section("FRAQ against peft's own merge: every method", tables.markdown(peft_merge.table(pf)), level=3)]
