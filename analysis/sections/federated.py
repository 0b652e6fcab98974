"""Tables 1-3's accuracy: federated fine-tuning over seeds (``python -m fraq.federated``): the
accuracy table, the curves and the verdicts, and the report's section of them.

Reads the ``federated`` result files (one per variant, method and seed, written by
``python -m fraq.federated``) as :func:`analysis.loaders.load_results` returns them; it
imports nothing from the code it describes.

**Intervals.** A method's accuracy is the mean over its seeds with the 95% Student-t
interval, mean +- t(0.975, n - 1) s / sqrt(n) for n seeds with standard deviation s. Two
methods are compared on the same seeds (the seed draws the partition, the initialization
and the data order, so both met the same draw): the interval is the same t-interval of
the per-seed differences (paired), which removes the seed-to-seed spread both share. A
verdict on a claim "difference > threshold" is **agrees** when the whole interval is above
the threshold, **disagrees** when the whole of it is below, **inconclusive** when it
straddles, and **no verdict** with fewer than two common seeds (no interval).

Under exchangeable noise a 95% interval excludes the true difference in 5% of
experiments: a claim judged once per configuration is wrongly decided about that often.
Two runs of one method on the same seeds are identical, so their differences are exactly
zero and the interval is [0, 0]: they are never called different
(tests/test_federated_analysis.py checks both).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from analysis import tables
from analysis.figures import legend_top
from analysis.notes import NotMeasured
from analysis.sections import Figure, Section
from analysis.style import PAPER_ORDER, described, method_parts, styles
from analysis.style import display_name as _shown
from analysis.verdicts import Verdict

__all__ = ["CLOSE_POINTS", "HOW", "PUBLISHED", "draw", "titles", "accuracy_interval", "compare", "curves", "display_name",
           "figure", "interval", "is_smoke", "paired", "runs", "server_share", "share_note", "shown", "table",
           "variant_settings", "variants", "verdict_lines"]

reads = ("federated",)

CLOSE_POINTS = 1.0
""""Close to" an uncompressed baseline, as tested: FRAQ's accuracy at most 1 percentage
point below it. The paper reports gaps of 0.33 to 0.61 points (Section 5, Table 3: 0.39);
1 point is the tolerance a reader of "close" would grant a different corpus and model."""

HOW = ("Accuracy: the mean over seeds with its 95% Student-t interval, mean ± t(0.975, n−1)·s/√n for n seeds "
       "with standard deviation s; every method runs on the same seeds (a seed draws the partition, the "
       "initialization and the data order). A comparison of two methods takes the same interval of their "
       "per-seed differences (paired). **agrees**: the whole interval is on the claim's side of its threshold; "
       "**disagrees**: none of it is; **inconclusive**: it straddles the threshold; **no verdict**: fewer than "
       "two common seeds.")

SMOKE = ("A smoke run (`--config smoke`): a few steps on a tiny schedule that check every piece of the "
         "pipeline runs. Its accuracies mean nothing, so it gives no verdict on the paper's claims.")
"""What a report of the smoke setting says in place of its verdicts."""


def is_smoke(df: pd.DataFrame) -> bool:
    """Whether ``df`` (result rows) holds a run of the smoke setting."""
    return "setting" in df and bool((df["setting"] == "smoke").any())


def display_name(spec: str, recorded=None) -> str:
    """``"fraq:tau=0.95"`` -> ``"FRAQ (τ=0.95)"``: the method's display name, ``recorded``
    (the ``display_name`` its result records, its class's: a method from outside the package
    by its own name) or, for results written without one, :func:`analysis.style.display_name`
    of its registry name, followed by the spec's options."""
    name, opts = method_parts(spec)
    opts = opts.replace("tau=", "τ=").replace(",", ", ")
    family = recorded if isinstance(recorded, str) and recorded else _family(name)
    return f"{family} ({opts})" if opts else family


def _family(spec: str) -> str:
    return _shown(method_parts(spec)[0])


def interval(values) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of ``values`` and its 95% Student-t interval (NaN bounds for one value)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if n < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return m, m - half, m + half


def accuracy_interval(values) -> tuple[float, float, float]:
    """:func:`interval` of accuracies (%), its bounds kept inside [0, 100], where an accuracy lies
    (three seeds at 99, 100, 100 give a t-interval reaching above 100)."""
    mean, lo, hi = interval(values)
    return mean, (max(lo, 0.0) if math.isfinite(lo) else lo), (min(hi, 100.0) if math.isfinite(hi) else hi)


def runs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, method, seed): final accuracy (%), mean downlink (% FLoRA) and
    aggregation time (ms) over rounds, mean rank, ``skipped`` (the reason, or None), and the
    names it is shown by: ``name`` (:func:`display_name`, from the recorded one) and
    ``family`` (the same without the options)."""
    rows = []
    for _, r in df.iterrows():
        recs = r.get("rounds")
        recs = recs if isinstance(recs, list) else []
        skipped = r.get("skipped")
        skipped = skipped if isinstance(skipped, str) and skipped else None
        accs = [x["accuracy"] for x in recs if x.get("accuracy") is not None]
        rows.append({"variant": r["variant"], "method": r["method"], "seed": int(r["seed"]), "skipped": skipped,
                     **_names(r),
                     "accuracy": 100 * accs[-1] if accs and recs[-1].get("accuracy") is not None else math.nan,
                     "downlink_pct_flora": np.mean([x["downlink_pct_flora"] for x in recs]) if recs else math.nan,
                     "agg_ms": [x["agg_ms"] for x in recs], "server_share": [server_share(x) for x in recs],
                     "rank_mean": np.mean([x["rank_mean"] for x in recs]) if recs else math.nan,
                     "rounds": len(recs)})
    return pd.DataFrame(rows)


def server_share(record: dict) -> float:
    """The aggregation's share of one round (a fraction), from the round's recorded seconds:
    ``agg_ms`` / (``train_seconds`` + ``agg_ms``), with ``train_seconds`` the K clients' local
    training one after another, each upload copied into the server's round buffer as its client
    finishes (so the in-process upload is inside it; a network's transfer is not modelled).
    Evaluation is no part of a round here. NaN where the record has no training time (a runtime
    that does not time it) or a negative one."""
    train, agg = record.get("train_seconds"), record.get("agg_ms")
    if not isinstance(train, (int, float)) or not isinstance(agg, (int, float)) or train < 0 or agg < 0:
        return math.nan
    total = 1e3 * train + agg
    return agg / total if total > 0 else math.nan


def share_note(df: pd.DataFrame) -> str:
    """What the *server share* column is and where it was measured: the machine, its threads."""
    cpu = df["machine.cpu"].dropna().iloc[0] if "machine.cpu" in df and df["machine.cpu"].notna().any() else None
    threads = df["threads"].dropna().iloc[0] if "threads" in df and df["threads"].notna().any() else None
    where = (f"on {cpu}" if cpu else "on the run's machine (not recorded)") + (
        f", {int(threads)} torch thread(s)" if threads is not None else "")
    return ("*Server share*: the aggregation's time over a whole round's, local training (the clients one after "
            "another, each upload copied into the server's round buffer as it finishes: the in-process upload is "
            "inside it, no network is modelled) plus the aggregation, per round from the seconds the run records, "
            f"mean over rounds and seeds; evaluation not counted; {where}.")


def curves(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, method, seed, round) with an evaluated accuracy (%), and the
    method's ``name`` and ``family`` (:func:`runs`)."""
    rows = []
    for _, r in df.iterrows():
        for x in r.get("rounds") if isinstance(r.get("rounds"), list) else []:
            if x.get("accuracy") is not None:
                rows.append({"variant": r["variant"], "method": r["method"], "seed": int(r["seed"]),
                             "round": int(x["round"]), "accuracy": 100 * x["accuracy"], **_names(r)})
    return pd.DataFrame(rows, columns=["variant", "method", "seed", "round", "accuracy", "name", "family"])


def shown(rows: pd.DataFrame, column: str = "name") -> dict[str, str]:
    """method spec -> the name it is shown by, from ``rows`` (of :func:`runs` or :func:`curves`:
    their ``name``, or ``family`` with ``column="family"``; :func:`display_name` of the spec
    for rows without the column)."""
    if column in rows:
        return dict(zip(rows["method"], rows[column]))
    return {m: display_name(m if column == "name" else method_parts(m)[0]) for m in rows["method"]}


def _names(r) -> dict:
    """A result row's ``name`` and ``family`` as shown (:func:`display_name`)."""
    recorded = r.get("display_name")
    recorded = recorded if isinstance(recorded, str) and recorded else None
    return {"name": display_name(r["method"], recorded), "family": display_name(method_parts(r["method"])[0],
                                                                                recorded)}


def _order(methods) -> list[str]:
    """``methods`` in Table 1's row order (:data:`analysis.style.PAPER_ORDER`: the
    uncompressed baselines, the compressed ones, FRAQ; others after them), options in
    sorted order."""
    last = max(PAPER_ORDER.values()) + 1
    return sorted(dict.fromkeys(methods), key=lambda m: (PAPER_ORDER.get(method_parts(m)[0], last), str(m)))


def variants(runs_: pd.DataFrame, df: pd.DataFrame | None = None) -> list[str]:
    """The variants, the one with the fewest distinct client ranks (uniform ranks) first, then the
    milder label partition (larger Dirichlet alpha) first, as the paper's columns."""
    spread, alpha = {}, {}
    if df is not None and "federated.ranks" in df:
        for v, r in zip(df["variant"], df["federated.ranks"]):
            spread[v] = len(set(r)) if isinstance(r, list) else 0
    if df is not None and "partition.alpha" in df:
        for v, a in zip(df["variant"], pd.to_numeric(df["partition.alpha"], errors="coerce")):
            alpha[v] = -a if math.isfinite(a) else 0.0
    return sorted(dict.fromkeys(runs_["variant"]), key=lambda v: (spread.get(v, 0), alpha.get(v, 0.0), v))


def variant_settings(df: pd.DataFrame, setting_columns: list[str]) -> dict[str, dict[str, object]]:
    """variant -> {setting key: value} for the keys whose value differs between variants (each
    variant is one setting: :func:`analysis.resultset.setting_mixes`); empty with one variant."""
    firsts = {v: g.iloc[0] for v, g in df.groupby("variant", sort=False)}
    out: dict[str, dict[str, object]] = {v: {} for v in firsts}
    for c in setting_columns:
        vals = {v: r.get(c) for v, r in firsts.items()}
        if len({repr(x) for x in vals.values()}) > 1:
            for v, x in vals.items():
                out[v][c] = x
    return out


def table(runs_: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Table 1/3's shape for ``variant``: accuracy mean [95% interval] over seeds, downlink
    (% FLoRA), aggregation time (ms, mean ± std over rounds and seeds), the aggregation's share
    of a round (%, :func:`server_share`, mean over rounds and seeds; "-" where no round timed
    its training), mean rank, seeds.

    Among the compressed-downlink methods (mean downlink below 100% of FLoRA's: the paper
    leaves the uncompressed FLoRA and FedEx-LoRA out), the best mean accuracy is **bold**
    and the second best <u>underlined</u>, as the paper marks them (equal printed means share
    a mark).
    """
    d = runs_[runs_["variant"] == variant]
    names = shown(d)
    out, means = [], {}
    for m in _order(d["method"]):
        g = d[d["method"] == m]
        skip = g["skipped"].dropna()
        if len(skip) == len(g):
            out.append({"Method": names[m], "Accuracy (%)": f"skipped: {skip.iloc[0]}", "Downlink (% FLoRA)": "",
                        "Avg. agg. time (ms)": "", "Server share (%)": "", "Mean rank": "", "Seeds": 0})
            continue
        g = g[g["skipped"].isna()]
        mean, lo, hi = accuracy_interval(g["accuracy"])
        ms = np.concatenate([np.asarray(x, dtype=float) for x in g["agg_ms"]])
        share = np.concatenate([np.asarray(x, dtype=float) for x in g.get("server_share", [])] or [np.empty(0)])
        share = share[np.isfinite(share)]
        down = float(g["downlink_pct_flora"].mean())
        if down < 100 and math.isfinite(mean):
            means[m] = mean
        acc = f"{mean:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else "")
        out.append({"Method": names[m], "Accuracy (%)": acc, "Downlink (% FLoRA)": f"{down:.1f}",
                    "Avg. agg. time (ms)": f"{ms.mean():.1f} ± {ms.std(ddof=1) if ms.size > 1 else 0.0:.1f}",
                    "Server share (%)": f"{100 * share.mean():.3g}" if share.size else "-",
                    "Mean rank": f"{float(g['rank_mean'].mean()):.1f}", "Seeds": int(g["seed"].nunique())})
    levels = sorted({round(v, 2) for v in means.values()}, reverse=True)[:2]  # as printed: ties share a mark
    marks = {names[m]: ("**", "**") if round(v, 2) == levels[0] else ("<u>", "</u>")
             for m, v in means.items() if round(v, 2) in levels}
    for row in out:
        if row["Method"] in marks:
            a, b = marks[row["Method"]]
            mean_txt, _, rest = row["Accuracy (%)"].partition(" ")
            row["Accuracy (%)"] = f"{a}{mean_txt}{b} {rest}".strip()
    return pd.DataFrame(out)


def compare(runs_: pd.DataFrame, variant: str, a: str, b: str, *, above: float) -> Verdict:
    """The verdict on "accuracy(``a``) - accuracy(``b``) > ``above``" (percentage points)
    under ``variant``, from the rows of :func:`runs` (:func:`paired`)."""
    d = runs_[(runs_["variant"] == variant) & runs_["skipped"].isna()]
    pa = dict(zip(d.loc[d["method"] == a, "seed"], d.loc[d["method"] == a, "accuracy"]))
    pb = dict(zip(d.loc[d["method"] == b, "seed"], d.loc[d["method"] == b, "accuracy"]))
    return paired(pa, pb, above=above, claim=f"{display_name(a)} - {display_name(b)} ({variant})")


def paired(a: dict, b: dict, *, above: float, claim: str = "") -> Verdict:
    """The verdict on "a - b > ``above``" from per-seed results ``{seed: accuracy}``: the
    95% t-interval of the differences on the seeds both have (module docstring); "no
    verdict", with a warning, below two common seeds."""
    common = sorted(s for s in set(a) & set(b) if np.isfinite(a[s]) and np.isfinite(b[s]))
    if len(common) < 2:
        warnings.warn(NotMeasured(f"no verdict on {claim}: {len(common)} common seed(s), an interval needs two"),
                      stacklevel=3)
        return Verdict("no verdict", missing=(f"{len(common)} common seed(s)",))
    diff = np.array([a[s] - b[s] for s in common], dtype=float)
    mean, lo, hi = interval(diff)  # identical per-seed results: s = 0, the interval is [mean, mean]
    word = "agrees" if lo > above else "disagrees" if hi < above else "inconclusive"
    return Verdict(word, mean, lo, hi)


def _has(runs_: pd.DataFrame, variant: str, method: str) -> bool:
    d = runs_[(runs_["variant"] == variant) & (runs_["method"] == method)]
    return not d.empty and d["skipped"].isna().any()


def verdict_lines(runs_: pd.DataFrame, variant: str, fraq: str = "fraq:tau=0.95") -> list[str]:
    """The paper's claims under ``variant``, each with its verdict and interval:
    FRAQ close to FLoRA and to FedEx-LoRA (at most :data:`CLOSE_POINTS` below), and
    FRAQ above FLoRIST and FlexLoRA at its downlink (the difference above 0)."""
    if not _has(runs_, variant, fraq):
        return [f"- No verdicts: {display_name(fraq)} was not run under {variant}."]
    d = runs_[(runs_["variant"] == variant) & runs_["skipped"].isna()]
    down = d.groupby("method")["downlink_pct_flora"].mean()
    lines = []
    for base in ("flora", "fedex-lora"):
        if _has(runs_, variant, base):
            v = compare(runs_, variant, fraq, base, above=-CLOSE_POINTS)
            paper = "within 0.33-0.61 points of FLoRA" if base == "flora" else "close to the uncompressed baselines"
            lines.append(f"- *{display_name(fraq)} close to {display_name(base)}* (the paper: {paper}): ours "
                         f"{_word(v)}, tested as {display_name(fraq)} − {display_name(base)} > −{CLOSE_POINTS:g} "
                         f"point: {_diff(v)}.")
    for other in ("florist", "flexlora"):
        if _has(runs_, variant, other):
            v = compare(runs_, variant, fraq, other, above=0.0)
            lines.append(f"- *{display_name(fraq)} above {display_name(other)}* (the paper: the best compressed "
                         f"accuracy): ours {_word(v)}, tested as {display_name(fraq)} − {display_name(other)} > 0: "
                         f"{_diff(v)}; downlink {down.get(fraq, math.nan):.1f}% against "
                         f"{down.get(other, math.nan):.1f}% of FLoRA.")
    return lines


def _word(v: Verdict) -> str:
    return v.bold()


def _diff(v: Verdict) -> str:
    if v.word == "no verdict":
        return v.interval()
    iv = "exact" if v.lo == v.hi else f"[{v.lo:+.2f}, {v.hi:+.2f}]"
    return f"{v.value:+.2f} points {iv}"


GROUPS = (("uncompressed baselines", (1, 2)), ("factor-averaging methods", (3, 4)),
          ("recompression methods", (5, 6, 7)))
"""The paper's groups of Tables 1-3's rows (its midrules), by the rows' order
(:data:`analysis.style.PAPER_ORDER`): FLoRA and FedEx-LoRA; FedIT and LoRA-A²; FlexLoRA,
FLoRG and FLoRIST. FRAQ (8) is drawn in every group's panel; a method outside them (the
paper does not compare it) in a panel of its own group, "other methods"."""


def _group(method: str) -> str | None:
    order = PAPER_ORDER.get(method_parts(method)[0])
    if order == PAPER_ORDER["fraq"]:
        return None  # in every panel
    return next((g for g, orders in GROUPS if order in orders), "other methods")


def figure(curves_: pd.DataFrame, variants: list[str], titles: dict[str, str] | None = None, bands: bool = True):
    """Accuracy per round: a row of panels per variant (``titles``: variant -> its title), a
    panel per group of methods (:data:`GROUPS`), each with FRAQ's curves beside the group's,
    so that no panel holds more than a handful of curves; the mean over seeds, band = 95%
    interval, kept inside [0, 100], for FRAQ's last setting (the verdicts' ``tau=0.95``) and
    the group's methods (``bands=False``: no band). Nine methods on one panel hid each other
    under their bands."""
    import matplotlib.pyplot as plt

    groups = [g for g, _ in GROUPS if any(_group(m) == g for m in curves_["method"].unique())]
    groups += ["other methods"] if any(_group(m) == "other methods" for m in curves_["method"].unique()) else []
    groups = groups or ["FRAQ"]  # FRAQ alone
    fig, axes = plt.subplots(len(variants), len(groups), figsize=(4.4 * len(groups), 3.4 * len(variants) + 0.4),
                             squeeze=False, sharey=True)
    names, families = shown(curves_), shown(curves_, "family")
    look = styles(described(pd.DataFrame({"method": list(families), "display_name": list(families.values())})))
    handles: dict[str, object] = {}
    for i, (row, variant) in enumerate(zip(axes, variants)):
        d = curves_[curves_["variant"] == variant]
        fraqs = sorted(m for m in d["method"].unique() if _group(m) is None)
        for ax, group in zip(row, groups):
            for m in _order(d["method"]):
                if _group(m) not in (None, group):
                    continue
                g = d[d["method"] == m].groupby("round")["accuracy"]
                stats_ = g.apply(lambda s: pd.Series(interval(s), index=["mean", "lo", "hi"])).unstack()
                fam = families[m]
                dashed = m in fraqs and m != fraqs[-1]  # FRAQ's other settings: dashed, no band
                (line,) = ax.plot(stats_.index, stats_["mean"], marker=look[fam]["marker"],
                                  linestyle="--" if dashed else "-", color=look[fam]["color"], label=names[m],
                                  markersize=4, zorder=look[fam]["zorder"])
                if bands and not dashed:
                    ax.fill_between(stats_.index, stats_["lo"].clip(0, 100), stats_["hi"].clip(0, 100),
                                    color=line.get_color(), alpha=0.12, linewidth=0)  # an accuracy lies in [0, 100]
                handles.setdefault(names[m], line)
            heading = titles.get(variant, f"{variant} ranks") if titles else f"{variant} ranks"
            ax.set_title(heading if groups == ["FRAQ"] else f"{heading}\nFRAQ and the {group}", fontsize=10)
            ax.set_xticks(sorted(d["round"].unique()))
            ax.set_xlabel("round" if i == len(variants) - 1 else "")  # the bottom row's
        row[0].set_ylabel("test accuracy (%)")
    order = [names[m] for m in _order(curves_["method"]) if names[m] in handles]  # the paper's row order
    legend_top(fig, [handles[n] for n in order], order, 5)
    return fig

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

    differ = variant_settings(df, setting_columns(df))
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
    by_seed = runs(df)
    shown_variants = variants(by_seed, df)
    heads = titles(df, shown_variants)
    smoke = is_smoke(df)
    body = [_setting(df, shown_variants), "", SMOKE if smoke else HOW, ""]
    for v in shown_variants:
        body += [f"### {heads[v]}", "", tables.markdown(table(by_seed, v)), "",
                 *([] if smoke else [*verdict_lines(by_seed, v), ""])]
    body.append("Downlink and aggregation time are averaged over rounds (and seeds); aggregation time is this "
                "CPU's, measured inside the training run. " + share_note(df) + " Bold: best accuracy among the compressed-downlink methods "
                "(below 100% of FLoRA's downlink), underlined: second best, by the mean over seeds.")
    fig = Figure("federated_accuracy", figure(curves(df), shown_variants, heads, bands=not smoke), df,
                 "mean over seeds" + ("" if smoke else ", band = 95% t-interval over seeds (none on FRAQ's dashed "
                                                       "setting)"),
                 "Test accuracy after every round of federated fine-tuning: a row per variant, a panel per group of "
                 "the paper's methods (uncompressed, factor averaging, recompression), each beside FRAQ.")
    return [Section("Tables 1-3: accuracy of federated fine-tuning over seeds", "\n".join(body), figure=fig)]
