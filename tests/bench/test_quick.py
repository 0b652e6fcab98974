"""Quick benchmark checks: the ``tiny`` points of the paper's figures, timed by pytest-benchmark.

Off in the default test run (``pytest -m "not slow" --benchmark-skip``). From the
repository root:

    pytest tests/bench --benchmark-only
    pytest tests/bench --benchmark-only --benchmark-histogram     # also writes benchmark_*.svg

and before/after a change:

    pytest tests/bench --benchmark-only --benchmark-save=before
    # ... change the code ...
    pytest tests/bench --benchmark-only --benchmark-compare --benchmark-compare-fail=median:30%

Every check is one point of :func:`benchmarks.experiments.fig3.points`,
:func:`benchmarks.experiments.clients.points` or :func:`benchmarks.experiments.table4.points`
at size :data:`benchmarks.sizes.QUICK`,
timed through the experiment's own ``call`` and grouped by figure (``--benchmark-group-by
group``, the default); ``extra_info`` holds the experiment's ``metrics`` (peak memory,
counted and analytic FLOPs, the error above the float64 optimum), the config and the
device, so the saved JSON has the same numbers the runner and asv record. The machine
(torch, BLAS, threads, CPU) is added to ``machine_info`` by ``tests/conftest.py``.
Threads are ``FRAQ_BENCH_THREADS`` (default 1) and the device ``FRAQ_BENCH_DEVICE``
(default cpu; a missing GPU skips every check with the reason), as in the other suites.
"""

from __future__ import annotations

import sys

import pytest
import torch

from benchmarks import cases
from benchmarks.experiments import clients, fig3, table4
from benchmarks.measure.timing import threads
from benchmarks.sizes import QUICK


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


def _check(benchmark, experiment, config, device, rounds: int) -> None:
    from benchmarks.measure.methods import get_method

    if "method" in config:
        try:
            get_method(config["method"])
        except NotImplementedError as exc:
            pytest.skip(str(exc))
    benchmark.group = config["figure"] + (f" {config['sweep']} sweep" if "sweep" in config else "")
    with threads(cases.THREADS):
        call = experiment.call(config, device)
        benchmark.pedantic(_synchronized(call, device), rounds=rounds, warmup_rounds=1)
        if benchmark.disabled:
            return
        benchmark.extra_info.update(config=config, device=str(device), threads=torch.get_num_threads(),
                                    **experiment.metrics(config, device))


@pytest.mark.parametrize("config", fig3.points(QUICK), ids=fig3.key)
def test_fig3(benchmark, config, device):
    """Fig. 3 and Table 5: every method at every point of the r and d sweeps."""
    _check(benchmark, fig3, config, device, rounds=config["repeats"])


@pytest.mark.parametrize("config", clients.points(QUICK), ids=clients.key)
def test_clients(benchmark, config, device):
    """Fig. 3's third axis: every method against the number of clients, past r = d."""
    _check(benchmark, clients, config, device, rounds=config["repeats"])


@pytest.mark.parametrize("config", table4.points(QUICK), ids=table4.key)
def test_table4(benchmark, config, device):
    """Table 4: the ablation's variants and the library call."""
    _check(benchmark, table4, config, device, rounds=config["repeats"])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "--benchmark-only", *sys.argv[1:]]))
