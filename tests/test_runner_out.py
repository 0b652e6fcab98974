"""The runner's results directory: each size its own by default, and a result of another size,
device or dtype is never written over (one line naming the file, before any measurement)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import run
from benchmarks.experiments import get


WHOLE = {"timing": {"median": 1.0, "samples": [1.0, 1.0, 1.0]}, "peak_bytes": 1024, "gap_to_svd": [0.0],
         "excess": [0.0]}
"""A whole table4 result: every field its figure reads (``variant`` is the config's)."""


@pytest.fixture
def quick(monkeypatch, tmp_path):
    """table4 measured in no time, the runner run from an empty directory."""
    calls = []

    def measure(config, device):
        calls.append(config)
        return dict(WHOLE)

    monkeypatch.setattr(get("table4"), "measure", measure)
    monkeypatch.chdir(tmp_path)
    return calls


def records(d: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(d.glob("table4/*.json"))}


@pytest.mark.integration
def test_each_size_has_its_own_default_directory_and_neither_is_overwritten(quick, tmp_path, capsys):
    assert run.main(["table4", "--size", "tiny", "--no-progress"]) == 0
    tiny = records(tmp_path / run.default_out("tiny"))
    assert tiny and {r["config"]["size"] for r in tiny.values()} == {"tiny"}
    assert run.main(["table4", "--size", "reduced", "--no-progress"]) == 0
    reduced = records(tmp_path / run.default_out("reduced"))
    assert reduced and {r["config"]["size"] for r in reduced.values()} == {"reduced"}
    assert records(tmp_path / run.default_out("tiny")) == tiny  # the tiny run's files are untouched
    assert run.default_out("tiny") != run.default_out("reduced") != run.default_out("paper")


def test_the_help_names_each_default(capsys):
    with pytest.raises(SystemExit):
        run.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for size in ("tiny", "reduced", "paper"):
        assert f"{size} {run.default_out(size)}" in text.replace("- ", "-")


@pytest.mark.parametrize("flag", [[], ["--rerun"]])
def test_a_result_of_another_size_is_refused_naming_the_file(quick, tmp_path, capsys, flag):
    out = tmp_path / "mine"
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 0
    before = records(out)
    quick.clear()
    capsys.readouterr()
    assert run.main(["table4", "--size", "reduced", "--out", str(out), "--no-progress", *flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "size tiny" in err and "--out" in err, err
    assert str(out / "table4") in err
    assert records(out) == before and not quick  # nothing measured, nothing replaced


def test_a_result_of_another_device_or_dtype_is_refused(quick, tmp_path, capsys):
    out = tmp_path / "mine"
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 0
    first = sorted((out / "table4").glob("*.json"))[0]
    for field, value in (("device", "cuda:0"), ("dtype", "float64")):
        rec = json.loads(first.read_text())
        rec[field] = value
        first.write_text(json.dumps(rec))
        capsys.readouterr()
        assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress", "--rerun"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(first) in err and f"{field} {value}" in err, err
        assert json.loads(first.read_text())[field] == value
        rec[field] = {"device": "cpu", "dtype": "float32"}[field]
        first.write_text(json.dumps(rec))


def test_the_same_size_resumes_and_reruns(quick, tmp_path):
    out = tmp_path / "mine"
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 0
    n = len(quick)
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 0
    assert len(quick) == n  # all there: nothing measured again
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress", "--rerun"]) == 0
    assert len(quick) == 2 * n



@pytest.mark.parametrize("damage, why", [(lambda r: r.update(result={}), "an empty 'result'"),
                                         (lambda r: r.pop("machine"), "no 'machine'"),
                                         (lambda r: r.update(threads="1"), "'threads' is a str")])
def test_a_damaged_result_is_measured_again_saying_so(quick, tmp_path, capsys, damage, why):
    """A result file that parses but is not whole (an empty result, a missing or mistyped
    field) is not "already there": the resumed run measures it again, with one line naming it."""
    out = tmp_path / "mine"
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 0
    n = len(quick)
    path = sorted((out / "table4").glob("*.json"))[0]
    rec = json.loads(path.read_text())
    damage(rec)
    path.write_text(json.dumps(rec))
    capsys.readouterr()
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 0
    assert len(quick) == n + 1  # that point alone
    err = capsys.readouterr().err
    assert err.count("remeasuring") == 1 and f"remeasuring {path}: {why}" in err
    assert json.loads(path.read_text())["result"] == WHOLE


# --- make bench-pytest-compare without a saved baseline ------------------------------------------

def test_compare_without_a_baseline_is_one_line_before_anything_runs(tmp_path, capsys):
    pytest.importorskip("pytest_benchmark")
    from pytest_benchmark.utils import get_machine_id

    from benchmarks import pytest_baseline

    storage = tmp_path / ".benchmarks"
    (storage / "Other-Python-9.9-64bit").mkdir(parents=True)
    (storage / "Other-Python-9.9-64bit" / "0001_x.json").write_text("{}")
    assert pytest_baseline.main(["--storage", str(storage)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no saved pytest-benchmark baseline" in err and "make bench-pytest SAVE=" in err
    assert "Other-Python-9.9-64bit" in err
    (storage / get_machine_id()).mkdir()
    (storage / get_machine_id() / "0001_before.json").write_text("{}")
    assert pytest_baseline.main(["--storage", str(storage)]) == 0


def test_make_checks_the_baseline_before_pytest():
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    recipe = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(repo), "bench-pytest-compare"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert "benchmarks.pytest_baseline" in recipe[0] and "--benchmark-json" in recipe[1]
    assert "benchmarks.pytest_compare" in recipe[2]


@pytest.mark.parametrize("where", ["result", "experiment"])
def test_a_result_path_that_is_not_a_file_is_one_line_before_measuring(quick, tmp_path, capsys, where):
    """A directory where a result file goes (or a file where an experiment's directory goes):
    one line naming it, status 2, nothing measured."""
    out = tmp_path / "out"
    config = get("table4").points("tiny")[0]
    target = out / "table4" / f"{get('table4').key(config)}.json"
    if where == "result":
        target.mkdir(parents=True)
        blocker, kind = target, "a directory"
    else:
        out.mkdir()
        (out / "table4").write_text("not a folder")
        blocker, kind = out / "table4", "a file"
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out(={str(out)!r}) holds {str(blocker)!r}, {kind} where this run writes " \
                  f"{'a result' if where == 'result' else 'results'}: move it away or choose another --out\n"
    assert quick == []


@pytest.mark.parametrize("make", ["folder", "file-parent"])
def test_an_unusable_kernel_table_is_one_line_naming_the_variable_before_measuring(quick, tmp_path, capsys,
                                                                                   monkeypatch, make):
    table = tmp_path / "kernels"
    if make == "folder":
        table.mkdir()
        named = f"FRAQ_KERNEL_TABLE(={str(table)!r}) is a directory; give the path of a file"
    else:
        table.write_text("a file")
        table = table / "k.json"
        named = f"FRAQ_KERNEL_TABLE(={str(table)!r}): {table.parent} is not a directory"
    monkeypatch.setenv("FRAQ_KERNEL_TABLE", str(table))
    assert run.main(["table4", "--size", "tiny", "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert capsys.readouterr().err == f"error: {named}\n"
    assert quick == [] and not (tmp_path / "out").exists()


def test_paired_timings_advance_the_progress_by_their_share_once():
    """While an experiment's paired timings run, the display advances by each point's timing
    share (at most its whole cost, never twice for a point); the point's own update then
    adds only the rest, so the display ends at the total."""
    import io
    from types import SimpleNamespace

    from benchmarks.run import _credit
    from fraq._progress import Progress

    a, b = dict(k="a"), dict(k="b")
    costs = {id(a): 5.0, id(b): 2.0}
    module = SimpleNamespace(timing_cost=lambda c: 3.0)
    bar = Progress(7.0, stream=io.StringIO(), tty=False)
    credited: dict = {}
    _credit(module, bar, credited, costs, [a, b])
    _credit(module, bar, credited, costs, [a])  # a group seen again: nothing more
    assert bar.done == 3.0 + 2.0 and credited == {id(a): 3.0, id(b): 2.0}
    for c in (a, b):
        bar.update(costs[id(c)] - credited.pop(id(c), 0.0))
    assert bar.done == 7.0
