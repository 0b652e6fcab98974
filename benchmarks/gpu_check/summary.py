"""The GPU check's ``summary.md``: the device, what each part did, and the headline numbers.

Read from the part statuses and the result files of the run; it states what was
measured and judges nothing (the verdicts against the paper are
:mod:`analysis.sections.gpu`'s, drawn by ``python -m analysis.reproduce --out DIR``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

__all__ = ["summary"]


def _results(work: Path, experiment: str) -> list[dict]:
    out = []
    for f in sorted((work / "results" / experiment).glob("*.json")):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return out


def _ms(timing: dict | None) -> str:
    return f"{timing['median'] * 1e3:.3g} ms" if timing and "median" in timing else "-"


def _device_lines(work: Path, meta: dict) -> list[str]:
    try:
        rec = json.loads((work / "device.json").read_text())["record"]
    except (OSError, ValueError, KeyError):
        return [f"- device `{meta['device']}`: no record (the device part did not finish)"]
    gpu = rec.get("gpu") or rec.get("cpu")
    lines = [f"- device `{rec.get('device')}`: {gpu}; torch {rec.get('torch')}, CUDA {rec.get('cuda')}, driver "
             f"{rec.get('gpu_driver')}, cuSOLVER {rec.get('cusolver')}",
             f"- float32 matmul precision `{rec.get('float32_matmul_precision')}`, TF32 allowed: "
             f"{rec.get('allow_tf32')}; git {str(rec.get('git_sha'))[:10]}"]
    if rec.get("gpu"):
        lines.append(f"- clocks SM {rec.get('gpu_clock_sm_mhz')} of {rec.get('gpu_clock_sm_max_mhz')} MHz, memory "
                     f"{rec.get('gpu_clock_mem_mhz')} of {rec.get('gpu_clock_mem_max_mhz')} MHz; memory used "
                     f"{rec.get('gpu_memory_used_mib')} of {rec.get('gpu_memory_total_mib')} MiB")
    return lines


def _note(st: dict) -> str:
    notes = [st["detail"]] if st.get("detail") else []
    notes += [f"{n} x {r}" for r, n in (st.get("skipped") or {}).items()]
    notes += [f"failed {f['point']}: {f['error']}" for f in (st.get("failed") or [])[:3]]
    if st.get("cut_before"):
        notes.append(f"next point was {st['cut_before']}")
    return "; ".join(notes).replace("|", "/").replace("\n", " ")


def _tables123(work: Path) -> list[str]:
    lines = []
    for rec in _results(work, "tables123"):
        r = rec["result"]
        for row in r.get("rows", []):
            if "latency" in row and (row["name"] in ("fraq", "florist") or rec["config"].get("part") != "shared"):
                how = " (extrapolated)" if row.get("extrapolated") else ""
                lines.append(f"| {r['preset']} | {row['method']} | {_ms(row['latency'])}{how} |")
    return ["| preset | method | latency (median) |", "|---|---|---|", *lines] if lines else []


def _eigensolver(work: Path) -> list[str]:
    """FRAQ end to end per eigensolver route, the fastest marked: the default's evidence."""
    lines = []
    for rec in _results(work, "eigensolver"):
        r = rec["result"]
        routes = r.get("routes", {})
        best = min(routes, key=lambda k: routes[k]["timing"]["median"]) if routes else None
        for name, x in routes.items():
            mark = " (fastest)" if name == best and len(routes) > 1 else ""
            lines.append(f"| {rec['config']['preset']} | {name}{mark} | {_ms(x['timing'])} | "
                         f"{'yes' if x['same_ranks'] else 'NO'} | {x['max_product_gap']:.1e} |")
        for name, why in r.get("skipped", {}).items():
            lines.append(f"| {rec['config']['preset']} | {name} | {why} | | |")
    return (["| preset | route | FRAQ latency (median, paired) | ranks as device's | product gap |",
             "|---|---|---|---|---|", *lines] if lines else [])


def _routes(work: Path) -> list[str]:
    lines = []
    for rec in _results(work, "eigh_routes"):
        c, r = rec["config"], rec["result"]
        what = r.get("skipped") or f"{_ms(r.get('timing'))}, eigenvalue error {r['eigenvalue_error']:.1e}, " \
                                     f"residual {r['residual']:.1e}"
        lines.append(f"| eigh {c['batch']} x {c['r']}x{c['r']} | {c['route']} | {what} |")
    for rec in _results(work, "basis_routes"):
        c, r = rec["config"], rec["result"]
        lines.append(f"| basis {c['modules']} x {c['d']}x{c['D']}, r {c['r']} | {c['backend']} | "
                     f"{_ms(r['timing'])} whole, {_ms(r['basis_timing'])} basis, excess {r['excess_max']:.1e} |")
    return ["| case | route | median, fidelity |", "|---|---|---|", *lines] if lines else []


def _others(work: Path) -> list[str]:
    lines = []
    ratios = [rec["result"]["ratio"] for rec in _results(work, "workspace")]
    if ratios:
        lines.append(f"- workspace: peak / analytic from {min(ratios):.2f} to {max(ratios):.2f} "
                     f"over {len(ratios)} points")
    errors: dict[tuple, float] = {}
    for rec in _results(work, "tf32"):
        c, r = rec["config"], rec["result"]
        if "relative_error" in r:
            errors[(c["method"], c["tf32"], c["kappa"])] = statistics.median(r["relative_error"])
    for (method, mode, kappa), e in sorted(errors.items()):
        lines.append(f"- tf32 {mode}: {method} at kappa {kappa:.0e}, median relative error {e:.2e}")
    return lines


def _pipeline(work: Path) -> list[str]:
    """The ``pipeline`` experiment's results (one per preset and method, in the experiment's
    order), whether FRAQ's pipelines agree on every module's rank, then the ``cuda_graphs``
    records (:func:`benchmarks.graph_probe.lines`)."""
    results = _results(work, "pipeline")
    lines = []
    if results:
        lines += ["| preset (modules) | method | median ms | syncs | kernels | device busy ms | ranks as stepwise's |",
                  "|---|---|---|---|---|---|---|"]
        stepwise = {rec["config"]["preset"]: rec["result"].get("ranks") for rec in results
                    if rec["config"].get("row") == "stepwise"}
        for rec in sorted(results, key=_pipeline_order):
            c, r = rec["config"], rec["result"]
            busy = "-" if r.get("device_busy_s") is None else f"{1e3 * r['device_busy_s']:.2f}"
            syncs = "-" if r.get("syncs") is None else r["syncs"]
            first = stepwise.get(c["preset"])
            same = "-" if first is None or not c["method"].startswith("fraq") else \
                "yes" if r.get("ranks") == first else "NO"
            lines.append(f"| {c['preset']} ({r.get('modules', '-')}) | {c['method']} | {_ms(r.get('timing'))} | "
                         f"{syncs} | {r.get('kernels', '-')} | {busy} | {same} |")
    graphs = [dict(rec["result"], preset=rec["config"]["preset"]) for rec in _results(work, "cuda_graphs")]
    if graphs:
        from benchmarks.graph_probe import lines as graph_lines

        lines += (["", "CUDA graphs of the static pass (benchmarks.graph_probe):", ""] if lines else []) + \
            graph_lines(graphs)
    return lines


def _pipeline_order(rec: dict) -> tuple:
    """A ``pipeline`` result's place: its preset, then its method in the compared order."""
    c = rec["config"]
    compared = c.get("compared") or []
    return c["preset"], compared.index(c["row"]) if c.get("row") in compared else len(compared)


def summary(work: Path, statuses: list[dict], meta: dict) -> str:
    """The markdown summary of a run so far (``statuses``: one per part done)."""
    head = [f"# GPU check: device `{meta['device']}`, size `{meta['size']}`", "",
            f"Budget {meta['budget_s']:g} s, {meta.get('elapsed_s', 0.0):.0f} s used."
            + (f" {meta['kept']} result files kept from an earlier call in this folder (a point measured again "
               "replaced its own)." if meta.get("kept") else ""), "", *_device_lines(work, meta),
            "", "| part | state | points | seconds (allowed) | notes |", "|---|---|---|---|---|"]
    for st in statuses:
        points = f"{st.get('measured', '-')}/{st.get('points', '-')}"
        head.append(f"| {st['part']} | {st['state']} | {points} | {st['seconds']:.0f} ({st['share_s']:.0f}) | "
                    f"{_note(st)} |")
    body = []
    for title, lines in (("FRAQ's pipelines (the pipeline experiment)", _pipeline(work)),
                         ("Eigensolver routes, end to end", _eigensolver(work)), ("Tables 1-3", _tables123(work)),
                         ("Alternatives", _routes(work)),
                         ("Memory and TF32", _others(work))):
        if lines:
            body += ["", f"## {title}", "", *lines]
    tail = ["", "Draw against the paper's GH200 numbers, with the verdicts: `python -m analysis.reproduce --out "
            "<this directory>` (it unpacks results.tar.gz)."]
    return "\n".join(head + body + tail) + "\n"
