"""Whole models with many clients: time and peak memory of every method."""

from __future__ import annotations

from analysis import clients, style, tables
from analysis.sections import Section

reads = ("clients_models",)


def draw(res) -> list[Section]:
    cm = res["clients_models"]
    body = ("Every module of the model preset with K clients of rank 8, each method's whole-model aggregation "
            "(stacking included, batched by module shape; `python -m benchmarks.run clients_models`). A method "
            "whose one-module-per-shape estimate is over the run's budget is timed on one module per shape and "
            "extrapolated (labelled); a model run on its first layers only is extrapolated to every layer "
            "(labelled). Peak: tensor memory above the clients' factors of one timed call, beside the estimate "
            f"the job was checked against before it was built. {style.caption(cm)}.\n\n"
            + tables.markdown(clients.models_table(cm)) + "\n\n" + "\n".join(clients.models_lines(cm)))
    return [Section(clients.MODELS_TITLE, body)]
