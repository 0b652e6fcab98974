"""FRAQ's pipelines against each other on one device: which one the evidence supports as its default.

Per preset, the ``pipeline`` experiment's methods (FRAQ stepwise, static read per shape group
and per call; FLoRA; FLoRIST), timed in the same paired rounds: a table of each method's
time, its time over FLoRA's, its host reads, the device's busy share and its top kernel;
whether FRAQ's pipelines give every module the same rank; then two paired verdicts
(:func:`analysis.verdicts.judge`, the sign-test interval over rounds): ``reads="call"``
against ``reads="group"``, and the static pipeline (read as the device's default reads)
against the stepwise one. Each says on which device it was measured, which value the
evidence supports as that device's default, and whether that is what
:data:`fraq._defaults.DEFAULTS` says for the device; a disagreement is flagged, never acted
on: a device's default changes only from a GPU's evidence, by hand, in that table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import style, tables
from analysis.sections import Section
from analysis.sections.florist_steps import measured_title, number, row_of
from analysis.verdicts import judge, looks, ours, paired, samples
from fraq._defaults import DEFAULTS, defaults_for

reads = ("pipeline",)

TITLE = "FRAQ's pipelines against each other"

ROWS = ("stepwise", "static-group", "static-call", "flora", "florist", "florist-qr")
"""The methods in the experiment's order (``benchmarks.experiments.pipeline.METHODS``)."""

LABELS = {"stepwise": "FRAQ, stepwise", "static-group": "FRAQ, static, reads='group'",
          "static-call": "FRAQ, static, reads='call'", "flora": "FLoRA", "florist": "FLoRIST",
          "florist-qr": "FLoRIST (kernel=qr)"}

FRAQ_ROWS = ("stepwise", "static-group", "static-call")

NOT_MEASURED = ("Not measured in this run (`python -m benchmarks.run pipeline`; on a GPU, the GPU check's "
                "`pipeline` part).")

RULE = ("A device's default changes only from a GPU's evidence: `fraq/_defaults.py` sets each entry by hand from a "
        "whole-model measurement on that device and names it; the verdicts below say what this run's evidence "
        "supports and never change a default themselves.")


def _device_type(device: str) -> str:
    return device.split(":")[0]


def draw(res) -> list[Section]:
    df = res["pipeline"]
    if df.empty:
        return [Section(TITLE, NOT_MEASURED)]
    device = str(df["device"].iloc[0])
    kind = _device_type(device)
    entry = defaults_for(kind)
    where = (f"`DEFAULTS['{kind}']`" if kind in DEFAULTS else f"the reference routes (no `DEFAULTS` entry for "
             f"'{kind}')")
    cpu = ("On a CPU this describes the CPU alone: its default pipeline is "
           f"{defaults_for('cpu').pipeline}, and a host read costs nothing there. ") if kind == "cpu" else ""
    intro = ("Per preset, FRAQ's stepwise pipeline (every verdict read as it comes) and its static one read per shape "
             "group (`reads='group'`) and per call (`reads='call'`: the groups that share the stacked rank share one "
             "r x r stage), FLoRA (stacking alone) and FLoRIST at FRAQ's tau = 0.95 as published and at its best "
             "(`kernel=qr`: the same output), all in the same paired rounds "
             "(`python -m benchmarks.run pipeline`). *time / FLoRA's*: the median time over FLoRA's; *host reads*: "
             "counted in one call as the method runs here, on the preset's modules at reduced sides (*CUDA reads*: "
             "FRAQ's with CUDA's basis); *syncs*: the device synchronizations of one call (CUDA only); *device busy*: "
             "the kernels' device time over the call's wall time (CUDA only); *top kernel*: the kernel (on a CPU the "
             "aten op) of most time in one call; *ran*: the pipeline one module took with the row's options here. "
             f"This run's device is `{device}`; its defaults are {where}: pipeline '{entry.pipeline}', reads "
             f"'{entry.reads}'. {cpu}{RULE} {style.caption(df)}.")
    out = [Section(TITLE, intro)]
    presets = [p for p in ("roberta-base", "llama-3.2-3b") if p in set(df["preset"])]
    for preset in presets + sorted(set(df["preset"]) - set(presets)):
        rows = df[df["preset"] == preset]
        body = tables.markdown(method_table(rows)) + "\n\n" + "\n".join(rank_lines(rows) + verdict_lines(rows, device))
        out.append(Section(measured_title(preset, rows), body, level=3))
    return out


def _ms(r) -> np.ndarray:
    return samples(r["timing.samples"]) * 1e3


def _top(r) -> str | None:
    top = r.get("top_kernels.rows")
    if not isinstance(top, (list, tuple)) or not top or not isinstance(top[0], dict):
        return None
    return str(top[0].get("name"))


def _ran(r) -> str | None:
    pipeline, backend = r.get("ran.pipeline"), r.get("ran.backend")
    return f"{pipeline} ({backend})" if isinstance(pipeline, str) else None


def method_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per method: median and IQR (ms), time over FLoRA's, host reads (here and in
    CUDA's configuration), syncs, device busy share, top kernel and the pipeline it ran."""
    flora = row_of(rows, "flora")
    flora_ms = float(np.median(_ms(flora))) if flora is not None else float("nan")
    out = []
    for key in ROWS:
        r = row_of(rows, key)
        if r is None:
            continue
        ms = _ms(r)
        med = float(np.median(ms))
        wall, busy = number(r, "wall_s"), number(r, "device_busy_s")
        out.append({"method": LABELS[key], "median ms": med,
                    "IQR ms": f"{np.percentile(ms, 25):.3g}-{np.percentile(ms, 75):.3g}",
                    "time / FLoRA's": f"{med / flora_ms:.3g}x" if np.isfinite(med / flora_ms) else None,
                    "host reads": number(r, "host_reads"), "CUDA reads": number(r, "cuda_configuration.host_reads"),
                    "syncs": number(r, "syncs"),
                    "device busy": f"{busy / wall:.0%}" if np.isfinite(busy) and wall > 0 else None,
                    "top kernel": _top(r), "ran": _ran(r)})
    return pd.DataFrame(out)


def rank_lines(rows: pd.DataFrame) -> list[str]:
    """Whether FRAQ's static rows give every module the stepwise pipeline's rank."""
    base = row_of(rows, "stepwise")
    if base is None:
        return ["- Ranks: the stepwise pipeline was not measured, nothing to compare them with."]
    ref = list(base["ranks"])
    out = []
    for key in FRAQ_ROWS[1:]:
        r = row_of(rows, key)
        if r is None:
            continue
        got = list(r["ranks"])
        differ = sum(a != b for a, b in zip(got, ref)) + abs(len(got) - len(ref))
        out.append(f"- Ranks, {LABELS[key]}: " + ("the stepwise pipeline's on every one of the "
                                                   f"{len(ref)} modules." if not differ else
                                                   f"**DIFFERENT** from the stepwise pipeline's on {differ} of "
                                                   f"{len(ref)} modules."))
    return out


def _judge(rows: pd.DataFrame, slow: str, fast: str, claim: str):
    """The verdict on "``slow``'s time over ``fast``'s is above 1", round by round."""
    sel = rows[rows["row"].isin([slow, fast])]
    groups = {k: samples(row_of(rows, k)["timing.samples"]) for k in (slow, fast)}
    return judge(groups, lambda g: g[slow] / g[fast], above=1.0, claim=claim, paired=paired(sel), looks=looks(sel),
                 machine=sel)


def _supported(v, faster: str, slower: str) -> str | None:
    """The value the verdict ``v`` on "slower's time over faster's above 1" supports: ``faster``
    when it agrees (the whole interval above 1), ``slower`` when the whole interval is below 1,
    none otherwise (an interval that holds or touches 1: equal times are no evidence either way)."""
    if v.word == "agrees":
        return faster
    return slower if v.word == "disagrees" and v.hi < 1.0 else None


def _against_default(kind: str, option: str, supported: str | None, v) -> str:
    """What the evidence supports for ``option`` on device type ``kind``, against
    :data:`fraq._defaults.DEFAULTS`."""
    today = getattr(defaults_for(kind), option)
    entry = f"`DEFAULTS['{kind}'].{option}`" if kind in DEFAULTS else f"the reference routes' {option}"
    if supported is None:
        why = {"descriptive": "too few rounds for an interval", "inconclusive": "the interval straddles 1",
               "disagrees": "the interval reaches 1"}.get(v.word, "no verdict")
        return f"The evidence supports neither as faster on `{kind}` ({why}); {entry} is '{today}' and stands."
    head = f"The evidence supports {option}='{supported}' as `{kind}`'s default; "
    if supported == today:
        return head + f"{entry} is '{today}': they agree."
    if option == "reads" and defaults_for(kind).pipeline != "static":  # reads decides nothing off the static pipeline
        return (f"The evidence supports reads='{supported}' for the static pipeline on `{kind}`; {entry} is "
                f"'{today}' and stands: `reads` applies to the static pipeline only, and `{kind}`'s default "
                f"pipeline is '{defaults_for(kind).pipeline}'.")
    return head + (f"{entry} is '{today}': **the evidence disagrees with the default**. A device's default changes "
                   "only from a GPU's evidence, by hand in `fraq/_defaults.py`, naming the measurement.")


def verdict_lines(rows: pd.DataFrame, device: str) -> list[str]:
    """The two paired verdicts of a preset: reads='call' against reads='group', and the static
    pipeline (at the device's default reads) against the stepwise one."""
    kind = _device_type(device)
    preset = str(rows["preset"].iloc[0])
    present = set(rows["row"])
    out = []
    if {"static-group", "static-call"} <= present:
        v = _judge(rows, "static-group", "static-call", f"reads='call' faster than reads='group' on {preset}")
        line = (f"- reads='call' vs reads='group' (measured on `{device}`): "
                + ours(v, f"{v.value:.3g}x", ".3g", "x", test="group's time over call's above 1") + ". "
                + _against_default(kind, "reads", _supported(v, "call", "group"), v))
        out.append(line + _same_code(rows, ("static-group", "static-call")))
    static = f"static-{defaults_for(kind).reads}"
    if {"stepwise", static} <= present:
        v = _judge(rows, "stepwise", static, f"the static pipeline faster than the stepwise one on {preset}")
        line = (f"- static (reads='{defaults_for(kind).reads}') vs stepwise (measured on `{device}`): "
                + ours(v, f"{v.value:.3g}x", ".3g", "x", test="stepwise's time over static's above 1") + ". "
                + _against_default(kind, "pipeline", _supported(v, "static", "stepwise"), v))
        out.append(line + _same_code(rows, ("stepwise", static)))
    return out or ["- Not every FRAQ pipeline was measured: no verdict."]


def _same_code(rows: pd.DataFrame, keys: tuple[str, str]) -> str:
    """A warning where both rows ran the stepwise pipeline (a basis without a static pass): their
    ratio is then the pairing's noise, not a difference between pipelines."""
    ran = [(row_of(rows, k) if row_of(rows, k) is not None else {}).get("ran.pipeline") for k in keys]
    if ran == ["stepwise", "stepwise"]:
        backend = row_of(rows, keys[1]).get("ran.backend")
        return (f" Here both rows ran the stepwise pipeline (the basis `{backend}` has no static pass), so their "
                "ratio measures the pairing's noise, not a difference between pipelines.")
    return ""
