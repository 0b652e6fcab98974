"""benchmarks.suite_once: asv's benchmarks called once each without asv (a GPU image has
none), with asv's conventions (setup_cache's value first, every parameter combination,
NotImplementedError from setup a skip), and the GPU check's suite parts that run it."""

from __future__ import annotations

import itertools
import json
import math
import sys
import types

import pytest

from benchmarks.suite_once import ONE_OF_EACH, main, run_benchmark


def _combinations(cls) -> int:
    return math.prod(len(p) for p in cls.params)


def test_every_named_benchmark_exists_with_its_parameters():
    import importlib

    for file, name in ONE_OF_EACH.items():
        f, cls_name, method = name.split(".")
        assert f == file
        cls = getattr(importlib.import_module(f"benchmarks.{file}"), cls_name)
        assert callable(getattr(cls, method)) and method.split("_")[0] in ("time", "track", "peakmem", "mem")
        assert len(cls.param_names) == len(cls.params)


def test_host_benchmark_runs_every_combination_once_on_the_cpu(tmp_path):
    from benchmarks.bench_host import Host

    out = tmp_path / "asv_quick.json"
    assert main(["--out", str(out), "--device", "cpu", "--size", "tiny", "--bench", r"bench_host\."]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["asv_quick.json"]  # whole: no temporary file left
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and doc["size"] == "tiny" and doc["machine"]["device"] == "cpu"
    recs = doc["benchmarks"]
    assert len(recs) == _combinations(Host)
    combos = {tuple(r["params"].values()) for r in recs}
    assert combos == {tuple(str(v) for v in c) for c in itertools.product(*Host.params)}
    for r in recs:
        assert list(r["params"]) == Host.param_names and r["benchmark"] == ONE_OF_EACH["bench_host"]
        assert r["state"] in ("measured", "skipped")
        if r["state"] == "measured":
            # host reads per shape group: a count, at least the one read a group makes
            assert r["value"] >= 1 and r["peak_device_bytes"] is None and r["seconds"] > 0


@pytest.mark.parametrize("args,named", [
    (["--bench", "("], "--bench(='(')"),
    (["--bench", "no_such_benchmark"], "--bench(='no_such_benchmark')"),
    (["--size", "huge"], "--size(='huge')"),
    (["--device", "gpu"], "='gpu'"),
])
def test_bad_arguments_are_named_before_any_work(tmp_path, capsys, args, named):
    out = tmp_path / "x.json"
    assert main(["--out", str(out), *args]) == 2
    assert named in capsys.readouterr().err and not out.exists()


@pytest.fixture
def fake_suite(monkeypatch):
    """A suite file of asv's conventions: a setup_cache, a skip for one parameter, a
    failure for another, a track_ method with a unit and a time_ method."""
    calls = []

    class Fake:
        params = [["a", "skip", "boom"], [1, 2]]
        param_names = ["kind", "n"]

        def setup_cache(self):
            calls.append("cache")
            return {"base": 10}

        def setup(self, cache, kind, n):
            if kind == "skip":
                raise NotImplementedError("not on this device (fake)")
            self.value = cache["base"] + n

        def track_value(self, cache, kind, n):
            if kind == "boom":
                raise RuntimeError("it broke")
            return self.value

        track_value.unit = "things"

        def time_run(self, cache, kind, n):
            if kind == "boom":
                raise RuntimeError("it broke")
            sum(range(1000))

        def teardown(self, cache, kind, n):
            calls.append(("teardown", kind, n))

    mod = types.ModuleType("benchmarks.bench_fake")
    mod.Fake = Fake
    monkeypatch.setitem(sys.modules, "benchmarks.bench_fake", mod)
    return calls


def test_asv_conventions_cache_skip_failure_and_teardown(fake_suite):
    import torch

    recs = run_benchmark("bench_fake.Fake.track_value", torch.device("cpu"))
    assert fake_suite.count("cache") == 1  # setup_cache once for the class
    by = {(r["params"]["kind"], r["params"]["n"]): r for r in recs}
    assert len(recs) == 6
    assert by[("a", "1")]["state"] == "measured" and by[("a", "1")]["value"] == 11 and by[("a", "2")]["value"] == 12
    assert by[("a", "1")]["unit"] == "things"
    assert by[("skip", "1")]["state"] == "skipped" and "fake" in by[("skip", "1")]["reason"]
    assert by[("boom", "2")]["state"] == "failed" and "it broke" in by[("boom", "2")]["error"]
    # teardown after every combination whose setup ran (not after a skip)
    assert [c for c in fake_suite if c != "cache"] == [("teardown", k, n) for k in ("a", "boom") for n in (1, 2)]
    timed = run_benchmark("bench_fake.Fake.time_run", torch.device("cpu"))
    t = next(r for r in timed if r["params"] == {"kind": "a", "n": "1"})
    assert t["unit"] == "seconds" and 0 < t["value"] < t["seconds"]


@pytest.mark.parametrize("part,doc,rc,state", [
    ("asv-quick", {"benchmarks": [{"state": "measured"}, {"state": "skipped"}]}, 0, "done"),
    ("asv-quick", {"benchmarks": [{"state": "measured"}, {"state": "failed"}]}, 1, "failed"),
    ("asv-quick", {"benchmarks": [{"state": "skipped"}]}, 0, "not on this device"),
    ("asv-quick", None, 1, "failed"),
    ("asv-quick", {"benchmarks": []}, None, "cut"),
    ("pytest-benchmark-quick", {"benchmarks": [{}, {}, {}]}, 0, "done"),
    ("pytest-benchmark-quick", {"benchmarks": [{}]}, 1, "failed"),
    ("pytest-benchmark-quick", {"benchmarks": []}, 5, "not on this device"),
])
def test_gpu_check_suite_parts_status(tmp_path, part, doc, rc, state):
    from benchmarks.gpu_check import PARTS
    from benchmarks.gpu_check.parent import _status

    p = {x.name: x for x in PARTS}[part]
    if doc is not None:
        name = "asv_quick.json" if part == "asv-quick" else "pytest_benchmark.json"
        (tmp_path / name).write_text(json.dumps(doc))
    st = _status(p, tmp_path, rc, 1.0, 2.0)
    assert st["state"] == state and st["part"] == part


def test_suite_parts_run_only_when_named():
    from benchmarks.gpu_check import DEFAULT_PARTS, FILES, PARTS

    named = [p.name for p in PARTS if not p.default]
    assert named == ["asv-quick", "pytest-benchmark-quick"] and not set(named) & {p.name for p in DEFAULT_PARTS}
    assert math.isclose(sum(p.share for p in DEFAULT_PARTS), 1.0)
    assert {"asv_quick.json", "pytest_benchmark.json"} <= set(FILES)
    from benchmarks.gpu_check.plan import CHECKS

    assert set(named) <= {name for _, name, _, _ in CHECKS}  # the plan's checks name parts that exist
