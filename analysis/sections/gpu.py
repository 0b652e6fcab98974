"""GPU results: our GPU run beside the paper's GH200 numbers, with the verdicts a GPU can test.

Drawn in every report. On results measured on a CUDA device (``python -m
benchmarks.gpu_check``, or ``make bench-gpu``) it judges, against ``analysis/paper.json``'s
``gpu_targets``: FRAQ's whole-model aggregation time per preset (Tables 1-3, both
energy thresholds), FLoRIST's time over FRAQ's on the same GPU, and FRAQ's tensor peak
over the analytic workspace (the ``workspace`` experiment). On any other device it says
that there are no GPU results, in one line, and neither judges nor names a target (the
project's targets stay out of a CPU report).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.sections import Section

reads = ()

TITLE = "GPU results"


def _device(res) -> str:
    return str(res.configuration.get("device", "unrecorded"))


def _gpu_name(res) -> str:
    col = res.all.get("machine.gpu")
    names = sorted(set(col.dropna())) if col is not None else []
    return ", ".join(names) or "unrecorded GPU"


def _latency_lines(res, targets: dict) -> tuple[str, list[str]]:
    from analysis.sections.tables123 import tables123_presets, tables123_rows
    from analysis.verdicts import judge, not_measured, paired

    agg = res["tables123"]
    if agg.empty:
        return "", [f"- {p}: {not_measured(f'{p}: FRAQ within its GPU target', ['tables123 (no result)'])}"
                    for p in targets["fraq_ms"]]
    rows = tables123_rows(agg)
    keep = rows[rows["name"].isin(["fraq", "florist", "flexlora"])]
    table = pd.DataFrame({"preset": keep["preset"], "method": keep["shown"],
                          "ours ms (median)": keep["median_s"] * 1e3, "paper GH200 ms": keep["paper_ms"],
                          "how": keep["extrapolated"].fillna("whole model")})
    lines = []
    for preset in tables123_presets(agg):
        mine = rows[rows["preset"] == preset]
        fraq, florist = mine[mine["name"] == "fraq"], mine[mine["name"] == "florist"]
        target = targets["fraq_ms"].get(preset)
        for r in fraq.itertuples():
            if target is None:
                continue
            v = judge({r.method: np.asarray(r.samples) * 1e3}, lambda g, k=r.method: g[k], below=target,
                      claim=f"{preset}: {r.method} within {target:g} ms")
            lines.append(f"- {preset}, {r.shown}: whole-model aggregation {_value(v, ' ms')}, target <= {target:g} ms "
                         f"(a tenth of the paper's GH200 {r.paper_ms:g} ms): {v.bold()} ({v.interval('.3g', ' ms')})")
        if not florist.empty and not fraq.empty:
            lo = targets["florist_over_fraq_min"]
            groups = {"florist": np.asarray(florist["samples"].iloc[0]), "fraq": np.asarray(fraq["samples"].iloc[-1])}
            v = judge(groups, lambda g: g["florist"] / g["fraq"], above=lo,
                      claim=f"{preset}: FLoRIST at least {lo:g}x FRAQ's time",
                      paired=paired(pd.concat([florist.iloc[:1], fraq.iloc[-1:]])))
            lines.append(f"- {preset}: FLoRIST / FRAQ ({fraq['shown'].iloc[-1]}) time {_value(v, 'x')}, target >= "
                         f"{lo:g}x: {v.bold()} ({v.interval('.3g', 'x')})")
    from analysis.tables import markdown

    return markdown(table), lines


def _value(v, unit: str) -> str:
    """A verdict's value to 3 digits with its unit, or "not measured" (no NaN printed)."""
    return f"{v.value:.3g}{unit}" if np.isfinite(v.value) else "not measured"


def _workspace_line(res, targets: dict) -> list[str]:
    from analysis.verdicts import exact, not_measured

    ws = res["workspace"]
    hi = targets["peak_over_workspace_max"]
    if ws.empty or "ratio" not in ws:
        return [f"- peak memory: {not_measured('peak within the analytic workspace', ['workspace (no result)'])}"]
    worst = ws.loc[ws["ratio"].idxmax()]
    v = exact(float(worst["ratio"]), below=hi)
    return [f"- FRAQ's tensor peak over the analytic workspace: at most {v.value:.3g}x over {len(ws)} points "
            f"(worst {worst['key']}), target <= {hi:g}x: {v.bold()}"]


def draw(res) -> list[Section]:
    from analysis.loaders import paper

    targets = paper()["gpu_targets"]
    device = _device(res)
    if set(res.experiments) <= {"federated"}:  # a federated run: the server-side GPU claims are not its subject
        return []
    if not device.startswith("cuda"):
        body = (f"No GPU results here (these were measured on `{device}`): the GPU latency and peak-memory claims "
                "have no verdict in this report. `make gpu-check` on a GPU measures them (docs/benchmarks.md).")
        return [Section(TITLE, body)]
    table, lines = _latency_lines(res, targets)
    body = (f"Measured on {_gpu_name(res)} (`{device}`); the paper's numbers are one GH200's. The latency targets "
            "are set for an H100.\n\n" + (table + "\n\n" if table else "") + "\n".join(lines + _workspace_line(
                res, targets)))
    return [Section(TITLE, body)]
