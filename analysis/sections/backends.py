"""FRAQ's basis backends: accuracy against 1-thread latency (no paper claim)."""

from __future__ import annotations

from analysis import agreement, figures
from analysis.sections import Figure, Section

reads = ("backends",)


def draw(res) -> list[Section]:
    b = res["backends"]
    fig = Figure("fig_backends", figures.fig_backends(b), b,
                 f"python -m benchmarks.run backends --size {res.configuration.get('size', '?')}; latency at 1 torch "
                 "thread; open markers: inexact backends; dotted: error 1e-6",
                 "FRAQ's basis backends: 1-thread latency against the error above the float64 optimum (this "
                 "implementation's choice of backend; the paper makes no claim here).")
    return [Section("Backends: accuracy against latency", "\n".join(agreement.backends_lines(b)), fig)]
