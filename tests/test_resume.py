"""What a resumed run counts as already there: a result of this point's config, recorded on this
run's device and dtype, holding its experiment's fields, each of its type. A file that is not
whole is measured again, one line naming it and why; a whole result of another device or dtype
is never written over (one line naming it and what to do, nothing measured)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import run
from benchmarks.experiments import get
from fraq._fields import REQUIRED, fields, unfit
from fraq._results import damage
from tests.test_runner_out import WHOLE, quick  # noqa: F401 (the fixture)

TINY = ["table4", "--size", "tiny", "--no-progress"]


def _point() -> tuple[dict, str]:
    config = get("table4").points("tiny")[0]
    return {**config, "size": "tiny"}, get("table4").key(config)


def _record(result: dict, **edits) -> dict:
    """A table4 result file written by hand: every key of the format, ``result`` as given."""
    config, key = _point()
    rec = {"experiment": "table4", "key": key, "config": config, "result": result, "machine": {"cpu": "x"},
           "versions": {"fraq": "0"}, "git_sha": None, "device": "cpu", "dtype": "float32", "threads": 1,
           "loadavg": 0.0, "steal": None, "created": "2026-01-01T00:00:00"}
    return {**rec, **edits}


def _resumed(out: Path, quick, capsys, text: str) -> tuple[Path, str, int]:
    """A tiny table4 run in ``out``, one of its files replaced by ``text``, then the same
    command again: (that file, the second run's stderr, its exit status)."""
    assert run.main([*TINY, "--out", str(out)]) == 0
    path = out / "table4" / f"{_point()[1]}.json"
    assert path.is_file()
    path.write_text(text)
    quick.clear()
    capsys.readouterr()
    status = run.main([*TINY, "--out", str(out)])
    return path, capsys.readouterr().err, status


def test_a_whole_hand_written_result_is_already_there(quick, tmp_path, capsys):
    path, err, status = _resumed(tmp_path / "out", quick, capsys, json.dumps(_record(dict(WHOLE))))
    assert status == 0 and quick == [] and "remeasuring" not in err


@pytest.mark.parametrize("result, why", [
    ({"seconds": 1.0}, "no timing.median, timing.samples, peak_bytes, gap_to_svd, excess"),
    ({**WHOLE, "peak_bytes": "1 KiB", "timing": None}, "no timing.median, timing.samples"),
    ({**WHOLE, "peak_bytes": "1 KiB"}, "peak_bytes='1 KiB' is not a number"),
    ({**WHOLE, "timing": {"median": 1.0, "samples": [1.0, "fast"]}}, "timing.samples=[1.0, 'fast'] is not a non-empty"),
    ({**WHOLE, "timing": {"median": 1.0, "samples": []}}, "timing.samples=[] is not a non-empty list"),
    ({**WHOLE, "timing": {"median": 1.0, "samples": [float("inf")]}},
     "timing.samples=[inf] is not a non-empty list of finite numbers"),
    ({**WHOLE, "gap_to_svd": ["small"]}, "gap_to_svd=['small'] is not a non-empty list of numbers"),
], ids=["none-of-its-fields", "a-string-and-no-timing", "a-string", "a-sample-string", "no-samples", "infinite-sample",
        "a-string-error"])
def test_a_result_without_its_fields_or_of_the_wrong_types_is_measured_again(quick, tmp_path, capsys, result, why):
    path, err, status = _resumed(tmp_path / "out", quick, capsys, json.dumps(_record(result)))
    assert status == 0 and len(quick) == 1  # that point alone
    assert err.count("remeasuring") == 1 and f"remeasuring {path}: {why}" in err, err
    assert json.loads(path.read_text())["result"] == WHOLE


@pytest.mark.parametrize("field, value", [("device", "cuda:0"), ("device", "mps"), ("dtype", "float64")])
def test_a_result_of_another_device_or_dtype_is_not_already_there_and_never_written_over(quick, tmp_path, capsys,
                                                                                          field, value):
    """Not counted as finished (it would be drawn as this run's), and not replaced by this
    run's (another machine's measurements cannot be made again here): one line naming the
    file, its device or dtype and what to do; nothing measured."""
    text = json.dumps(_record(dict(WHOLE), **{field: value}))
    path, err, status = _resumed(tmp_path / "out", quick, capsys, text)
    assert status == 2 and quick == [] and path.read_text() == text
    assert err.count("\n") == 1 and str(path) in err and f"{field} {value}" in err and "another --out" in err, err
    assert "remeasuring" not in err


def test_a_damaged_result_of_another_device_is_refused_without_saying_it_is_remeasured(quick, tmp_path, capsys):
    text = json.dumps(_record({"seconds": 1.0}, device="cuda:0"))
    path, err, status = _resumed(tmp_path / "out", quick, capsys, text)
    assert status == 2 and quick == [] and err.count("\n") == 1 and "device cuda:0" in err, err


def test_every_result_of_the_recorded_tiny_run_is_whole(tmp_path):
    """The rule refuses no result a run writes: resuming the recorded run measures nothing."""
    from tests.tiny_fixture import unpack

    files = sorted(unpack(tmp_path).rglob("*.json"))
    assert files
    for f in files:
        rec = json.loads(f.read_text())
        assert damage(rec) is None, (f, damage(rec))


def test_timing_samples_are_checked_wherever_recorded():
    assert "table4_steps" not in REQUIRED
    assert unfit("table4_steps", fields({}, {"timing": {"samples": [1.0, 2.0]}})) is None
    assert "not a non-empty list of finite numbers" in unfit("table4_steps",
                                                             fields({}, {"timing": {"samples": [1.0, math.nan]}}))
    assert unfit("table4_steps", fields({}, {"ms": 1.0})) is None


def test_the_analysis_reads_the_same_table():
    from analysis import resultset

    assert resultset.REQUIRED is REQUIRED
