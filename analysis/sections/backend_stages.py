"""Where one recompression's time goes: FRAQ's pipeline stage by stage, per basis backend (no paper claim)."""

from __future__ import annotations

import pandas as pd

from analysis import style, tables
from analysis.sections import Section

reads = ("backend_stages",)

STAGES = ("basis", "H = C Y", "G = H H^T", "G factored", "Gram (as run)", "eigh (float64)", "apply Q to U_p",
          "R_p = U_p^T H", "R_p factored", "R_p (as run)")
"""The stages each result times alone (:mod:`benchmarks.experiments.backend_stages`), in the
pipeline's order; the whole recompression and what it holds beyond the stages it runs
follow them."""

AS_RUN = ("basis", "Gram (as run)", "eigh (float64)", "apply Q to U_p", "R_p (as run)")
"""The stages the whole call runs (the experiment's ``STAGE_PARTS``): *other* is the whole
less these. Results that lack the as-run stages (recorded before they were timed) are
drawn without the *other* column."""

WHOLE, OTHER = "recompress (whole)", "other (checks, rank rule, copies)"


def draw(res) -> list[Section]:
    df = res["backend_stages"]
    stages = [s for s in STAGES if s in df]
    as_run = all(s in df for s in AS_RUN)
    rows = []
    for _, r in df.sort_values(["case", "backend"]).iterrows():
        row = {"case": r["case"], "backend": r["backend"], **{f"{s} ms": r[s] for s in stages}, "whole ms": r[WHOLE]}
        if as_run:
            row.update({"other ms": r[OTHER], "other / whole": r[OTHER] / r[WHOLE]})
        rows.append(row)
    table = pd.DataFrame(rows)
    intro = ("FRAQ's recompression of a preset's module groups (`fraq.recompress` on each group's stacks, one call "
             "per group as `benchmarks.cases.preset_stacks` gives them, where the whole-model aggregator runs the "
             "groups of one shape as one batch; tau = 0.95), each stage of its pipeline run alone on the previous "
             "stages' results and timed "
             "round-robin with the whole call, at one torch thread (`python -m benchmarks.run backend_stages`): the "
             "basis of X; the Gram through H (the paper's steps), factored (C (Y Y^T) C^T) and *as run* (the form "
             "`gram=\"auto\"` takes at the group's shape: factored on LoRA stacks); the float64 eigensolver; Q "
             "applied to U_p; the rows R_p in the same three forms. *other* is the whole less the stages it runs "
             "(basis, Gram as run, eigensolver, Q applied, rows as run): the argument checks, the range and "
             "cancellation verdicts, the rank rule, masks and copies; a negative value is the stages' own timing "
             "noise, larger than what they leave"
             + ("" if as_run else " (not in these results: they predate the as-run stages)")
             + ". No paper claim: the backends and the verdicts are this implementation's. "
             f"{style.caption(df)}.")
    lines = []
    for case, g in table.groupby("case"):
        hh = g[g["backend"] == "householder"]
        if as_run and not hh.empty:
            h = hh.iloc[0]
            lines.append(f"- {case}, Householder (the CPU's default basis): {h['whole ms']:.2f} ms whole, of which "
                         f"{h['other ms']:.2f} ms ({100 * h['other / whole']:.0f}%) outside the timed stages.")
    return [Section("Where one recompression's time goes, stage by stage",
                    intro + "\n\n" + tables.markdown(table) + ("\n\n" + "\n".join(lines) if lines else ""), level=3)]
