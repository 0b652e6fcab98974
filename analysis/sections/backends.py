"""FRAQ's basis backends: accuracy against 1-thread latency (no paper claim)."""

from __future__ import annotations

import pandas as pd

from analysis import figures
from analysis.sections import Figure, Section

reads = ("backends",)


def draw(res) -> list[Section]:
    b = res["backends"]
    fig = Figure("fig_backends", figures.fig_backends(b), b,
                 f"python -m benchmarks.run backends --size {res.configuration.get('size', '?')}; latency at 1 torch "
                 "thread; open markers: inexact backends; dotted: error 1e-6",
                 "FRAQ's basis backends: 1-thread latency against the error above the float64 optimum (this "
                 "implementation's choice of backend; the paper makes no claim here).")
    return [Section("Backends: accuracy against latency", "\n".join(backends_lines(b)), fig)]


def backends_lines(df: pd.DataFrame) -> list[str]:
    """Per case, the fastest backend at one thread and its error above the optimum (no paper
    claim: the backends are this implementation's choice)."""
    lines = []
    lora = df[df["section"] == "lora"] if "section" in df else df
    for case, g in lora.groupby("case"):
        best = g.loc[g["ms_1t"].idxmin()]
        ref = g.set_index("backend")["ms_1t"].get("householder")
        lines.append(f"- {case}: fastest backend {best['backend']} ({best['ms_1t']:.1f} ms, 1 thread"
                     + (f"; Householder {ref:.1f} ms" if ref is not None else "") + "), error above optimum "
                     f"{best['gap_to_optimum']:.1e}.")
    return lines
