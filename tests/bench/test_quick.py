"""Quick benchmark checks: the ``tiny`` points of the paper's figures, timed by pytest-benchmark.

Off in the default test run (``pytest -m "not slow" --benchmark-skip``). From the
repository root:

    pytest tests/bench --benchmark-only
    pytest tests/bench --benchmark-only --benchmark-group-by=param:method   # or param:experiment, param:d, ...
    pytest tests/bench --benchmark-only --benchmark-histogram     # also writes benchmark_*.svg

and before/after a change (``make bench-pytest SAVE=before``, then ``make
bench-pytest-compare``; the statistic and threshold: docs/benchmarks.md):

    pytest tests/bench --benchmark-only --benchmark-min-rounds=50 --benchmark-save=before
    # ... change the code ...
    pytest tests/bench --benchmark-only --benchmark-min-rounds=50 --benchmark-json=new.json
    python -m benchmarks.pytest_compare --new new.json    # each check over test_calibration, in its own run

Every check is one point of an experiment of :data:`EXPERIMENTS` at size
:data:`benchmarks.sizes.QUICK`, timed through the experiment's own ``call``. Rounds,
iterations, warm-up and timer are pytest-benchmark's own (its calibration and
``--benchmark-min-rounds``, ``--benchmark-max-time``, ``--benchmark-warmup``,
``--benchmark-timer``): nothing here fixes a count. The checks are one test,
parametrized by named parameters: ``experiment`` and every field of the experiment's
configs that varies between its points (``method``, ``sweep``, ``mode``, ``d``, ``r``,
``variant``, ...; :data:`PARAMS`; None where an experiment has no such field), so
``--benchmark-group-by=param:NAME`` groups by any of them; the default grouping is by
figure (``group``). ``extra_info`` holds the experiment's ``metrics`` (peak memory,
counted and analytic FLOPs, the error above the float64 optimum), the config and the
device, so the saved JSON has the same numbers the runner and asv record. The machine
(torch, BLAS, threads, CPU) is added to ``machine_info`` by ``tests/conftest.py``.
Threads are ``FRAQ_BENCH_THREADS`` (default 1) and the device ``FRAQ_BENCH_DEVICE``
(default cpu; a missing GPU skips every check with the reason), as in the other suites.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from benchmarks import cases, experiments
from benchmarks.measure.timing import threads
from benchmarks.sizes import QUICK

EXPERIMENTS = ("fig3", "table4", "clients")
"""The experiments checked here, each with ``call`` and ``metrics`` (as the asv sweeps use
them). A new one is a name here; if its points vary a field no other experiment has, add
that field to :func:`test_point`'s parameters (``test_params_name_every_varying_field``
says which)."""


def varying_fields(names=EXPERIMENTS, size: str = QUICK) -> list[str]:
    """``experiment`` and every config field that varies between one experiment's points, in
    order of first appearance: the named parameters the points are told apart by."""
    out = ["experiment"]
    for name in names:
        points = experiments.get(name).points(size)
        for field in points[0]:
            if field not in out and len({json.dumps(p.get(field), default=str) for p in points}) > 1:
                out.append(field)
    return out


PARAMS = ("experiment", "sweep", "method", "mode", "d", "D", "r", "variant", "K")
""":func:`test_point`'s parameters: :func:`varying_fields` of :data:`EXPERIMENTS`."""


def quick_points() -> dict[tuple, dict]:
    """Every checked point: its values of :data:`PARAMS` -> its config."""
    out = {}
    for name in EXPERIMENTS:
        for config in experiments.get(name).points(QUICK):
            out[tuple(name if p == "experiment" else config.get(p) for p in PARAMS)] = config
    return out


POINTS = quick_points()


@pytest.fixture(scope="module")
def device() -> torch.device:
    """``FRAQ_BENCH_DEVICE`` (default cpu), as every suite; a device this machine does not
    have skips every check with the reason, a malformed value fails with a ValueError."""
    from benchmarks.device import DeviceUnavailable, checked

    try:
        return checked()
    except DeviceUnavailable as exc:
        pytest.skip(str(exc))


def _synchronized(call, device):
    if device.type != "cuda":
        return call

    def run():
        out = call()
        torch.cuda.synchronize(device)
        return out

    return run


def _id(values: tuple) -> str:
    experiment = values[0]
    return f"{experiment}-{experiments.get(experiment).key(POINTS[values])}"


@pytest.mark.parametrize(",".join(PARAMS), list(POINTS), ids=list(map(_id, POINTS)))
def test_point(benchmark, device, experiment, sweep, method, mode, d, D, r, variant, K):
    """One point of a figure or table, timed with pytest-benchmark's own calibration."""
    from benchmarks.measure.methods import get_method

    config = POINTS[(experiment, sweep, method, mode, d, D, r, variant, K)]
    module = experiments.get(experiment)
    if "method" in config:
        try:
            get_method(config["method"])
        except NotImplementedError as exc:
            pytest.skip(str(exc))
    benchmark.group = config["figure"] + (f" {config['sweep']} sweep" if "sweep" in config else "")
    with threads(cases.THREADS):
        benchmark(_synchronized(module.call(config, device), device))
        if benchmark.disabled:
            return
        benchmark.extra_info.update(config=config, device=str(device), threads=torch.get_num_threads(),
                                    **module.metrics(config, device))


@pytest.mark.parametrize(",".join(PARAMS), [("calibration",) + (None,) * (len(PARAMS) - 1)], ids=["calibration"])
def test_calibration(benchmark, device, experiment, sweep, method, mode, d, D, r, variant, K):
    """The machine's speed in this run: a fixed float32 product (256 x 256 x 256) at the
    suite's threads on the suite's device (``FRAQ_BENCH_DEVICE``; skipped with the checks
    where it is missing), no project code in it. ``benchmarks.pytest_compare`` divides every
    check's minimum by this one's, so two runs are compared as ratios taken in each run. It
    has every parameter of :func:`test_point` (None but ``experiment``), so any
    ``--benchmark-group-by=param:NAME`` groups it too."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(256, 256, generator=g).to(device) for _ in range(2))
    benchmark.group = "calibration"
    with threads(cases.THREADS):
        benchmark(_synchronized(lambda: torch.mm(a, b), device))


def test_the_calibration_runs_on_the_bench_device():
    """The calibration takes the suite's ``device`` fixture: it times the device the checks
    run on, and skips with them where that device is missing."""
    import inspect

    assert "device" in inspect.signature(test_calibration).parameters


def test_params_name_every_varying_field():
    """The checks' parameters are exactly the fields that tell the points apart (a point
    needing another field would collide with one already listed)."""
    assert tuple(varying_fields()) == PARAMS, f"test_point's parameters should be {varying_fields()}"
    assert len(POINTS) == sum(len(experiments.get(n).points(QUICK)) for n in EXPERIMENTS)


def test_the_documented_grouping_groups_every_check(tmp_path):
    """The grouping of the documented command (docs/benchmarks.md: ``pytest tests/bench
    --benchmark-only --benchmark-group-by=param:method``) applied, by pytest-benchmark's own
    hook, to every benchmark pytest collects under tests/bench (collection only: nothing is
    timed). A check without the parameter crashed the run at its end."""
    import os
    import re
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "benchmarks.md")) as f:
        documented = re.findall(r"pytest tests/bench --benchmark-only --benchmark-group-by=(\S+)", f.read())
    assert documented, "docs/benchmarks.md documents no --benchmark-group-by command"
    (tmp_path / "grouping_probe.py").write_text(
        "import json, os\n"
        "from pytest_benchmark.plugin import pytest_benchmark_group_stats\n"
        "def pytest_collection_finish(session):\n"
        "    benches = [dict(name=i.name, fullname=i.nodeid, group=None, param=None,\n"
        "                    params=dict(i.callspec.params) if hasattr(i, 'callspec') else None)\n"
        "               for i in session.items if 'benchmark' in getattr(i, 'fixturenames', ())]\n"
        "    out = {}\n"
        "    for group_by in os.environ['GROUP_BY'].split(';'):\n"
        "        out[group_by] = [[k, len(v)] for k, v in pytest_benchmark_group_stats(session.config, benches, group_by)]\n"
        "    out['count'] = len(benches)\n"
        "    open(os.environ['GROUPS_OUT'], 'w').write(json.dumps(out, default=str))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root, os.environ.get("PYTHONPATH", "")]),
           "GROUP_BY": ";".join(documented), "GROUPS_OUT": str(tmp_path / "groups.json")}
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/bench", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "grouping_probe", "--benchmark-only"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    groups = json.loads((tmp_path / "groups.json").read_text())
    assert groups["count"] == len(POINTS) + 1  # every check and the calibration
    for group_by in documented:
        assert sum(n for _, n in groups[group_by]) == groups["count"], groups[group_by]


@pytest.mark.slow
@pytest.mark.parametrize("group_by", ["param:method", "param:experiment,param:d"])
def test_pytest_benchmark_drives_the_checks(tmp_path, group_by):
    """The checks as pytest-benchmark's users drive them: ``--benchmark-group-by=param:NAME``
    groups them (one ``config`` parameter crashed it), and the rounds come from
    ``--benchmark-min-rounds`` (no fixed count in the test)."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "--benchmark-only",
                           "-k", "fig3-r-fraq-batched or fig3-d-florist-unbatched-d32 or table4-library",
                           f"--benchmark-group-by={group_by}", "--benchmark-min-rounds=13", "--benchmark-max-time=0.001",
                           f"--benchmark-json={out}"], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    saved = json.loads(out.read_text())["benchmarks"]
    assert len(saved) == 4
    assert all(tuple(b["params"]) == PARAMS and b["stats"]["rounds"] >= 13 for b in saved)
    first = group_by.split(",")[0].split(":")[1]
    assert {f"{first}={b['params'][first]}" for b in saved} == {
        line.split("'")[1].split(" ")[0] for line in done.stdout.splitlines() if line.strip("-").startswith(" benchmark '")}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "--benchmark-only", *sys.argv[1:]]))
