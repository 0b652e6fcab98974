"""Fig. 3's third axis: runtime, memory, FLOPs and fidelity against the number of clients."""

from __future__ import annotations

from analysis import clients, kernel_variants
from analysis.sections import Figure, Section

reads = ("clients",)


def draw(res) -> list[Section]:
    cl = res["clients"]
    fig = Figure("fig_clients", clients.figure(cl), cl, clients.detail(cl), clients.WHAT)
    lines = clients.lines(cl) + kernel_variants.sweep_lines(clients.summary(cl), ["d", "D", "K"], "clients sweep")
    return [Section(clients.TITLE, "\n".join(lines), fig)]
