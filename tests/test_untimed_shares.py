"""The runner's untimed experiments: measured after every timed one, split between processes
in contiguous shares of their cost, every point once, the same results in any process."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import run
from benchmarks.experiments import DEFAULT, UNTIMED, cost, get

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


def _points(n_experiments=("fig4_cond", "fig4_rank")):
    return run.plan(n_experiments, "reduced")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_shares_are_contiguous_cover_every_point_once_and_balance_the_cost(n):
    points = _points()
    parts = run.shares(points, n)
    assert len(parts) == n
    assert [p for part in parts for p in part] == points  # contiguous, in order, each once
    costs = [[cost(name, c) for name, _, c in part] for part in parts]
    total, largest = sum(map(sum, costs)), max(max(c) for c in costs if c)
    for c in costs:  # each share within one point's cost of an equal split
        assert abs(sum(c) - total / n) <= largest


def test_the_split_needs_a_cpu_a_core_for_each_and_enough_work(monkeypatch):
    untimed = [p for p in run.plan(UNTIMED, "paper")]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert run.untimed_processes(untimed, 1, torch.device("cpu")) == run.PROCESSES == 2
    assert run.untimed_processes(untimed, 2, torch.device("cpu")) == 1  # both cores are the run's threads
    assert run.untimed_processes(untimed, 1, torch.device("cuda")) == 1
    assert run.untimed_processes(untimed[:1], 1, torch.device("cpu")) == 1  # seconds: not worth an interpreter
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert run.untimed_processes(untimed, 1, torch.device("cpu")) == 1


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


def test_a_failed_share_names_its_command_status_and_error(tmp_path):
    share = run._Share(2, [], [], [sys.executable, "-c", "import sys; print('boom: no inputs', file=sys.stderr); "
                                   "sys.exit(3)"], dict(os.environ), tmp_path)
    share.process.wait()
    text = str(run.ShareFailed(share))
    share.stop()
    assert "share 2" in text and "status 3" in text and "boom: no inputs" in text


def test_share_is_parsed_and_refused_when_malformed(capsys):
    assert run._share_arg("2/2") == (2, 2)
    for bad in ("2", "0/2", "3/2", "a/b"):
        with pytest.raises(Exception, match="--share"):
            run._share_arg(bad)


def _results(d: Path) -> dict:
    return {str(f.relative_to(d)): json.loads(f.read_text()) for f in sorted(d.rglob("*.json"))}


@pytest.mark.integration
def test_two_processes_write_the_results_one_process_writes(tmp_path, monkeypatch):
    """The tiny fig4_cond and fig1 points measured in one process and split between two (a
    fresh interpreter measuring the second share): the same files, configs and results."""
    monkeypatch.chdir(tmp_path)
    names = ("fig4_cond", "fig1")
    one = run.run(tmp_path / "one", names, size="tiny", progress=False, processes=1)
    two = run.run(tmp_path / "two", names, size="tiny", progress=True, processes=2)
    a, b = _results(tmp_path / "one"), _results(tmp_path / "two")
    assert a.keys() == b.keys() and len(a) == one["measured"] == two["measured"] == len(run.plan(names, "tiny"))
    for k in a:
        assert a[k]["config"] == b[k]["config"] and a[k]["result"] == b[k]["result"], k
    assert one["processes"] == 1 and two["processes"] == 2  # a second interpreter measured a share
    # a rerun measures nothing: every point of both shares is there
    assert run.run(tmp_path / "two", names, size="tiny", progress=False, processes=2)["measured"] == 0
