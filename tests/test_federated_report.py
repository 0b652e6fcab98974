"""The federated analysis compares like with like and writes its files whole: a mix of settings
within a variant is refused naming the keys, accuracy intervals stay in [0, 100], a figure that
cannot be written ends the run with one ``error:`` line and keeps the old one; the committed
report of a published data set (``analysis.federated_report``) has its parts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")
pytest.importorskip("scipy")

from analysis.sections import federated  # noqa: E402
from analysis.resultset import MixedResults, load  # noqa: E402
from fraq._results import write_result  # noqa: E402
from fraq.federated.config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("flora", "fedex-lora", "flexlora", "florist", "fraq:tau=0.95")


def _rounds(acc: list[float], down: float) -> list[dict]:
    return [{"round": t + 1, "accuracy": a / 100, "train_loss": 1.0, "train_seconds": 1.0, "agg_ms": 2.0,
             "downlink_params": [10], "downlink_params_mean": 10.0, "downlink_pct_flora": down, "ranks": {},
             "rank_mean": 8.0, "reinitialize": False, "info": {}} for t, a in enumerate(acc)]


def write_points(out: Path, *, variants=None, seeds=(0, 1, 2), over=None, methods=METHODS, rounds=2,
                 acc=lambda m, v, s, t: 40 + 10 * t + s + (5 if m.startswith("fraq") else 0)) -> Path:
    """Result files as ``python -m fraq.federated`` writes them, for the banking77 setting
    (``over``: dotted overrides per variant, e.g. another ``federated.rounds`` for one seed)."""
    cfg = load_config("banking77", {"federated.rounds": rounds})
    for v, alpha in (variants or {"dir0.1": 0.1, "dir0.02": 0.02}).items():
        for s in seeds:
            for m in methods:
                run = cfg.override({"partition.alpha": alpha, "seed": s, **(over or {}).get((v, s), {})})
                R = run.federated.rounds
                down = 100.0 if m == "flora" else 110.0 if m == "fedex-lora" else 10.0
                res = {"method": m, "rounds": _rounds([acc(m, v, s, t) for t in range(R)], down),
                       "wall_seconds": 3.0}
                write_result(out / "results", "federated", f"{v}-{m}-seed{s}",
                             {"variant": v, "method": m, **run.to_record(run=True)}, res)
    return out


@pytest.mark.integration
def test_a_variant_mixing_settings_is_refused_naming_the_keys(tmp_path):
    write_points(tmp_path, over={("dir0.1", 2): {"federated.rounds": 3, "train.lr": 0.01}})
    with pytest.raises(MixedResults) as exc:
        load(tmp_path / "results")
    msg = str(exc.value)
    assert "variant dir0.1 mixes settings" in msg and "federated.rounds" in msg and "train.lr" in msg
    assert "dir0.02" not in msg  # the other variant is one setting
    r = subprocess.run([sys.executable, "-m", "analysis.reproduce", "--out", str(tmp_path), "--no-pdf"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "federated.rounds" in lines[0]
    assert not (tmp_path / "report.md").exists()


def test_variants_may_differ_and_are_named_apart(tmp_path):
    from analysis.sections.federated import titles

    write_points(tmp_path)
    df = load(tmp_path / "results")["federated"]
    vs = federated.variants(federated.runs(df), df)
    assert vs == ["dir0.1", "dir0.02"]  # the milder partition first, as the paper's columns
    assert titles(df, vs) == {"dir0.1": "dir0.1: Dir(0.1)", "dir0.02": "dir0.02: Dir(0.02)"}


def test_accuracy_intervals_stay_inside_0_100():
    rows = [{"variant": "v", "method": "flora", "seed": s, "skipped": None, "accuracy": a, "downlink_pct_flora": 100.0,
             "agg_ms": [1.0], "rank_mean": 8.0, "rounds": 1} for s, a in enumerate([99.0, 100.0, 100.0])]
    rows += [{**r, "method": "florist", "accuracy": a, "downlink_pct_flora": 5.0}
             for r, a in zip(rows, [0.0, 0.0, 1.5])]
    mean, lo, hi = federated.interval([99.0, 100.0, 100.0])
    assert hi > 100  # the plain t-interval leaves [0, 100] here: the case is a real one
    t = federated.table(pd.DataFrame(rows), "v").set_index("Method")["Accuracy (%)"]
    for text in t:
        lo_txt, hi_txt = text.rpartition("[")[2].rstrip("]").split(",")
        assert 0.0 <= float(lo_txt) <= float(hi_txt) <= 100.0, text
    assert t["FLoRA"].endswith("100.00]") and t["FLoRIST"].rpartition("[")[2].startswith("0.00,")


def _limited(limit_bytes: int) -> callable:
    def set_limit():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return set_limit


@pytest.mark.integration
def test_a_figure_that_cannot_be_written_ends_the_run_and_keeps_the_old_one(tmp_path):
    write_points(tmp_path)
    figs = tmp_path / "figures"
    figs.mkdir()
    old = figs / "federated_accuracy.png"
    old.write_bytes(b"the old figure")
    # the file-size limit (ulimit -f) lets the small files through and stops the figure
    r = subprocess.run([sys.executable, "-m", "analysis.reproduce", "--out", str(tmp_path), "--no-pdf"],
                       cwd=ROOT, capture_output=True, text=True, preexec_fn=_limited(16 * 1024))
    assert r.returncode == 1, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip() and "Warning" not in x and not x.startswith(" ")]
    assert len(lines) == 1 and lines[0].startswith("error: cannot write ") and "federated_accuracy.png" in lines[0]
    assert old.read_bytes() == b"the old figure"
    assert sorted(p.name for p in figs.iterdir()) == ["federated_accuracy.png"]  # no temporary left
    assert not (tmp_path / "report.md").exists()


@pytest.mark.integration
def test_the_published_report_has_its_parts(tmp_path):
    from analysis.federated_report import main

    write_points(tmp_path / "run", rounds=2)
    write_points(tmp_path / "long", rounds=8, variants={"dir0.1": 0.1}, seeds=(0,),
                 acc=lambda m, v, s, t: 40 + 10 * min(t, 1) + 2 * max(t - 1, 0) + s + (5 if m.startswith("fraq") else 0))
    out = tmp_path / "docs" / "banking77"
    assert main(["--results", str(tmp_path / "run"), "--long", str(tmp_path / "long"), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "Casanueva" in report and "CC BY 4.0" in report
    assert "where the paper trains 6,000 (30 rounds of 200)" in report
    assert "## dir0.1: Dir(0.1)" in report and "## dir0.02: Dir(0.02)" in report
    assert report.index("## dir0.1") < report.index("## dir0.02")
    # the paper's Table 1 beside ours: Banking77 Dir(0.1) FLoRA 88.30, FRAQ(0.95) downlink 48.7
    assert "| 88.30 |" in report and "| 48.7 |" in report and "| 87.22 |" in report
    assert "**56.00**" in report  # FRAQ best among the compressed methods: 40 + 10 + 5 + seed, over seeds 0, 1, 2
    assert "close to FLoRA" in report and "above FLoRIST" in report
    # the schedule comparison: round 2 against round 8 on seed 0, the scaled run's own value beside it
    row = next(x for x in report.splitlines() if x.startswith("| FLoRA |") and "+12.00" in x)
    assert row.split("|")[2].strip() == "50.00" and row.split("|")[5].strip() == "50.00"
    readme = (out / "README.md").read_text()
    assert "AMD" in readme or "Intel" in readme or "Machine:" in readme
    assert "load average" in readme and "Commit:" in readme and "min from the first point" in readme
    assert (out / "figures" / "federated_accuracy.png").stat().st_size > 1000
    assert not list(out.rglob(".*tmp-*"))


def test_a_federated_run_is_reported_as_one(tmp_path):
    """``analysis.reproduce`` on a federated run's results: titled as a federated report,
    with no server-side GPU section (its claims are not the run's subject)."""
    import matplotlib

    matplotlib.use("Agg")
    from analysis.reproduce import build

    write_points(tmp_path, rounds=2)
    text = build(tmp_path, pdf=False).read_text()
    assert text.startswith("# FRAQ federated fine-tuning") and "server-side" not in text.split("\n", 1)[0]
    assert "## GPU results" not in text
    head = text.split("## Figures")[0]  # the federated head, not the server-side one's timings and GH200
    assert "compare our accuracies with the paper's claims" in head
    assert "round-robin" not in head and "GH200" not in head and "sign-test" not in head
    # the schedule against the paper's: a few steps of LoRA on one layer, against 6,000 on every layer
    assert re.search(r"\d+ local steps a client in all, where the paper trains 6,000 \(30 rounds of 200\) with LoRA on "
                     r"every layer", text) and "LoRA on layer 5" in text


def test_the_readme_names_no_committed_results_and_links_the_docs_from_where_it_is(tmp_path):
    """The README of ``analysis.federated_report`` is a user's run's as much as the published one's: not
    "committed results"; its link to docs/federated.md is relative to where it is written, and resolves."""
    from analysis.federated_report import FEDERATED_DOC, _doc_link, _readme

    write_points(tmp_path / "run", rounds=2)
    df = load(tmp_path / "run" / "results")["federated"]
    for out in (tmp_path / "mine", ROOT / "docs" / "results" / "federated" / "banking77"):
        readme = _readme(df, None, "banking77", out)
        assert "committed" not in readme.lower() and readme.startswith("# BANKING77: federated fine-tuning\n")
        link = _doc_link(out)
        assert f"[docs/federated.md]({link}#the-published-data-sets)" in readme
        assert (out / link).resolve() == FEDERATED_DOC and FEDERATED_DOC.is_file()
    assert _doc_link(ROOT / "docs" / "results" / "federated" / "banking77") == "../../../federated.md"
    assert "## The published data sets" in FEDERATED_DOC.read_text()


def test_the_server_share_is_the_aggregation_over_the_whole_round(tmp_path):
    """Per round, agg_ms / (1000 train_seconds + agg_ms), averaged over rounds and seeds, hand
    derived: rounds of (train 0.995 s, agg 5 ms) and (0.98 s, 20 ms) are 0.5% and 2%, mean
    1.25%; a round without a training time counts for nothing (not as 100%); the note names
    the machine from the result files."""
    write_points(tmp_path, methods=("flora", "fraq:tau=0.95"), variants={"dir0.1": 0.1})
    df = load(tmp_path / "results")["federated"]
    for i, r in df.iterrows():
        recs = [dict(x) for x in r["rounds"]]
        if r["method"] == "fraq:tau=0.95":
            recs[0].update(train_seconds=0.995, agg_ms=5.0)
            recs[1].update(train_seconds=0.98, agg_ms=20.0)
        else:
            recs[0].update(train_seconds=None, agg_ms=3.0)  # a runtime that does not time training
            recs[1].update(train_seconds=0.997, agg_ms=3.0)
        df.at[i, "rounds"] = recs
    runs = federated.runs(df)
    assert federated.server_share({"train_seconds": 0.995, "agg_ms": 5.0}) == pytest.approx(0.005, rel=1e-12)
    t = federated.table(runs, "dir0.1").set_index("Method")
    assert t.loc["FRAQ (τ=0.95)", "Server share (%)"] == "1.25"  # (0.5 + 2) / 2
    assert t.loc["FLoRA", "Server share (%)"] == "0.3"  # the timed round alone: 3 / 1000
    note = federated.share_note(df)
    cpu = df["machine.cpu"].dropna().iloc[0]
    assert f"on {cpu}" in note and "torch thread" in note
