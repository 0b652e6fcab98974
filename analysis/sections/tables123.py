"""Tables 1-3: every aggregator's downlink and server latency on the model presets."""

from __future__ import annotations

from analysis import style, tables
from analysis.sections import Section

reads = ("tables123",)


def draw(res) -> list[Section]:
    agg = res["tables123"]
    intro = ("Every aggregator on the model presets, batched by module shape; latency median and IQR "
             "(`python -m benchmarks.run tables123`); the paper's numbers are one GH200's. "
             f"{style.caption(agg)}.")
    return [Section("Tables 1-3: downlink and server latency",
                    intro + "\n\n" + tables.markdown(tables.tables123_latency(agg)))]
