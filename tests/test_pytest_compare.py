"""benchmarks.pytest_compare: checks compared as ratios to the calibration kernel of their
own run, a threshold above their noise, one line or a table and never a traceback."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytest_benchmark")

from benchmarks import pytest_compare  # noqa: E402
from benchmarks.pytest_baseline import baselines  # noqa: E402


def _run(mins: dict[str, float], spread: float = 0.02) -> dict:
    return {"benchmarks": [{"fullname": f"tests/bench/test_quick.py::{name}",
                            "stats": {"min": m, "q1": m * (1 + spread), "median": m * (1 + 2 * spread)}}
                           for name, m in mins.items()]}


BASE = {"test_calibration": 1e-3, "test_point[a]": 2e-3, "test_point[b]": 5e-3}


def test_a_machine_that_is_slower_in_everything_is_no_regression():
    rows, why = pytest_compare.compare(_run(BASE), _run({k: 1.6 * v for k, v in BASE.items()}), 25)
    assert why is None and [r["verdict"] for r in rows] == ["same", "same"]


def test_one_check_slower_than_the_machine_is_a_regression():
    new = {k: 1.3 * v for k, v in BASE.items()}
    new["test_point[b]"] *= 1.5
    rows, _ = pytest_compare.compare(_run(BASE), _run(new), 25)
    assert {r["check"].split("::")[1]: r["verdict"] for r in rows} == {"test_point[a]": "same",
                                                                        "test_point[b]": "slower"}


def test_a_noisy_check_raises_its_threshold_or_is_not_judged():
    rows, _ = pytest_compare.compare(_run(BASE, spread=0.2), _run({k: 1.3 * v if "a]" in k else v
                                                                     for k, v in BASE.items()}, spread=0.2), 25)
    a = next(r for r in rows if r["check"].endswith("[a]"))
    assert a["threshold"] == pytest.approx(0.4) and a["verdict"] == "same"
    rows, _ = pytest_compare.compare(_run(BASE, spread=0.6), _run(BASE), 25)
    assert {r["verdict"] for r in rows} == {"cannot judge"}


def _saved(tmp_path, run) -> None:
    from pytest_benchmark.utils import get_machine_id

    d = tmp_path / get_machine_id()
    d.mkdir(parents=True)
    (d / "0001_base.json").write_text(json.dumps(run))
    assert baselines(tmp_path)


def test_main_exit_status_and_one_line_errors(tmp_path, capsys):
    _saved(tmp_path / "s", _run(BASE))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(_run({**BASE, "test_point[b]": 2 * BASE["test_point[b]"]})))
    assert pytest_compare.main(["--new", str(new), "--storage", str(tmp_path / "s")]) == 1
    out = capsys.readouterr().out
    assert "test_point[b]" in out and "slower" in out and "1 slower" in out
    new.write_text(json.dumps(_run({k: v for k, v in BASE.items() if k != "test_calibration"})))
    assert pytest_compare.main(["--new", str(new), "--storage", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no calibration check" in err
    new.write_text("{broken")
    assert pytest_compare.main(["--new", str(new), "--storage", str(tmp_path / "s")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert pytest_compare.main(["--new", str(new), "--storage", str(tmp_path / "empty")]) == 2
    assert "no saved baseline" in capsys.readouterr().err
