"""Tables 1-3: every aggregator's downlink and server latency on the model presets."""

from __future__ import annotations

from analysis import agreement, style, tables
from analysis.sections import Section

reads = ("tables123",)


def draw(res) -> list[Section]:
    agg = res["tables123"]
    intro = ("Every aggregator on the model presets, one federated round's server aggregation batched by module "
             "shape, the methods of a preset timed in the same paired rounds over fresh process launches "
             "(`python -m benchmarks.run tables123`; docs/benchmarks.md, Statistics); synthetic LoRA-like "
             "client factors, so the energy-threshold methods' ranks and downlink follow synthetic spectra. "
             "*x FRAQ*: latency over FRAQ's (tau = 0.95), ours and the paper's; *samples*: timed aggregations "
             "per row (fewer where one takes minutes); *how*: rows timed on some modules (a dense method on one "
             "module of every shape, or a preset built on some of its layers) are extrapolated to the whole "
             "model, and say from how many. The paper's numbers are one GH200's. "
             f"{style.caption(agg)}.")
    out = [Section("Tables 1-3: downlink and server latency", intro)]
    for preset in tables.tables123_presets(agg):
        body = tables.markdown(tables.tables123_latency(agg, preset)) + "\n\n" + "\n".join(
            agreement.tables123_lines(agg, preset))
        out.append(Section(tables.PRESET_TITLES.get(preset, preset), body, level=3))
    return out
