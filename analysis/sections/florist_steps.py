"""From FLoRIST to FRAQ, step by step: how much of the gap is the algorithm, how much the engineering.

Per preset, the five rows of ``florist_steps`` (FLoRIST as published, batched, on the QR
kernel; FRAQ stepwise, FRAQ by default), timed in the same paired rounds, with their FLOPs,
non-view ops and host reads per call; then each step's time ratio, judged round by round
(:func:`analysis.verdicts.judge`, ``paired``), and the gap split into its engineering
factor (batching, the device's pipeline) and its algorithm factor (the kernels)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import style, tables
from analysis.verdicts import judge, looks, ours, paired, samples
from analysis.sections import Section

reads = ("florist_steps",)

ROWS = ("published", "batched", "qr", "fraq-stepwise", "fraq")
"""The rows in the order the steps walk them (``benchmarks.experiments.florist_steps.STEPS``)."""

LABELS = {"published": "FLoRIST as published (loop over modules)", "batched": "FLoRIST batched per shape group",
          "qr": "FLoRIST on the QR kernel", "fraq-stepwise": "FRAQ, stepwise pipeline",
          "fraq": "FRAQ, the device's default"}

STEPS = (("published", "batched", "engineering: batching"),
         ("batched", "qr", "algorithm: two QRs in place of two SVDs"),
         ("qr", "fraq-stepwise", "algorithm: one QR and a Gram in place of two QRs and an SVD"),
         ("fraq-stepwise", "fraq", "engineering: the device's default pipeline"))
"""(from, to, what changes): each step's ratio is from's time over to's (above 1: the step is faster)."""

PRESET_TITLES = {"roberta-base": "RoBERTa-base", "llama-3.2-3b": "LLaMA-3.2-3B"}


def draw(res) -> list[Section]:
    df = res["florist_steps"]
    device = str(df["device"].iloc[0])
    cpu = device.startswith("cpu")
    tau = float(df["tau"].iloc[0])
    intro = (f"FLoRIST and FRAQ recompress the same stacks to the same output, a best rank-p approximation of the "
             f"exact aggregate, p by the same energy rule: every row here cuts at tau = {tau:g} (FLoRIST's default; "
             "FRAQ at the same threshold, so ranks and outputs compare). The rows walk from FLoRIST as its public code "
             "runs to FRAQ, one change at a time, all timed in the same paired rounds "
             "(`python -m benchmarks.run florist_steps`). *time / FRAQ's*: the median time over FRAQ's (the last "
             "row); *FLOPs*: counted (LAPACK formulas) and analytic (`fraq.aggregators.analytic_flops`); *ops* "
             "(non-view aten ops: a GPU's kernel launches) and *host reads* per call, counted on the preset's "
             "modules at reduced sides as the row runs on this device; *CUDA reads / ops*: FRAQ's in the CUDA "
             "configuration (FLoRIST's QR kernel takes its routes from the device, so its CUDA counts are a GPU "
             "run's). "
             + ("On a CPU FRAQ's default is the stepwise pipeline: its last two rows run the same code, and their "
                "ratio measures the noise of the pairing. " if cpu else "")
             + f"{style.caption(df)}.")
    out = [Section("From FLoRIST to FRAQ, step by step", intro)]
    for preset in [p for p in ("roberta-base", "llama-3.2-3b") if p in set(df["preset"])] + \
            sorted(set(df["preset"]) - {"roberta-base", "llama-3.2-3b"}):
        rows = df[df["preset"] == preset]
        out.append(Section(measured_title(preset, rows), tables.markdown(steps_table(rows)) + "\n\n"
                           + "\n".join(step_lines(rows)), level=3))
    return out


def measured_title(preset: str, rows: pd.DataFrame) -> str:
    """A preset's subsection title: its name and the modules its rows measured (their
    ``modules`` of ``modules_total``), never multiplied up."""
    r = rows.iloc[0]
    modules, total = int(r["modules"]), int(r["modules_total"])
    where = "every module" if modules == total else f"{modules} of its {total} modules (measured, not multiplied up)"
    return f"{PRESET_TITLES.get(preset, preset)}: {where}"


def row_of(rows: pd.DataFrame, key: str):
    """The row whose ``row`` is ``key``, or None."""
    sel = rows[rows["row"] == key]
    return None if sel.empty else sel.iloc[0]


def _ratio_words(t: float) -> str:
    if not np.isfinite(t):
        return "not measured"
    word = "slower" if t > 1 else "faster" if t < 1 else "the same"
    return f"{t:.3g}x ({word})"


def number(r, col: str) -> float:
    """Column ``col`` of row ``r`` as a float (NaN where the row or its value is missing)."""
    v = r.get(col) if r is not None else None
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def steps_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per row of the walk: time (median, IQR, ms), time over FRAQ's in words, counted
    and analytic GFLOPs, ops and host reads per call, FRAQ's in the CUDA configuration."""
    fraq = row_of(rows, "fraq")
    fraq_ms = float(np.median(samples(fraq["timing.samples"]))) * 1e3 if fraq is not None else float("nan")
    out = []
    for i, key in enumerate(ROWS, 1):
        r = row_of(rows, key)
        if r is None:
            continue
        ms = samples(r["timing.samples"]) * 1e3
        med, q25, q75 = np.median(ms), np.percentile(ms, 25), np.percentile(ms, 75)
        out.append({"": i, "row": LABELS[key], "time ms": med, "IQR ms": f"{q25:.3g}-{q75:.3g}",
                    "time / FRAQ's": _ratio_words(med / fraq_ms), "GFLOP counted": number(r, "flops_counted") / 1e9,
                    "GFLOP analytic": number(r, "flops_analytic") / 1e9, "ops": number(r, "ops"),
                    "host reads": number(r, "host_reads"),
                    "CUDA reads / ops": (f"{number(r, 'cuda_configuration.host_reads'):.0f} / "
                                         f"{number(r, 'cuda_configuration.ops'):.0f}"
                                         if np.isfinite(number(r, "cuda_configuration.ops")) else None)})
    return pd.DataFrame(out)


def _judge(rows: pd.DataFrame, keys: list[str], statistic, claim: str):
    sel = rows[rows["row"].isin(keys)]
    groups = {k: samples(row_of(rows, k)["timing.samples"]) for k in keys}
    return judge(groups, statistic, above=1.0, claim=claim, paired=paired(sel), looks=looks(sel), machine=sel)


def step_lines(rows: pd.DataFrame) -> list[str]:
    """Each step's ratio (from's time over to's) judged round by round, then the gap from
    FLoRIST as published to FRAQ split into its engineering and algorithm factors."""
    present = set(rows["row"])
    if not set(ROWS) <= present:
        return [f"- Not every row was measured ({', '.join(k for k in ROWS if k not in present)} missing): "
                "no steps."]
    preset = str(rows["preset"].iloc[0])
    out = []
    for a, b, what in STEPS:
        v = _judge(rows, [a, b], lambda g, a=a, b=b: g[a] / g[b], f"{a} -> {b} faster on {preset}")
        out.append(f"- {LABELS[a]} -> {LABELS[b]} ({what}): "
                   + ours(v, f"{v.value:.3g}x", ".3g", "x", test=f"{a}'s time over {b}'s above 1"))
    total = _judge(rows, ["published", "fraq"], lambda g: g["published"] / g["fraq"],
                   f"FRAQ faster than FLoRIST as published on {preset}")
    algorithm = _judge(rows, ["batched", "fraq-stepwise"], lambda g: g["batched"] / g["fraq-stepwise"],
                       f"the algorithm's share of the gap on {preset}")
    engineering = _judge(rows, ROWS, lambda g: g["published"] / g["batched"] * g["fraq-stepwise"] / g["fraq"],
                         f"the engineering's share of the gap on {preset}")
    share = _share(algorithm.value, total.value)
    out.append(f"- The whole gap, FLoRIST as published over FRAQ: "
               + ours(total, f"{total.value:.3g}x", ".3g", "x", test="published's time over FRAQ's above 1")
               + f". Of it, the algorithm (batched FLoRIST over FRAQ stepwise): "
               + ours(algorithm, f"{algorithm.value:.3g}x", ".3g", "x", test="above 1")
               + "; the engineering (batching, then the device's pipeline): "
               + ours(engineering, f"{engineering.value:.3g}x", ".3g", "x", test="above 1")
               + (f"; the algorithm is {share:.0%} of the gap on a log scale." if share is not None else "."))
    return out


def _share(algorithm: float, total: float) -> float | None:
    """log(algorithm) / log(total): the algorithm's share of the gap, where the gap is a
    speed-up and both factors are (a factor below 1 makes a share meaningless)."""
    if not (np.isfinite(algorithm) and np.isfinite(total)) or total <= 1.0 or algorithm < 1.0:
        return None
    return float(np.log(algorithm) / np.log(total))
