"""The asv suite's own machinery, checked without running asv (fast, in the default run).

The suite imports and every benchmark class is well formed (what ``asv check`` checks),
the regression workflow exports a commit with the current measurement layer over it, and
its parser reads ``asv compare``'s table.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SUITE = ["bench_ablation", "bench_fidelity", "bench_presets", "bench_recompress"]
PREFIXES = ("time_", "track_", "peakmem_", "mem_", "timeraw_")


@pytest.mark.parametrize("name", SUITE)
def test_suite_modules_are_well_formed(name):
    module = importlib.import_module(f"benchmarks.{name}")
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if c.__module__ == module.__name__ and not c.__name__.startswith("_")]
    benchmarks = 0
    for cls in classes:
        methods = [m for m in dir(cls) if m.startswith(PREFIXES)]
        if not methods:
            continue
        params, names = getattr(cls, "params", []), getattr(cls, "param_names", [])
        assert len(params) == len(names), cls
        assert all(len(p) > 0 for p in params), cls
        extra = 1 if hasattr(cls, "setup_cache") else 0  # setup_cache's result comes first
        for m in methods:
            sig = inspect.signature(getattr(cls, m))
            assert len(sig.parameters) == 1 + extra + len(params), f"{cls.__name__}.{m}"
            if m.startswith("track_"):
                assert isinstance(getattr(getattr(cls, m), "unit", None), str), f"{cls.__name__}.{m} has no unit"
            benchmarks += 1
    assert benchmarks > 0
    # A module-level name with a benchmark prefix is collected by asv as a benchmark.
    assert not [n for n in vars(module) if n.startswith(PREFIXES)]


def test_parse_compare_reads_asv_tables():
    from benchmarks.regress import parse_compare

    table = """
| Change   | Before [aaaaaaaa] <main~1>   | After [bbbbbbbb] <main>   | Ratio   | Benchmark (Parameter)                          |
|----------|------------------------------|---------------------------|---------|------------------------------------------------|
| +        | 10.0±0.1ms                   | 21.0±0.2ms                | 2.10    | bench_recompress.RankSweep.time_aggregate('fraq', 16, 'batched') |
| -        | 4.00±0ms                     | 2.00±0ms                  | 0.50    | bench_ablation.Table4.time_recompress('fixed-gram') |
|          | 1000                         | 1000                      | 1.00    | bench_recompress.FlopModel.track_full('fraq', 'r', 16) |
| !        | 1.00±0s                      | failed                    | n/a     | bench_presets.Presets.time_aggregate('roberta-base', 'florist') |
"""
    rows = parse_compare(table)
    assert [m for m, _, _ in rows] == ["+", "-", "", "!"]
    assert rows[0] == ("+", "2.10", "bench_recompress.RankSweep.time_aggregate('fraq', 16, 'batched')")


def test_export_commit_overlays_the_measurement_layer(tmp_path):
    from benchmarks.regress import export_commit

    try:
        first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        pytest.skip("not a git checkout")
    export_commit(first, str(tmp_path))
    assert os.path.isfile(tmp_path / "fraq" / "__init__.py")
    for f in ("memory.py", "flops.py", "fidelity.py"):
        with open(os.path.join(ROOT, "fraq", "measure", f)) as a, open(tmp_path / "fraq" / "measure" / f) as b:
            assert a.read() == b.read()
