"""The asv suite's own machinery, checked without running asv (fast, in the default run).

The suite imports and every benchmark class is well formed (what ``asv check`` checks),
no module of the benchmarks package exposes a module-level name asv would take for a
benchmark, ``FRAQ_BENCH_DEVICE`` is parsed and a missing device skips (asv's
NotImplementedError from ``setup``), the regression workflow exports a commit's tree as
it is, and its parser reads ``asv compare``'s table.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys

import pytest
import torch

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
            varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
            assert varargs or len(sig.parameters) == 1 + extra + len(params), f"{cls.__name__}.{m}"
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
| +        | 10.0±0.1ms                   | 21.0±0.2ms                | 2.10    | bench_recompress.Sweep.time_run('fraq', 'r', 16, 'batched') |
| -        | 4.00±0ms                     | 2.00±0ms                  | 0.50    | bench_ablation.Table4.time_run('fixed-gram') |
|          | 1000                         | 1000                      | 1.00    | bench_recompress.FlopModel.track_full('fraq', 'r', 16) |
| !        | 1.00±0s                      | failed                    | n/a     | bench_presets.Presets.time_aggregate('roberta-base', 'florist') |
"""
    rows = parse_compare(table)
    assert [m for m, _, _ in rows] == ["+", "-", "", "!"]
    assert rows[0] == ("+", "2.10", "bench_recompress.Sweep.time_run('fraq', 'r', 16, 'batched')")


def test_no_module_exposes_a_stray_benchmark():
    """asv imports every module under benchmarks/ and collects any public module-level
    function named time_*, track_*, ...: only the bench_* classes may define benchmarks."""
    import benchmarks

    for info in pkgutil.walk_packages(benchmarks.__path__, "benchmarks."):
        module = importlib.import_module(info.name)
        stray = [n for n, v in vars(module).items() if n.startswith(PREFIXES) and inspect.isfunction(v)]
        assert not stray, (info.name, stray)


@pytest.mark.parametrize("text,want", [("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1"), (" cpu ", "cpu")])
def test_device_parsing(monkeypatch, text, want):
    from benchmarks.device import bench_device

    monkeypatch.setenv("FRAQ_BENCH_DEVICE", text)
    assert bench_device() == torch.device(want)
    monkeypatch.delenv("FRAQ_BENCH_DEVICE")
    assert bench_device() == torch.device("cpu")
    assert bench_device(text) == torch.device(want)


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "CPU", "mps", ""])
def test_device_refuses_malformed_values(monkeypatch, text):
    from benchmarks.device import bench_device

    monkeypatch.setenv("FRAQ_BENCH_DEVICE", text or "cuda:-1")
    with pytest.raises(ValueError, match="FRAQ_BENCH_DEVICE"):
        bench_device()
    with pytest.raises(ValueError, match="--device"):
        bench_device(text or "cuda:-1")


def _missing_cuda() -> str:
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.device_count()}"  # one past the last device
    return "cuda"


def test_missing_device_skips_asv_setup(monkeypatch):
    """Every suite's setup raises asv's skip, NotImplementedError, naming the device."""
    from benchmarks import bench_ablation, bench_recompress

    device = _missing_cuda()
    monkeypatch.setenv("FRAQ_BENCH_DEVICE", device)
    with pytest.raises(NotImplementedError, match=device):
        bench_recompress.Sweep().setup("fraq", "r", 16, "batched")
    with pytest.raises(NotImplementedError, match=device):
        bench_recompress.Backends().setup("householder", "d768-r16")
    cache = bench_ablation.Table4().setup_cache()
    assert isinstance(cache, str) and device in cache
    with pytest.raises(NotImplementedError, match=device):
        bench_ablation.Table4().setup(cache, "library")


def test_missing_device_stops_the_runner(monkeypatch, capsys, tmp_path):
    from benchmarks import run

    monkeypatch.setenv("FRAQ_BENCH_DEVICE", _missing_cuda())
    assert run.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: device cuda") and "\n" not in err
    assert not list(tmp_path.iterdir())  # stopped before measuring anything


def test_export_commit_is_the_commit_alone(tmp_path):
    from benchmarks.regress import export_commit

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.strip()
        listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", head], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    export_commit(head, str(tmp_path))
    exported = sorted(os.path.relpath(os.path.join(d, f), tmp_path) for d, _, fs in os.walk(tmp_path) for f in fs)
    assert exported == sorted(listed)


# ----------------------------------------------------------------------------- layering


def _imports(path: str) -> set[str]:
    """Top-level modules a Python file (or a notebook's code cells) imports."""
    import ast
    import json

    text = open(path).read()
    if path.endswith(".ipynb"):
        text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code")
    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _files(folder: str, *suffixes: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, folder)) for f in fs
                  if f.endswith(suffixes))


# What taking a measurement looks like: clocks, the profiler, CUDA's counters, FLOP counting.
MEASURING = {"perf_counter", "process_time", "monotonic", "profiler", "profile", "cuda", "max_memory_allocated",
             "FlopCounterMode", "count_flops", "peak_memory", "gemm_rate", "timed", "synchronize"}


def _names(path: str) -> set[str]:
    """Names and attributes a Python file's code uses (not its strings or comments)."""
    import ast

    tree = ast.parse(open(path).read())
    return ({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)})


def test_analysis_only_reads_results():
    """analysis/ imports neither torch nor fraq nor the measurement layer, and calls no clock,
    profiler or counter: it reads result files and draws (issue 13)."""
    files = _files("analysis", ".py", ".ipynb")
    assert files
    for path in files:
        banned = {m for m in _imports(path) if m.split(".")[0] in ("torch", "fraq", "benchmarks", "time", "timeit")}
        assert not banned, f"{path} imports {sorted(banned)}"
        if path.endswith(".py"):
            found = _names(path) & MEASURING
            assert not found, f"{path} measures: {sorted(found)}"


def test_fraq_is_the_library_only():
    """fraq/ imports nothing from benchmarks/ or analysis/, holds no measurement package or
    experiment script, and uses no profiler or FLOP counter (issue 13)."""
    assert not os.path.exists(os.path.join(ROOT, "fraq", "measure"))
    assert not os.path.exists(os.path.join(ROOT, "fraq", "experiments"))
    for path in _files("fraq", ".py"):
        banned = {m for m in _imports(path) if m.split(".")[0] in ("benchmarks", "analysis")}
        banned |= {m for m in _imports(path) if m.startswith(("torch.profiler", "torch.utils.flop_counter"))}
        assert not banned, f"{path} imports {sorted(banned)}"
        found = _names(path) & {"profiler", "FlopCounterMode", "max_memory_allocated", "reset_peak_memory_stats"}
        assert not found, f"{path} uses {sorted(found)}"
