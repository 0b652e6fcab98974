"""A run's results files: per-method JSON, the table in the paper's Table 1 shape, a plot.

``out/results.json`` holds the configuration, the machine, and every method's rounds;
``out/rounds.csv`` one row per method and round; ``out/table.csv`` and ``out/table.md``
one row per method (final accuracy, mean downlink as % of FLoRA, aggregation time mean
and standard deviation over rounds, mean global rank); ``out/plot.png`` accuracy and
downlink per round (when matplotlib is installed). Every number in the table is computed
from the per-round records in ``results.json``.

Every file is built in memory and written whole by :func:`fraq._files.replacing_file`: a
reader, or a run killed at any moment, finds the complete old version or the complete new
one, never a torn file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

from fraq._files import replacing_file

__all__ = ["ROUND_FIELDS", "check_records", "summarize", "write_json", "write_results"]

ROUND_FIELDS = ("round", "accuracy", "train_loss", "downlink_params_mean", "downlink_pct_flora", "agg_ms", "rank_mean",
                "train_seconds")
"""The fields of a round record (:func:`fraq.federated.records.round_record`) the tables are built from."""


def check_records(records: object, where: str) -> None:
    """ValueError naming ``where`` unless ``records`` is a list of round records with :data:`ROUND_FIELDS`."""
    if not isinstance(records, list):
        raise ValueError(f"{where}: 'rounds' must be a list of round records, got {type(records).__name__}")
    for i, r in enumerate(records):
        missing = [k for k in ROUND_FIELDS if not isinstance(r, dict) or k not in r]
        if missing:
            raise ValueError(f"{where}: round record {i} lacks {missing}")


def _write(path: Path, data: str | bytes) -> None:
    """Replace ``path`` whole with ``data`` (text as UTF-8, no newline translation)."""
    with replacing_file(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def write_json(path: Path, obj) -> None:
    """Write ``obj`` as JSON, whole."""
    _write(path, json.dumps(obj, indent=1, allow_nan=True))


def summarize(result: dict) -> dict:
    """One table row from a method's per-round records."""
    row = {"method": result["method"]}
    if result.get("skipped"):
        return {**row, "skipped": result["skipped"]}
    recs = result["rounds"]
    accs = [r["accuracy"] for r in recs if r["accuracy"] is not None]
    ms = [r["agg_ms"] for r in recs]
    return {**row,
            "accuracy_pct": 100 * accs[-1] if accs else math.nan,
            "best_accuracy_pct": 100 * max(accs) if accs else math.nan,
            "downlink_pct_flora": statistics.fmean(r["downlink_pct_flora"] for r in recs),
            "downlink_params": statistics.fmean(r["downlink_params_mean"] for r in recs),
            "agg_ms_mean": statistics.fmean(ms),
            "agg_ms_std": statistics.stdev(ms) if len(ms) > 1 else 0.0,
            "rank_mean": statistics.fmean(r["rank_mean"] for r in recs),
            "train_seconds": sum(r["train_seconds"] for r in recs),
            "rounds": len(recs)}


_COLUMNS = ["method", "accuracy_pct", "best_accuracy_pct", "downlink_pct_flora", "downlink_params", "agg_ms_mean",
            "agg_ms_std", "rank_mean", "train_seconds", "rounds", "skipped"]


def _markdown(rows: list[dict], header: str) -> str:
    lines = [header, "",
             "| Method | Accuracy (%) | Downlink (% FLoRA) | Downlink (params / client / round) | "
             "Avg. agg. time (ms) | Mean rank |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['method']} | skipped: {r['skipped']} | | | | |")
            continue
        lines.append(f"| {r['method']} | {r['accuracy_pct']:.2f} | {r['downlink_pct_flora']:.1f} | "
                     f"{r['downlink_params']:,.0f} | {r['agg_ms_mean']:.1f} ± {r['agg_ms_std']:.1f} | "
                     f"{r['rank_mean']:.1f} |")
    return "\n".join(lines) + "\n"


def _plot(results: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for res in results:
        if res.get("skipped"):
            continue
        recs = res["rounds"]
        pts = [(r["round"], 100 * r["accuracy"]) for r in recs if r["accuracy"] is not None]
        ax1.plot(*zip(*pts), marker="o", label=res["method"])
        ax2.plot([r["round"] for r in recs], [r["downlink_pct_flora"] for r in recs], marker=".", label=res["method"])
    from matplotlib.ticker import FixedLocator, MaxNLocator

    # the rounds themselves as ticks (MaxNLocator(integer=True) still labels 0.96, 0.98, ... around one round)
    rounds = sorted({r["round"] for res in results if not res.get("skipped") for r in res["rounds"]})
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(FixedLocator(rounds) if len(rounds) <= 12 else MaxNLocator(integer=True))
        if len(rounds) == 1:
            ax.set_xlim(rounds[0] - 1, rounds[0] + 1)
    ax1.set(xlabel="round", ylabel="test accuracy (%)", title="accuracy")
    ax2.set(xlabel="round", ylabel="downlink per client (% of FLoRA)", title="downlink", yscale="log")
    ax1.legend(fontsize=7, loc="best")
    fig.tight_layout()
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=120)
    finally:
        plt.close(fig)
    _write(path, png.getvalue())
    return True


def write_results(out_dir: Path, results: list[dict], cfg: dict, run_info: dict) -> list[dict]:
    """Write results.json, rounds.csv, table.csv, table.md and plot.png; return the table rows."""
    out_dir = Path(out_dir)
    rows = [summarize(r) for r in results]
    write_json(out_dir / "results.json", {"config": cfg, "run": run_info, "table": rows, "methods": results})

    rounds = io.StringIO(newline="")
    w = csv.writer(rounds)
    w.writerow(["method", "round", "accuracy", "train_loss", "downlink_params_mean", "downlink_pct_flora",
                "agg_ms", "rank_mean", "train_seconds"])
    for res in results:
        for r in res["rounds"]:
            w.writerow([res["method"], r["round"], "" if r["accuracy"] is None else r["accuracy"],
                        r["train_loss"], r["downlink_params_mean"], r["downlink_pct_flora"], r["agg_ms"],
                        r["rank_mean"], r["train_seconds"]])
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=_COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    _write(out_dir / "rounds.csv", rounds.getvalue())
    _write(out_dir / "table.csv", table.getvalue())
    m, p, fed = cfg["model"], cfg["partition"], cfg["federated"]
    header = (f"Model {m['name']}, data {cfg['dataset'].get('name') or cfg['dataset'].get('path')}, "
              f"{fed['clients']} clients, partition {p['scheme']}"
              + (f"(alpha={p['alpha']})" if p["scheme"] == "dirichlet" else "")
              + f", ranks {fed['ranks']}, {fed['rounds']} rounds x {cfg['train']['steps']} steps; "
                f"accuracy at the last round; downlink and aggregation time averaged over rounds.")
    table_md = _markdown(rows, header)
    _write(out_dir / "table.md", table_md)
    _plot(results, out_dir / "plot.png")
    return rows
