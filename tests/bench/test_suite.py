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

SUITE = ["bench_ablation", "bench_clients", "bench_fidelity", "bench_host", "bench_presets", "bench_recompress"]
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


def _stats(n):
    return {"repeat": n, "ci_99_a": 0.9, "ci_99_b": 1.1, "q_25": 0.95, "q_75": 1.05, "number": 1}


def test_regress_verdicts_use_asv_statistics_and_need_samples():
    """A timing beyond the factor is a regression only with several samples on both sides
    that asv's test finds different; with one sample it is "not enough samples"."""
    from benchmarks.regress import verdicts

    many_fast = [0.010 + 0.0001 * i for i in range(10)]
    many_slow = [0.030 + 0.0001 * i for i in range(10)]
    t = "bench_recompress.RankSweep.time_run('fraq', '16', 'batched')"
    before = {t: (0.0105, _stats(10), many_fast), "bench_recompress.RankSweep.track_flops(x)": (1e9, None, None),
              "bench_ablation.Table4.time_run('library')": (0.010, _stats(1), [0.010]),
              "bench_presets.Presets.time_aggregate(a)": (1.0, _stats(5), [1.0] * 5)}
    after = {t: (0.0305, _stats(10), many_slow), "bench_recompress.RankSweep.track_flops(x)": (2e9, None, None),
             "bench_ablation.Table4.time_run('library')": (0.030, _stats(1), [0.030]),
             "bench_presets.Presets.time_aggregate(a)": (None, None, None)}
    got = {name: verdict for verdict, name, _ in verdicts(before, after, 1.5)}
    assert got[t] == "regression"
    assert got["bench_ablation.Table4.time_run('library')"] == "not enough samples"
    assert got["bench_recompress.RankSweep.track_flops(x)"] == "regression"  # deterministic: the factor decides
    assert got["bench_presets.Presets.time_aggregate(a)"] == "now failing"
    # within the factor, or the same samples: no verdict of change
    same = {t: (0.0105, _stats(10), many_fast)}
    assert verdicts(same, same, 1.5) == [("same", t, 1.0)]


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
        bench_recompress.RankSweep().setup(bench_recompress.RankSweep().setup_cache(), "fraq", 16, "batched")
    with pytest.raises(NotImplementedError, match=device):
        bench_recompress.HiddenSweep().setup(bench_recompress.HiddenSweep().setup_cache(), "fraq", 768, "batched")
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


def _asv_python_of(python: str) -> str:
    code = "from benchmarks.regress import asv_python; print(asv_python())"
    return subprocess.run([python, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT)).stdout.strip()


def test_every_asv_recording_names_one_environment():
    """asv names an existing environment after the interpreter's path. The Makefile's asv
    targets all pass one ``--python``, and benchmarks.regress run by any alias of the venv's
    interpreter (``python``, ``python3``: ``.venv/bin/asv``'s shebang) passes the same one,
    so they record one history."""
    pytest.importorskip("asv")
    import re

    from benchmarks.regress import env_name

    try:
        made = subprocess.run(["make", "-n", "bench", "bench-quick", "asv-check"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("make is not available")
    pythons = set(re.findall(r"--python=(\S+)", made))
    assert len(pythons) == 1 and "--python=same" not in made, made
    make_python = pythons.pop()
    assert make_python == os.path.join(ROOT, ".venv", "bin", "python")
    aliases = [p for p in (os.path.join(sys.prefix, "bin", n) for n in ("python", "python3")) if os.path.exists(p)]
    assert len(aliases) == 2, aliases
    assert {_asv_python_of(p) for p in aliases} == {os.path.join(sys.prefix, "bin", "python")}
    # the two aliases are two environments to asv: the reason for passing one explicitly
    assert env_name(aliases[0]) != env_name(aliases[1])
    if os.path.exists(make_python):
        assert _asv_python_of(make_python) == make_python


def test_regress_counts_a_commit_recorded_only_in_its_environment(tmp_path):
    """A commit recorded under another environment name is still missing for this one."""
    pytest.importorskip("asv")
    from asv.results import get_filename

    from benchmarks.regress import env_name, recorded

    sha = "0123456789abcdef0123456789abcdef01234567"
    mine, other = env_name(), env_name(sys.prefix + "/bin/python3")
    path = tmp_path / get_filename("host", sha, other)
    path.parent.mkdir()
    path.write_text("{}")
    assert not recorded("host", sha, mine, results=str(tmp_path))
    assert recorded("host", sha, other, results=str(tmp_path))


def test_regress_records_only_what_its_environment_misses(monkeypatch, tmp_path, capsys):
    """Of two commits, the older recorded only under another interpreter's name and the newer
    in regress's environment, regress records the older alone, naming its one interpreter,
    and still finds the newer recorded after it."""
    pytest.importorskip("asv")
    from types import SimpleNamespace

    from asv.results import get_filename

    from benchmarks import regress

    try:
        shas = regress._git("rev-list", "--first-parent", "-n", "2", "HEAD").split()[::-1]
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    if len(shas) < 2:
        pytest.skip("fewer than 2 commits")
    mine, other = regress.env_name(), regress.env_name(sys.prefix + "/bin/python3")
    for sha, env in ((shas[0], other), (shas[1], mine)):
        path = tmp_path / get_filename("host", sha, env)
        path.parent.mkdir(exist_ok=True)
        path.write_text("{}")
    calls = []
    monkeypatch.setattr(regress, "RESULTS", str(tmp_path))
    monkeypatch.setattr(regress, "_asv", lambda *a, env=None, capture=False: calls.append(a)
                        or SimpleNamespace(returncode=0))
    regress.main(["--commits", "2", "--branch", "HEAD", "--machine", "host", "--quick"])
    runs = [c for c in calls if c[0] == "run"]
    assert len(runs) == 1 and shas[0] in runs[0] and f"--python={regress.asv_python()}" in runs[0], runs
    assert f"{shas[1][:8]}: already recorded on host in {mine}" in capsys.readouterr().out


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


TORCH_FREE = ("fraq.methods", "fraq._sign_test", "fraq._archive", "fraq._json", "fraq._fields", "fraq._leftovers",
              "fraq._defaults")
"""The library modules analysis/ may import: the standard library alone (test_analysis_only_reads_results)."""


def test_analysis_only_reads_results():
    """analysis/ imports neither torch nor fraq (but its method grammar, ``fraq.methods``, the
    sign test's ranks, ``fraq._sign_test``, the verified archive reader, ``fraq._archive``,
    strict JSON's ``fraq._json``, the fields each experiment's result holds, ``fraq._fields``,
    the leftovers of killed runs, ``fraq._leftovers``, and the devices' defaults, ``fraq._defaults``,
    which import no torch: one grammar, one decision rule, one reader, one writer, one table of
    fields, one cleaner and one table of defaults everywhere)
    nor the measurement layer, and calls no clock, profiler or counter: it reads result files
    and draws."""
    files = _files("analysis", ".py", ".ipynb")
    assert files
    for path in files:
        banned = {m for m in _imports(path) if m.split(".")[0] in ("torch", "fraq", "benchmarks", "time", "timeit")
                  and m not in TORCH_FREE}
        assert not banned, f"{path} imports {sorted(banned)}"
        if path.endswith(".py"):
            found = _names(path) & MEASURING
            assert not found, f"{path} measures: {sorted(found)}"


@pytest.mark.integration
def test_fraq_is_the_library_only():
    """fraq/ imports nothing from benchmarks/ or analysis/, holds no measurement package or
    experiment script, and uses no profiler or FLOP counter."""
    assert not os.path.exists(os.path.join(ROOT, "fraq", "measure"))
    assert not os.path.exists(os.path.join(ROOT, "fraq", "experiments"))
    for path in _files("fraq", ".py"):
        banned = {m for m in _imports(path) if m.split(".")[0] in ("benchmarks", "analysis")}
        banned |= {m for m in _imports(path) if m.startswith(("torch.profiler", "torch.utils.flop_counter"))}
        assert not banned, f"{path} imports {sorted(banned)}"
        found = _names(path) & {"profiler", "FlopCounterMode", "max_memory_allocated", "reset_peak_memory_stats"}
        assert not found, f"{path} uses {sorted(found)}"


# ----------------------------------------------------------------------------- one definition per figure


@pytest.mark.integration
def test_asv_runner_and_pytest_benchmark_measure_the_same_points():
    """The asv sweep parameters are exactly the runner's fig3 points at asv's size, the
    pytest-benchmark checks are its points at the quick size, and one point measured through
    each suite gives the same deterministic numbers (FLOPs, peak memory, fidelity)."""
    from benchmarks import bench_recompress, run
    from benchmarks.experiments import fig3
    from benchmarks.measure.timing import threads
    from benchmarks.sizes import ASV, QUICK

    runner = [c for name, _, c in run.plan(["fig3"], ASV)]
    asv = []
    for cls in (bench_recompress.RankSweep, bench_recompress.HiddenSweep):
        for method, value, mode in __import__("itertools").product(*cls.params):
            try:
                asv.append(bench_recompress.sweep_config(cls.sweep, method, value, mode))
            except NotImplementedError:
                pass
    assert sorted(map(fig3.key, asv)) == sorted(map(fig3.key, runner))
    import tests.bench.test_quick as quick

    quick_fig3 = [c for c in quick.POINTS.values() if c["figure"] == "fig3"]
    assert quick_fig3 == fig3.points(QUICK) == [c for _, _, c in run.plan(["fig3"], QUICK)]

    config = next(c for c in runner if (c["sweep"], c["method"], c["mode"]) == ("r", "fraq", "batched"))
    combo = ("fraq", config["r"], "batched")
    with threads(1):
        measured = fig3.measure(config)
        bench = bench_recompress.RankSweep()
        bench.params = [[p] for p in combo]  # asv's setup_cache, for this one point
        cache = bench.setup_cache()
        bench.setup(cache, *combo)
        tracked = {k: getattr(bench, f"track_{k}")(cache, *combo) for k in ("flops", "peakmem", "excess",
                                                                            "flops_model")}
        checked = fig3.metrics(config)  # what tests/bench/test_quick.py records in extra_info
    assert tracked["flops"] == measured["counted_flops"] == checked["counted_flops"]
    assert tracked["peakmem"] == measured["peak_bytes"] == checked["peak_bytes"]
    assert tracked["excess"] == measured["excess_quadrature"] == checked["excess_quadrature"]
    assert tracked["flops_model"] == measured["analytic_flops_full"]
    assert measured["timing"]["median"] > 0
    n = len(measured["timing"]["samples"])  # rounds stop once decided, from min_rounds on (paired.paired_rounds)
    assert config["launches"] * config.get("min_rounds", config["rounds"]) <= n <= config["launches"] * config["rounds"]


@pytest.mark.integration
def test_sweep_points_have_four_metrics_for_every_method():
    """Every method at every r- and d-sweep point records time, peak memory, FLOPs and fidelity:
    an exact method within 1e-4 of the optimum in quadrature; the randomized SVDs (the textbook
    rSVD, FlexLoRA on rsvd), near-optimal by design (the excess shrinks with the spectral gap
    at p), within 1e-2."""
    from benchmarks.experiments import fig3

    for config in fig3.points("tiny"):
        if config["mode"] != "batched":
            continue
        res = fig3.measure(config)
        assert res["timing"]["median"] > 0 and res["peak_bytes"] > 0 and res["counted_flops"] > 0
        bound = 1e-2 if config["method"] in ("rsvd", "flexlora:kernel=rsvd") else 1e-4
        assert 0 <= res["excess_quadrature"] < bound, (fig3.key(config), res["excess_quadrature"])


def test_one_definition_per_figure():
    """Each figure's measurement is in one module of the registry; the method's limits are
    data on its spec (the command-line entry points: tests/test_front_doors.py)."""
    import re

    from benchmarks import experiments

    for name in experiments.EXPERIMENTS:
        module = experiments.get(name)
        assert callable(module.points) and callable(module.measure) and callable(module.key), name
    # what the report's captions read from the backends' configs
    assert {"mode", "section", "case", "backend"} <= set(experiments.get("backends").points("tiny")[0])
    flexlora = []
    for path in _files("benchmarks", ".py"):
        flexlora += [path] * len(re.findall(r"""==\s*["']flexlora["']""", open(path).read()))
    assert not flexlora


def test_result_files_have_every_key_the_loader_requires(tmp_path):
    """The writer's record carries every key of the loader's lists (the keys of a result
    file, and those of the current format), and the loader refuses a file missing one."""
    import json
    import warnings

    pytest.importorskip("pandas")
    from analysis.loaders import FORMAT_KEYS, RESULT_KEYS, load_results
    from benchmarks.results import write_result

    path = write_result(tmp_path, "demo", "k", {"a": 1}, {"b": 2})
    rec = json.loads(path.read_text())
    assert set(RESULT_KEYS) | set(FORMAT_KEYS) <= set(rec)
    del rec["machine"]
    path.write_text(json.dumps(rec))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_results(tmp_path).empty
    assert any("machine" in str(w.message) for w in caught)
