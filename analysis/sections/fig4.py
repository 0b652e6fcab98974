"""Figure 4: float32 fidelity against output rank and against the condition number."""

from __future__ import annotations

from analysis import agreement, figures
from analysis.sections import Figure, Section

reads = ("fig4_rank", "fig4_cond")


def draw(res) -> list[Section]:
    rk, cd = res["fig4_rank"], res["fig4_cond"]
    fig = Figure("fig4_fidelity", figures.fig4_fidelity(rk, cd), rk,
                 f"float32 against float64 references; left: {int(rk['clients'].iloc[0])} clients of rank 8, "
                 f"{rk.groupby('group')['layers'].first().sum()} modules, band = 10-90th percentile, the optimum at "
                 f"p = stacked rank is 0 and not drawn; right: {int(cd['batch'].iloc[0])} matrices per kappa, "
                 "bars = min-max",
                 "Relative error against output rank (LoRA-like LLaMA-3.2-3B-shaped updates) and against the "
                 "condition number at full output rank.")
    return [Section("Figure 4: float32 fidelity", "\n".join(agreement.fig4_lines(rk, cd)), fig)]
