"""Tables 1-3's accuracy: federated fine-tuning over seeds (``python -m fraq.federated``)."""

from __future__ import annotations

from analysis import federated, tables
from analysis.sections import Figure, Section

reads = ("federated",)

PUBLISHED = {
    "banking77": "BANKING77 (Casanueva et al., 2020, arXiv:2003.04807; CC BY 4.0)",
    "clinc150": "CLINC150 (Larson et al., EMNLP 2019, doi:10.18653/v1/D19-1131; CC BY 3.0), in scope only: "
                "trained on its train split, evaluated on its test split (its out-of-scope examples and val split unused)",
}
"""How the report names the published data sets: the publishers cited, the licences, the splits used."""


PAPER_STEPS = 30 * 200
"""Local steps a client trains in the paper's classification runs (30 rounds of 200)."""


def _setting(df, variants: list[str]) -> str:
    c = df.iloc[0]
    data = c.get("dataset.name") if isinstance(c.get("dataset.name"), str) else c.get("dataset.path")
    model = str(c.get("model.name"))
    part = c.get("partition.scheme")
    if part == "dirichlet":
        alphas = sorted(set(df["partition.alpha"].dropna()), reverse=True) if "partition.alpha" in df else []
        part = f"Dirichlet({', '.join(f'{a:g}' for a in alphas)})" + (" (one per variant)" if len(alphas) > 1 else "")
    seeds = sorted(df["seed"].unique())
    name = PUBLISHED.get(data, f"`{data}`")
    text = (f"{model} on {name}, {int(c['federated.clients'])} clients, {part} label partition, "
            f"{int(c['federated.rounds'])} rounds of {int(c['train.steps'])} local steps, accuracy on the whole test "
            f"split after every round; seeds {', '.join(map(str, seeds))}; variants "
            f"{', '.join(f'`{v}`' for v in variants)}.")
    layers = c.get("model.layers_to_transform")
    where = (f"LoRA on layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}" if isinstance(layers, list)
             else "LoRA on every layer")
    steps = int(c["federated.rounds"]) * int(c["train.steps"])
    schedule = (f"{steps:,} local steps a client in all, where the paper trains {PAPER_STEPS:,} (30 rounds of 200) "
                "with LoRA on every layer")
    if data in PUBLISHED and model.startswith("embedded:"):
        text += (f" The model is all-MiniLM-L6-v2 ({where}), not the paper's RoBERTa-base, on a schedule scaled to a "
                 f"2-core CPU: {schedule}; the comparison between methods carries over, not the accuracy values.")
    elif data == "intents" or model.startswith("embedded:"):
        text += (" **The corpus is generated** (`fraq.federated.intents`, 48 intents of templated sentences) **and "
                 f"the model is all-MiniLM-L6-v2** ({where}): not the paper's data sets (Banking77, "
                 "CLINC150, HWU64, 20 Newsgroups, the reasoning tasks) nor its models (RoBERTa-base, LLaMA-3.2-3B). "
                 f"Its schedule: {schedule}. "
                 "What carries over is the comparison between methods on one task, not the accuracy values. With "
                 "network access (and a GPU), the same experiment on the paper's setting is `python -m "
                 "fraq.federated --config roberta --dataset banking77` (or `clinc150`, `hwu64`, `20newsgroups`; "
                 "`--alpha 0.02` for the extreme partition), then `python -m analysis.reproduce --out "
                 "results/federated/roberta`.")
    elif steps != PAPER_STEPS or isinstance(layers, list):
        text += f" The schedule: {schedule} ({where} here)."
    return text


def titles(df, variants: list[str]) -> dict[str, str]:
    """variant -> its heading: what sets it apart from the others (``dir0.02: Dir(0.02)``, or the
    keys that differ); ``"<variant> ranks"`` for variants that differ in their ranks alone."""
    from analysis.resultset import setting_columns

    differ = federated.variant_settings(df, setting_columns(df))
    out = {}
    for v in variants:
        d = differ.get(v, {})
        parts = []
        for key, value in d.items():
            if key == "partition.alpha":
                parts.append(f"Dir({value:g})")
            elif key == "federated.ranks":
                parts.append(f"ranks {', '.join(map(str, value))}" if isinstance(value, list) else f"ranks {value}")
            else:
                parts.append(f"{key} = {value}")
        out[v] = f"{v}: {', '.join(parts)}" if set(d) - {"federated.ranks"} else f"{v} ranks"
    return out


def draw(res) -> list[Section]:
    df = res["federated"]
    runs = federated.runs(df)
    variants = federated.variants(runs, df)
    heads = titles(df, variants)
    smoke = federated.is_smoke(df)
    body = [_setting(df, variants), "", federated.SMOKE if smoke else federated.HOW, ""]
    for v in variants:
        body += [f"### {heads[v]}", "", tables.markdown(federated.table(runs, v)), "",
                 *([] if smoke else [*federated.verdict_lines(runs, v), ""])]
    body.append("Downlink and aggregation time are averaged over rounds (and seeds); aggregation time is this "
                "CPU's, measured inside the training run. Bold: best accuracy among the compressed-downlink methods "
                "(below 100% of FLoRA's downlink), underlined: second best, by the mean over seeds.")
    curves = federated.curves(df)
    fig = Figure("federated_accuracy", federated.figure(curves, variants, heads, bands=not smoke), df,
                 "mean over seeds" + ("" if smoke else ", band = 95% t-interval over seeds (none on FRAQ's dashed "
                                                       "setting)"),
                 "Test accuracy after every round of federated fine-tuning: a row per variant, a panel per group of "
                 "the paper's methods (uncompressed, factor averaging, recompression), each beside FRAQ.")
    return [Section("Tables 1-3: accuracy of federated fine-tuning over seeds", "\n".join(body), figure=fig)]
