"""The resident-set cross-check (benchmarks.measure.rss) against the tensor peak it checks."""

from __future__ import annotations

import sys

import pytest

from benchmarks.experiments import table4
from benchmarks.measure import peak_memory, threads
from benchmarks.measure.rss import rss_growth

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self (Linux)")


@pytest.mark.integration
def test_the_resident_set_holds_at_least_the_tensor_peak():
    """Tensors the call writes are resident: a warm call's growth is at least its tensor peak
    (less 3% for pages a tensor's allocation rounds or leaves untouched), and a cold call's at
    least the warm one's (it also maps the libraries' code and buffers). The reduced point
    (some 27 MiB of tensors) keeps the peak far above a page."""
    point = next(p for p in table4.points("reduced") if p["variant"] == "adaptive-svd")
    with threads(1):
        peak = peak_memory(table4.call(point)).peak
    g = rss_growth("benchmarks.experiments.table4", point)
    assert peak > 16 * 2**20
    assert g["rss_warm"] >= 0.97 * peak, (g, peak)
    assert g["rss_cold"] >= g["rss_warm"] - 2**20


@pytest.mark.integration
def test_a_failing_measurement_names_the_experiment():
    with pytest.raises(RuntimeError, match="rss_growth\\('benchmarks.experiments.table4'\\)"):
        rss_growth("benchmarks.experiments.table4", {"variant": "no-such-variant"})


def test_no_resident_set_on_a_gpu():
    assert rss_growth("benchmarks.experiments.table4", {}, device="cuda") == {"rss_cold": None, "rss_warm": None}


@pytest.mark.integration
def test_a_fig3_point_carries_the_check_beside_its_tensor_peak():
    """The d sweep's batched points record both (the tiny size switches the check off, so the
    flow's tests stay short: switched on here for one point)."""
    from benchmarks.experiments import fig3

    point = next(p for p in fig3.points("tiny") if p["mode"] == "batched" and p["sweep"] == "d")
    out = fig3.metrics(dict(point, rss=True))
    assert out["rss_warm"] is not None and out["rss_cold"] >= out["rss_warm"] >= 0
    assert out["roof_s"] > 0 and out["gemm_bound_s"] > 0 and "rss_warm" not in fig3.metrics(point)


@pytest.mark.integration
def test_the_measuring_process_finds_the_suite_from_any_directory(tmp_path, monkeypatch):
    """asv imports the suite from its own working directory, with nothing on PYTHONPATH: the
    measuring process still imports ``benchmarks`` (a failure here raises, naming the error)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    point = next(p for p in table4.points("reduced") if p["variant"] == "adaptive-svd")
    g = rss_growth("benchmarks.experiments.table4", point)
    assert g["rss_warm"] is not None and g["rss_warm"] > 0


@pytest.mark.integration
def test_a_forked_child_measures_what_a_fresh_interpreter_measures():
    """The points run in children forked from one server that imported torch and computed
    nothing: a warm call's growth is the fresh interpreter's (``python -m
    benchmarks.measure.rss EXPERIMENT CONFIG``) to within 2 MiB (the allocator's arenas and
    a page table's pages; the reduced point's growth is some 27 MiB), and after a failed
    request the server goes on measuring."""
    import json
    import subprocess

    from benchmarks.measure.children import child_env
    from benchmarks.measure.rss import _MARK

    point = next(p for p in table4.points("reduced") if p["variant"] == "adaptive-svd")
    with pytest.raises(RuntimeError, match="rss_growth\\(.benchmarks.experiments.table4.\\): the measuring process failed: KeyError"):
        rss_growth("benchmarks.experiments.table4", {"variant": "no-such-variant"})
    forked = rss_growth("benchmarks.experiments.table4", point)
    done = subprocess.run([sys.executable, "-m", "benchmarks.measure.rss", "benchmarks.experiments.table4",
                           json.dumps(point)],
                          capture_output=True, text=True, env=child_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"),
                          check=True)
    fresh = json.loads(next(s for s in reversed(done.stdout.splitlines()) if s.startswith(_MARK))[len(_MARK):])
    assert abs(forked["rss_warm"] - fresh["rss_warm"]) <= 2 * 2**20, (forked, fresh)
    assert forked["rss_cold"] >= forked["rss_warm"] - 2**20
