"""The runner's untimed experiments: measured after every timed one, by processes that each
claim the next chunk of points, every point once, the same results in any process."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from benchmarks import run, untimed
from benchmarks.experiments import DEFAULT, UNTIMED, get

TIMED_FIELD = re.compile(r"(^|_)(ms|us|seconds|s|time|times|peak|mib|rss|gflops_per_s|rate)($|_)")
"""A result field named for a time, rate or memory size: what a busy machine changes."""


def test_the_default_measures_every_timed_experiment_before_the_untimed_ones():
    kinds = [e in UNTIMED for e in DEFAULT]
    assert kinds == sorted(kinds) and any(kinds) and not all(kinds)


def test_the_recorded_untimed_results_hold_nothing_timed_or_sized(tiny_results):
    seen = 0
    for name in UNTIMED:
        for f in sorted((tiny_results / name).glob("*.json")):
            fields = json.loads(f.read_text())["result"]
            timed = [k for k in fields if TIMED_FIELD.search(k)]
            assert not timed, f"{f.name}: {timed}"
            seen += 1
    assert seen > 0


@pytest.mark.parametrize("size", ["tiny", "reduced", "paper"])
def test_chunks_cover_every_untimed_point_once_in_order_and_keep_a_group_and_method_together(size):
    points = run.plan(UNTIMED, size)
    parts = untimed.chunks(points)
    assert [k for part in parts for k in part] == [untimed.ident(p) for p in points]  # each once, in order
    assert all(part for part in parts)
    rank = [p for p in points if p[0] == "fig4_rank"]
    where = {k: i for i, part in enumerate(parts) for k in part}
    for name, module, c in rank:  # a group and method's ranks in one chunk (one dense decomposition)
        assert where[untimed.ident((name, module, c))] == where[untimed.ident(next(
            q for q in rank if q[2]["group"] == c["group"] and q[2]["method"] == c["method"]))]
    assert len({where[untimed.ident(p)] for p in points if p[0] == "fig1"}) == sum(p[0] == "fig1" for p in points)
    assert untimed.chunks(points) == parts  # the plan alone decides them: the same in every process


def test_a_chunk_is_claimed_once(tmp_path):
    assert untimed.claim(tmp_path, 3) and not untimed.claim(tmp_path, 3) and untimed.claim(tmp_path, 4)


def test_the_split_needs_a_cpu_a_core_for_each_and_enough_work(monkeypatch):
    points = [p for p in run.plan(UNTIMED, "paper")]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert untimed.untimed_processes(points, 1, torch.device("cpu")) == untimed.PROCESSES == 2
    assert untimed.untimed_processes(points, 2, torch.device("cpu")) == 1  # both cores are the run's threads
    assert untimed.untimed_processes(points, 1, torch.device("cuda")) == 1
    assert untimed.untimed_processes(points[:1], 1, torch.device("cpu")) == 1  # seconds: not worth an interpreter
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert untimed.untimed_processes(points, 1, torch.device("cpu")) == 1


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """Every experiment's measure replaced by one that records the order of its calls."""
    calls = []

    def fake(name):
        def measure(config, device):
            calls.append(name)
            return {"relative_error": [0.0]}
        return measure

    for name in ("table4", "fig4_cond", "fig1"):
        monkeypatch.setattr(get(name), "measure", fake(name))
    monkeypatch.chdir(tmp_path)
    return calls


def test_untimed_points_run_after_the_timed_ones_whatever_the_order_asked(recorded, tmp_path):
    done = run.run(tmp_path / "out", ("fig4_cond", "table4", "fig1"), size="tiny", progress=False, processes=1)
    first_untimed = next(i for i, n in enumerate(recorded) if n in UNTIMED)
    assert set(recorded[:first_untimed]) == {"table4"} and "table4" not in recorded[first_untimed:]
    assert done["measured"] == len(recorded) == len(run.plan(("fig4_cond", "table4", "fig1"), "tiny"))


def test_a_failed_helper_names_its_command_status_and_error(tmp_path):
    helper = untimed.Helper((), "tiny", tmp_path, 1, False, tmp_path, command=[
        sys.executable, "-c", "import sys; print('boom: no inputs', file=sys.stderr); sys.exit(3)"])
    helper.process.wait()
    text = str(untimed.HelperFailed(helper))
    helper.stop()
    assert "status 3" in text and "boom: no inputs" in text and "untimed" in text


def _results(d: Path) -> dict:
    return {str(f.relative_to(d)): json.loads(f.read_text()) for f in sorted(d.rglob("*.json"))}


@pytest.mark.integration
def test_two_processes_write_the_results_one_process_writes(tmp_path, monkeypatch):
    """The tiny fig4_cond and fig1 points measured in one process and in two (a fresh
    interpreter claiming chunks beside this one): the same files, configs and results, and
    the claims directory removed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the claims directory is made
    names = ("fig4_cond", "fig1")
    one = run.run(tmp_path / "one", names, size="tiny", progress=False, processes=1)
    slow = get("fig4_cond").measure

    def unhurried(config, device):  # this process slower than the helper: the helper claims chunks too
        time.sleep(0.3)
        return slow(config, device)

    monkeypatch.setattr(get("fig4_cond"), "measure", unhurried)
    two = run.run(tmp_path / "two", names, size="tiny", progress=True, processes=2)
    a, b = _results(tmp_path / "one"), _results(tmp_path / "two")
    assert a.keys() == b.keys() and len(a) == one["measured"] == two["measured"] == len(run.plan(names, "tiny"))
    for k in a:
        assert a[k]["config"] == b[k]["config"] and a[k]["result"] == b[k]["result"], k
    assert one["processes"] == 1 and two["processes"] == 2 and two.get("helped", 0) > 0  # a second interpreter
    assert not list((tmp_path / "tmp").iterdir())  # the claims directory removed
    # a rerun measures nothing: every point is there
    assert run.run(tmp_path / "two", names, size="tiny", progress=False, processes=2)["measured"] == 0
