"""Table 4: the ablation (orientation, Gram recovery against coordinate SVD)."""

from __future__ import annotations

from analysis import agreement, style, tables
from analysis.sections import Section

reads = ("table4",)


def draw(res) -> list[Section]:
    t4 = res["table4"]
    c = t4.iloc[0]
    intro = (f"{int(c['modules'])} LLaMA-3.2-3B gate/up projections ({int(c['m'])} x {int(c['n'])}), "
             f"{int(c['clients'])} clients of rank {int(c['client_rank'])}, output rank {int(c['p'])}, one batched "
             f"call. Time: median [IQR] of {_rounds(c)}; memory: tensor peak above the inputs, "
             "and the resident set's growth over a second (first) call in a fresh process at one thread, its "
             "cross-check (`benchmarks.measure.rss`; the first call includes the libraries' set-up). "
             "The Gram rows are the paper's configuration (product Gram, eigensolver in float32); the library row "
             "is fraq.recompress's default (Gram form by cost, float64 eigensolver). "
             f"{style.caption(t4)}.")
    return [Section("Table 4: ablation", intro + "\n\n" + tables.markdown(tables.table4_ablation(t4)) + "\n\n"
                    + "\n".join(agreement.table4_lines(t4)))]


def _rounds(c) -> str:
    """How the samples were taken: paired rounds over launches, or (results without rounds) repeats."""
    if "rounds" in c and c["rounds"] == c["rounds"]:
        return (f"{int(c['rounds']) * int(c['launches'])} paired rounds ({int(c['rounds'])} in each of "
                f"{int(c['launches'])} launches, every variant once per round)")
    return f"{int(c['repeats'])} repeats"
