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


def _spread_runs(sigma: float, n: int = 40, moved: dict[int, float] | None = None) -> tuple[dict, dict]:
    """A baseline and a new run of ``n`` checks whose calibrated changes spread as normal
    quantiles of ``sigma`` on the log scale (identical code on a noisy machine), each check
    steady within its run (2% spread), the checks in ``moved`` (index -> factor) changed too."""
    import math
    from statistics import NormalDist

    base = {"test_calibration": 1e-3, **{f"test_point[{i}]": 1e-3 * (1 + i % 7) for i in range(n)}}
    new = dict(base)
    for i in range(n):
        z = NormalDist().inv_cdf((i + 0.5) / n)
        new[f"test_point[{i}]"] = base[f"test_point[{i}]"] * math.exp(sigma * z) * (moved or {}).get(i, 1.0)
    return _run(base), _run(new)


def test_the_runs_own_spread_sets_the_threshold_and_judges_nothing_on_a_machine_too_noisy():
    """Identical code on a machine whose checks moved by a log-spread of 0.46 between runs (measured on a
    2-core Xeon guest): the threshold is that spread's 3 robust widths, over MAX_THRESHOLD, so nothing is
    judged (no "slower" at +80%); at a spread of 0.02 the threshold is --fail, and a check moved by 1.6x is
    the one slower check, a check moved by 1/1.6 the one faster; at 0.1 a 1.3x move is within the noise."""
    base, new = _spread_runs(0.46)
    rows, _ = pytest_compare.compare(base, new, 25)
    assert rows[0]["between"] > pytest_compare.MAX_THRESHOLD
    assert {r["verdict"] for r in rows} == {"cannot judge"} and max(r["change"] for r in rows) > 0.8
    base, new = _spread_runs(0.02, moved={5: 1.6, 30: 1 / 1.6})
    rows, _ = pytest_compare.compare(base, new, 25)
    assert rows[0]["between"] < 0.25 and all(r["threshold"] == pytest.approx(0.25) for r in rows)
    verdicts = {r["check"].split("[")[1].rstrip("]"): r["verdict"] for r in rows}
    assert verdicts.pop("5") == "slower" and verdicts.pop("30") == "faster" and set(verdicts.values()) == {"same"}
    base, new = _spread_runs(0.1, moved={5: 1.3})
    rows, _ = pytest_compare.compare(base, new, 10)
    r5 = next(r for r in rows if r["check"].endswith("[5]"))
    assert r5["threshold"] == pytest.approx(r5["between"]) and 0.3 < r5["between"] < 0.4 and r5["verdict"] == "same"


def test_main_says_how_noisy_the_runs_were_and_exits_0_when_nothing_is_judged(tmp_path, capsys):
    base, new = _spread_runs(0.46)
    _saved(tmp_path / "s", base)
    path = tmp_path / "new.json"
    path.write_text(json.dumps(new))
    assert pytest_compare.main(["--new", str(path), "--storage", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "0 slower, 40 too noisy to judge, of 40 checks" in out and "two runs of the same code differ" in out


def _damaged(edit) -> object:
    run = _run(BASE)
    return edit(run) or run


DAMAGED = {
    "a list": (lambda r: [r], "a JSON list, not a pytest-benchmark run"),
    "benchmarks not a list": (lambda r: {"benchmarks": {"x": 1}}, "'benchmarks' is a dict"),
    "a check not an object": (lambda r: r["benchmarks"].append("x"), "benchmarks[3] is a str"),
    "no fullname": (lambda r: r["benchmarks"][1].pop("fullname") and None, "benchmarks[1] has no 'fullname'"),
    "min 0": (lambda r: r["benchmarks"][1]["stats"].update(min=0), "'min'(=0) must be a positive number"),
    "calibration min 0": (lambda r: r["benchmarks"][0]["stats"].update(min=0.0), "'min'(=0.0)"),
    "min null": (lambda r: r["benchmarks"][2]["stats"].update(min=None), "'min'(=None)"),
    "min a string": (lambda r: r["benchmarks"][2]["stats"].update(min="0.002"), "'min'(='0.002')"),
    "no q1": (lambda r: r["benchmarks"][2]["stats"].pop("q1") and None, "'q1'(=None)"),
    "stats a list": (lambda r: r["benchmarks"][2].update(stats=[1]), "'stats' is a list"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
@pytest.mark.parametrize("side", ["baseline", "new"])
def test_a_damaged_run_is_one_line_naming_its_file_and_what_is_wrong(tmp_path, capsys, case, side):
    edit, words = DAMAGED[case]
    damaged = _damaged(edit)
    _saved(tmp_path / "s", damaged if side == "baseline" else _run(BASE))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(damaged if side == "new" else _run(BASE)))
    bad = baselines(tmp_path / "s")[-1] if side == "baseline" else new
    assert pytest_compare.main(["--new", str(new), "--storage", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(bad) in err and words in err, err
    assert "Traceback" not in err


def test_the_baseline_is_checked_before_the_suite_runs(tmp_path, capsys):
    """``make bench-pytest-compare`` runs ``benchmarks.pytest_baseline`` before the suite: a
    damaged newest baseline stops it there, in one line naming the file."""
    from benchmarks import pytest_baseline

    _saved(tmp_path / "s", _run(BASE))
    assert pytest_baseline.main(["--storage", str(tmp_path / "s")]) == 0
    path = baselines(tmp_path / "s")[-1]
    path.write_text(json.dumps([_run(BASE)]))
    assert pytest_baseline.main(["--storage", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(path) in err and "a JSON list" in err
    path.write_text("{cut")
    assert pytest_baseline.main(["--storage", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not JSON" in err


def test_a_run_on_a_busy_machine_is_not_judged(tmp_path, capsys):
    """Identical code, one run under load (a fake 1-min load average of 3.2 at 1 thread):
    no verdict, one line saying it cannot judge and why, exit status 2; at 1.4 it is judged."""
    from analysis.verdicts import BUSY_LOAD

    assert pytest_compare.BUSY_LOAD == BUSY_LOAD  # the report's rule
    loaded = {**_run(BASE), "machine_info": {"fraq": {"loadavg": 3.2, "bench_threads": 1}}}
    rows, why = pytest_compare.compare(_run(BASE), loaded, 25)
    assert rows == [] and why.startswith("cannot judge: the new run") and "3.20 above its 1 thread(s) + 0.5" in why
    idle = {**_run(BASE), "machine_info": {"fraq": {"loadavg": 1.4, "bench_threads": 1}}}
    assert pytest_compare.compare(idle, _run(BASE), 25)[1] is None
    _saved(tmp_path / "s", _run(BASE))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(loaded))
    assert pytest_compare.main(["--new", str(new), "--storage", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "cannot judge" in err and "slower" not in err


def test_the_parametrized_calibration_is_the_calibration():
    """``test_calibration[calibration]`` (parametrized so any ``param:NAME`` grouping holds it)
    is the calibration and not a check."""
    base = _run({"test_calibration[calibration]": 1e-3, "test_point[a]": 2e-3})
    rows, why = pytest_compare.compare(base, base, 25)
    assert why is None and [r["check"].split("::")[1] for r in rows] == ["test_point[a]"]
