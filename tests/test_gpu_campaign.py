"""The GPU campaign (``python -m benchmarks.gpu_check --campaign``) on the CPU at the tiny size: its
measuring process restarted after a crash, its watchdog killing a point that hangs, and its ledger
making a second call measure nothing the first measured. Faults are planted with the measuring
process's test-only hook (:data:`benchmarks.gpu_check.measurer.FAULT_ENV`). Every assertion is on
what the calls wrote (result files, ledger entries, log lines), none on how long they took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from benchmarks.gpu_check import ledger
from benchmarks.gpu_check.campaign import FILES, Point, units
from benchmarks.gpu_check.measurer import FAULT_ENV, FAULT_EXIT, faults

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = "workspace,basis_routes,table4"
CRASH = "workspace/fig3-2x64x64-r16"
HANG = "basis_routes/cholesky-qr2-2x32x64-r16"
FLOOR_S = 3.0


def _campaign(out: Path, *extra: str, fault: str | None = None, experiments: str = EXPERIMENTS,
              budget: str = "60") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--campaign", "--out", str(out), "--device",
                           "cpu", "--size", "tiny", "--budget-s", budget, "--experiments", experiments,
                           "--watchdog-floor-s", str(FLOOR_S), *extra], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def _entries(out: Path) -> dict[str, ledger.Entry]:
    return {f"{e.experiment}/{e.key}": e for e in ledger.read(out / "ledger.json")}


def _planned() -> set[str]:
    from benchmarks.experiments import get

    names = EXPERIMENTS.split(",")
    return {f"{exp}/{get(exp).key(c)}" for exp in names for c in get(exp).points("tiny")}


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    """Two calls on one folder: the first with a crash and a hang planted, the second with none."""
    out = tmp_path_factory.mktemp("campaign") / "out"
    first = _campaign(out, fault=f"crash:{CRASH},hang:{HANG}")
    after_first = (out / "ledger.json").read_text()
    results_first = {p: p.stat().st_mtime_ns for p in (out / "results").rglob("*.json")}
    second = _campaign(out)
    return out, first, after_first, results_first, second


def test_first_call_records_every_point_tried_with_its_state(calls):
    out, first, _, _, _ = calls
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]  # a point did not measure
    entries = _entries(out)
    assert set(entries) == _planned()
    assert entries[CRASH].state == "crashed" and entries[CRASH].detail == f"exit status {FAULT_EXIT}"
    assert entries[HANG].state == "timed out" and "watchdog" in entries[HANG].detail
    assert entries[HANG].seconds >= FLOOR_S  # killed at its watchdog, not before: the floor holds a 0.5 s point
    measured = {k for k, e in entries.items() if e.state == "measured"}
    assert measured == _planned() - {CRASH, HANG}
    kinds = {e.device_kind for e in entries.values()}
    assert len(kinds) == 1 and kinds != {None}
    assert {e.fingerprint for e in entries.values()} == {ledger.fingerprint()}
    assert all(isinstance(e.seconds, float) and e.seconds >= 0 for e in entries.values())


def test_result_files_are_written_for_measured_points_only_with_their_seconds(calls):
    out, _, _, _, _ = calls
    entries = _entries(out)
    files = {f"{p.parent.name}/{p.stem}": p for p in (out / "results").rglob("*.json")}
    assert set(files) == {k for k, e in entries.items() if e.state == "measured"}
    for name, path in files.items():
        rec = json.loads(path.read_text())
        assert rec["device"] == "cpu" and rec["config"]["size"] == "tiny" and rec["key"] == name.split("/")[1]
        assert set(rec["steps"]) <= {"prepare", "measure"} and "measure" in rec["steps"]
        assert rec["seconds"] == pytest.approx(sum(rec["steps"].values()), rel=1e-12)
        assert entries[name].seconds == pytest.approx(rec["seconds"], abs=1e-3)  # the ledger rounds to ms
    prepared = [n for n, p in files.items() if "prepare" in json.loads(p.read_text())["steps"]]
    assert prepared and all(n.startswith("table4/") for n in prepared)  # the one experiment timed as a group
    with tarfile.open(out / "results.tar.gz") as tar:
        assert {m.name for m in tar.getmembers() if m.isfile()} == \
            {f"results/{p.relative_to(out / 'results')}" for p in files.values()}
    assert {p.name for p in out.iterdir()} <= set(FILES)  # no temporary file or lock left


def test_log_has_every_step_and_each_restart(calls):
    out, first, _, _, _ = calls
    log = (out / "campaign.log").read_text()
    first_log = log.split("campaign: campaign on")[1]
    ready = [line for line in first_log.splitlines() if "campaign: measuring process" in line and "ready" in line]
    assert len(ready) == 3  # the first, after the crash, after the hang
    assert len({line.split("measuring process ")[1].split()[0] for line in ready}) == 3  # three processes
    assert f"{CRASH}: crashing ({FAULT_ENV})" in first_log and f"{HANG}: hanging ({FAULT_ENV})" in first_log
    assert f"{CRASH}: crashed" in first_log and f"{HANG}: timed out" in first_log
    for name, e in _entries(out).items():
        if e.state == "measured":
            assert f"{name}: measure " in first_log and f"{name}: write " in first_log
            assert f"{name}: measured " in first_log
    assert "summary: 9 measured, 1 timed out, 1 crashed, 0 failed" in first.stdout
    assert "2 restarts" in first.stdout


def test_second_call_measures_nothing_already_in_the_ledger(calls):
    out, _, after_first, results_first, second = calls
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert (out / "ledger.json").read_text() == after_first  # crashed and timed-out points not tried again
    assert {p: p.stat().st_mtime_ns for p in (out / "results").rglob("*.json")} == results_first
    assert "summary: 0 measured, 0 timed out, 0 crashed, 0 failed, 0 cut, 0 left" in second.stdout


@pytest.mark.integration
def test_a_point_the_first_call_did_not_plan_is_measured_by_the_next(tmp_path):
    out = tmp_path / "out"
    assert _campaign(out, experiments="workspace").returncode == 0
    before = _entries(out)
    assert {k.split("/")[0] for k in before} == {"workspace"}
    assert _campaign(out, experiments="workspace,basis_routes").returncode == 0
    after = _entries(out)
    assert {k: e for k, e in after.items() if k.startswith("workspace/")} == before  # not measured again
    assert {k for k in after if k.startswith("basis_routes/")} == \
        {k for k in _planned() if k.startswith("basis_routes/")}


@pytest.mark.integration
def test_a_point_that_does_not_fit_the_budget_is_left_for_a_later_call(tmp_path):
    """Tables 1-3's tiny point is estimated at 15 s on one core: a 10 s budget cannot hold it."""
    out = tmp_path / "out"
    p = _campaign(out, experiments="tables123", budget="10")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "tables123/roberta-base" not in _entries(out)
    assert "tables123/roberta-base: " in p.stdout and "left: for a later call" in p.stdout
    assert "1 left for a later call" in p.stdout


@pytest.mark.integration
def test_a_point_running_at_the_end_of_the_budget_is_cut_and_recorded_nowhere(tmp_path):
    """A hang whose watchdog (the 60 s floor) lies past a 12 s budget: stopped at the budget's end,
    not written to the ledger, so the next call measures it."""
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--campaign", "--out", str(out), "--device",
                        "cpu", "--size", "tiny", "--budget-s", "12", "--experiments", "basis_routes",
                        "--watchdog-floor-s", "60"], cwd=ROOT, env=dict(os.environ, **{FAULT_ENV: f"hang:{HANG}"}),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    entries = _entries(out)
    assert HANG not in entries and all(e.state == "measured" for e in entries.values())
    assert f"{HANG}: cut at the end of the budget" in p.stdout and " 1 cut," in p.stdout


@pytest.mark.parametrize("args,named", [
    (["--experiments", "workspace,bogus"], "--experiments(='workspace,bogus'): 'bogus'"),
    (["--experiments", "fig1"], "'fig1' is not one of"),  # an experiment the GPU plan does not hold
    (["--watchdog-floor-s", "0"], "--watchdog-floor-s(=0)"),
    (["--watchdog-floor-s", "nan"], "--watchdog-floor-s(=nan)"),
    (["--budget-s", "5"], "--budget-s(=5)"),
    (["--parts", "device"], "--parts(='device')"),
    (["--device", "gpu"], "--device(='gpu')"),
    (["--checks", "tests,bogus"], "--checks(='tests,bogus'): 'bogus'"),
])
def test_bad_arguments_stop_before_any_work(tmp_path, capsys, args, named):
    from benchmarks.gpu_check.__main__ import main

    out = tmp_path / "out"
    assert main(["--campaign", "--out", str(out), "--device", "cpu", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and named in err and "\n" not in err
    assert not out.exists()


def test_a_bad_planted_fault_and_a_hand_typed_measurer_are_refused(tmp_path, capsys, monkeypatch):
    from benchmarks.gpu_check.__main__ import main

    monkeypatch.setenv(FAULT_ENV, "explode:a/b")
    assert main(["--campaign", "--out", str(tmp_path / "out"), "--device", "cpu"]) == 2
    assert f"{FAULT_ENV}(='explode:a/b')" in capsys.readouterr().err
    monkeypatch.delenv(FAULT_ENV)
    assert main(["--measurer", "--device", "cpu"]) == 2
    assert "--measurer is the mode the campaign starts" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_campaign_options_without_campaign_are_refused(tmp_path, capsys):
    from benchmarks.gpu_check.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "out"), "--device", "cpu", "--experiments", "fig3"])
    assert exc.value.code == 2 and "--experiments(='fig3') is an option of --campaign" in capsys.readouterr().err


def test_a_folder_of_other_files_or_another_size_is_refused(tmp_path, capsys):
    from benchmarks.gpu_check.__main__ import main
    from benchmarks.results import write_result

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["--campaign", "--out", str(out), "--device", "cpu", "--size", "tiny"]) == 2
    assert "notes.txt" in capsys.readouterr().err
    (out / "notes.txt").unlink()
    write_result(out / "results", "workspace", "k", {"size": "reduced"}, {"v": 1.0})
    assert main(["--campaign", "--out", str(out), "--device", "cpu", "--size", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "results/workspace/k.json" in err and "size reduced" in err
    assert sorted(p.name for p in out.iterdir()) == ["results"]  # nothing written, the lock gone


def test_faults_are_parsed_and_a_bad_one_named():
    assert faults(None) == {} and faults("") == {}
    assert faults("crash:a/b, hang:c/d") == {"a/b": "crash", "c/d": "hang"}
    with pytest.raises(ValueError, match=r"'explode:a/b' is not crash"):
        faults("crash:a/b,explode:a/b")
    with pytest.raises(ValueError, match=r"'hang:ab'"):
        faults("hang:ab")


def test_units_group_a_timed_group_and_leave_other_points_alone():
    from benchmarks.experiments import get

    def pts(exp):
        return [Point(exp, get(exp).key(c), c, 1.0) for c in get(exp).points("tiny")]

    table4, workspace = pts("table4"), pts("workspace")
    got = units(table4 + workspace)
    assert [len(u) for u in got] == [len(table4)] + [1] * len(workspace)  # table4's variants: one paired group
    fig3 = pts("fig3")
    got = units(fig3)
    assert [p for u in got for p in u] == fig3  # order kept
    for u in got:
        groups = {json.dumps(get("fig3").group(p.config), sort_keys=True, default=str, allow_nan=False) for p in u}
        assert len(groups) == 1
    assert len(got) < len(fig3)


def test_ledger_costs_ignore_points_tried_and_not_measured(tmp_path):
    kind, fp = "NVIDIA X", "f" * 16
    config = {"a": 1, "size": "gpu"}
    hung = ledger.Entry(kind, fp, "fig3", "k", "2026-01-01T00:00:00", 90.0, "call", config, "timed out", "watchdog")
    book = ledger.Ledger([hung])
    assert book.seconds(kind, "fig3", "k") is None  # a lower bound, never a cost
    assert ("fig3", "k") in book.measured(kind, fp)  # not tried again with this code
    assert ("fig3", "k") not in book.measured(kind, "e" * 16)  # tried again with other code
    ok = ledger.Entry(kind, fp, "fig3", "k2", "2026-01-01T00:00:01", 2.0, "call", config)
    assert ledger.Ledger([hung, ok]).seconds(kind, "fig3", "k2") == 2.0
    path = tmp_path / "ledger.json"
    ledger.write(path, [hung, ok])
    assert ledger.read(path) == [hung, ok]
    data = json.loads(path.read_text())
    data["entries"][0]["state"] = "hung"
    path.write_text(json.dumps(data, allow_nan=False))
    with pytest.raises(ValueError, match=r"state\(='hung'\) of fig3/k is not one of measured"):
        ledger.read(path)


def test_archived_records_with_their_own_seconds_are_read_as_such(tmp_path):
    """A result file that records its seconds gives them to the ledger; one without gets the gap."""
    import io

    folder = tmp_path / "gpu"
    (folder / "call").mkdir(parents=True)

    def rec(key, created, seconds=None):
        r = dict(experiment="fig3", key=key, config={"size": "gpu"}, result={"v": 1}, device="cuda:0",
                 machine={"gpu": "NVIDIA X"}, git_sha="0" * 40, created=created)
        return r if seconds is None else dict(r, seconds=seconds, steps={"measure": seconds})

    records = [rec("a", "2026-01-01T00:00:00"), rec("b", "2026-01-01T00:00:10"),
               rec("c", "2026-01-01T00:00:20", seconds=1.25)]
    with tarfile.open(folder / "call" / "results.tar.gz", "w:gz") as tar:
        for r in records:
            data = json.dumps(r, allow_nan=False).encode()
            info = tarfile.TarInfo(f"results/fig3/{r['key']}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    got = {e.key: e.seconds for e in ledger.from_archives(folder)}
    assert got == {"a": None, "b": 10.0, "c": 1.25}


def test_a_committed_campaign_folders_ledger_is_read_with_the_archives(tmp_path):
    folder = tmp_path / "gpu"
    (folder / "h200-campaign").mkdir(parents=True)
    hung = ledger.Entry("NVIDIA X", "f" * 16, "tables123", "roberta-base", "2026-01-01T00:00:00", 90.0, "campaign",
                        {"size": "gpu"}, "timed out", "killed after 90.0 s by the watchdog")
    ledger.write(folder / "h200-campaign" / "ledger.json", [hung])
    book = ledger.load(folder)
    assert book.entries == (hung,)
    assert ("tables123", "roberta-base") in book.measured("NVIDIA X", "f" * 16)


def test_the_measuring_process_writes_cupys_kernels_into_the_folder(calls):
    out, _, _, _, _ = calls
    assert (out / "cupy-kernel-cache").is_dir()
    assert f"CuPy's kernel cache: {out / 'cupy-kernel-cache'}" in (out / "campaign.log").read_text()


def test_the_kernel_cache_starts_from_the_committed_kernels_and_keeps_its_own(tmp_path):
    from benchmarks.gpu_check.campaign import kernel_cache

    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.cubin").write_bytes(b"seeded a")
    (seed / "b.cubin").write_bytes(b"seeded b")
    out = tmp_path / "out"
    (out / "cupy-kernel-cache").mkdir(parents=True)
    (out / "cupy-kernel-cache" / "b.cubin").write_bytes(b"this call's b")
    cache = kernel_cache(out, seed)
    assert cache == out / "cupy-kernel-cache"
    assert (cache / "a.cubin").read_bytes() == b"seeded a" and (cache / "b.cubin").read_bytes() == b"this call's b"
    assert kernel_cache(tmp_path / "new", tmp_path / "no-seed").is_dir()  # no committed kernels: an empty folder


@pytest.mark.integration
def test_a_whole_check_runs_as_its_own_gpu_check_and_once_per_fingerprint(tmp_path):
    """--checks alone: the check, no point; its GPU-check folder under checks/NAME, its ledger
    entry (a CPU's CUDA tests say they need another device); a second call runs nothing."""
    from benchmarks.gpu_check.campaign import NOT_HERE_STATE
    from benchmarks.gpu_check.child import NOT_HERE

    assert NOT_HERE_STATE == NOT_HERE
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--campaign", "--out", str(out), "--device", "cpu",
           "--size", "tiny", "--budget-s", "120", "--checks", "tests", "--watchdog-floor-s", "90"]
    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    entries = _entries(out)
    assert list(entries) == ["check/tests"]
    e = entries["check/tests"]
    assert e.state == "measured" and e.detail == NOT_HERE and e.config is None and e.seconds > 0
    assert {"summary.md", "tests.xml"} <= {p.name for p in (out / "checks" / "tests").iterdir()}
    assert not (out / "results").exists()  # no point measured
    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert second.returncode == 0 and "check tests" not in second.stdout
    assert list(_entries(out)) == ["check/tests"]
