"""Figure 1: per-client downlink against the number of clients and the local rank."""

from __future__ import annotations

from analysis import agreement, figures
from analysis.sections import Figure, Section

reads = ("fig1",)


def draw(res) -> list[Section]:
    f1 = res["fig1"]
    lm, lf = int(f1["layers_measured"].iloc[0]), int(f1["layers_full"].iloc[0])
    fig = Figure("fig1_downlink", figures.fig1_downlink(f1), f1,
                 f"downlink counted by fraq.aggregators on {lm} of {lf} layers of every projection, scaled "
                 f"x{lf / lm:g} to the whole model; synthetic LoRA-like client spectra",
                 "Per-client downlink of the exact FLoRA stack and of FRAQ at 80/90/95% retained energy, against "
                 "the number of clients and the local rank.")
    return [Section("Figure 1: downlink", "\n".join(agreement.fig1_lines(f1)), fig)]
