"""The GPU check (``python -m benchmarks.gpu_check``): its whole flow on the CPU at the tiny
size, with asv, Flower and peft made unimportable as on a bare GPU image; its argument
checks; its parts' deadlines; and the CUDA paths of its experiments (on a GPU only)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from benchmarks.gpu_check import CUDA_TESTS, DEFAULT_PARTS, FILES, PARTS, Part

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("asv", "flwr", "peft")
STATES = {"done", "cut", "not on this device"}

SITECUSTOMIZE = f"""
import sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the GPU image)")
        return None

sys.meta_path.insert(0, _Absent())
"""


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """One run of the whole flow on the CPU, tiny size, 60 s budget, every process unable to import asv/flwr/peft."""
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = tmp_path_factory.mktemp("gpu") / "out"
    env = dict(os.environ, PYTHONPATH=str(site))
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--size", "tiny",
                        "--budget-s", "60", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=180)
    return p, out, time.time() - t0


def _parts_table(summary: str) -> dict[str, str]:
    """part -> state, from the summary's table of parts."""
    names = {p.name for p in PARTS}
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (\w+) \| ([a-z ]+) \|", summary, re.M)
            if m.group(1) in names}


@pytest.mark.integration
def test_cpu_flow_writes_its_files_whole_and_prints_the_summary_last(cpu_run):
    p, out, seconds = cpu_run
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    names = sorted(os.listdir(out))
    assert set(names) <= set(FILES) and len(names) <= len(FILES), names  # no temporary file left, no folder
    assert {"results.tar.gz", "summary.md", "gpu_check.log", "device.json"} <= set(names)
    summary = (out / "summary.md").read_text()
    assert p.stdout.rstrip().endswith(summary.rstrip())
    assert seconds < 60 + 30  # the budget, and the start of the command itself
    states = _parts_table(summary)
    assert list(states) == [part.name for part in DEFAULT_PARTS]
    assert set(states.values()) <= STATES, states


def test_cpu_flow_results_are_whole_result_files(cpu_run):
    _, out, _ = cpu_run
    allowed = {e for part in PARTS for e in part.experiments}
    with tarfile.open(out / "results.tar.gz") as tar:
        members = tar.getmembers()
        assert members, "no result packed"
        for m in members:
            parts = Path(m.name).parts
            assert m.isfile() and len(parts) == 3 and parts[0] == "results" and parts[1] in allowed, m.name
            rec = json.loads(tar.extractfile(m).read())
            assert rec["experiment"] == parts[1] and rec["device"] == "cpu" and rec["config"]["size"] == "tiny"
            assert {"float32_matmul_precision", "allow_tf32"} <= set(rec["machine"])
            reason = rec["result"].get("skipped")
            if parts[1] == "tf32" or (parts[1] == "eigh_routes" and not rec["config"]["route"].startswith("torch")):
                assert reason.startswith("not on this device"), (m.name, reason)


def test_cpu_flow_says_what_needs_cuda_is_not_on_this_device(cpu_run):
    _, out, _ = cpu_run
    states = _parts_table((out / "summary.md").read_text())
    for part in ("tests", "tf32"):
        assert states[part] in ("not on this device", "cut"), states
    record = json.loads((out / "device.json").read_text())
    assert record["record"]["device"] == "cpu" and record["record"]["gpu"] is None
    assert record["nvidia_smi"].startswith("not on this device")
    if states["tests"] != "cut":
        suite = (out / "tests.xml").read_text()
        assert 'skipped="' in suite and 'failures="0"' in suite and 'errors="0"' in suite


@pytest.mark.parametrize("args,named", [
    (["--budget-s", "0"], "--budget-s(=0)"),
    (["--budget-s", "nan"], "--budget-s(=nan)"),
    (["--parts", "device,bogus"], "'bogus'"),
    (["--parts", ""], "--parts(=''"),
    (["--device", "gpu"], "--device(='gpu')"),
    (["--part", "device"], "--part(='device') is the mode the check starts each part in"),  # a typo for --parts
    (["--part=device"], "give --parts device"),
])
def test_bad_arguments_stop_before_any_work(tmp_path, capsys, args, named):
    from benchmarks.gpu_check.__main__ import main

    out = tmp_path / "out"
    assert main(["--out", str(out), "--device", "cpu", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and named in err and "\n" not in err
    assert not out.exists()


def test_out_must_hold_only_its_own_files(tmp_path, capsys):
    from benchmarks.gpu_check.__main__ import main

    (tmp_path / "notes.txt").write_text("kept")
    assert main(["--out", str(tmp_path), "--device", "cpu"]) == 2
    assert "notes.txt" in capsys.readouterr().err
    (tmp_path / "notes.txt").unlink()
    file = tmp_path / "f"
    file.write_text("")
    assert main(["--out", str(file), "--device", "cpu"]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the default device works")
def test_default_device_is_cuda_and_refused_without_one(tmp_path, capsys):
    from benchmarks.gpu_check.__main__ import main

    assert main(["--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: device cuda requested but")


@pytest.mark.parametrize("budget", [10.0, 60.0, 420.0, 3600.0])
def test_deadlines_are_ordered_inside_the_budget(budget):
    from benchmarks.gpu_check.parent import RESERVE_S, deadlines

    ends = deadlines(list(DEFAULT_PARTS), 100.0, budget)
    assert all(a <= b for a, b in zip(ends, ends[1:]))
    assert ends[-1] == pytest.approx(100.0 + budget - min(RESERVE_S, budget / 10))
    if budget >= 420:  # room for every share: each part gets its share, at least its minimum
        total = sum(p.share for p in DEFAULT_PARTS)
        gaps = [b - a for a, b in zip([100.0, *ends], ends)]
        usable = budget - RESERVE_S
        for p, gap in zip(DEFAULT_PARTS, gaps):
            assert gap >= p.min_s - 1e-9 and gap >= usable * p.share / total - 1e-9


def test_shares_add_up_and_parts_name_registered_experiments():
    from benchmarks.experiments import EXPERIMENTS

    assert math.isclose(sum(p.share for p in DEFAULT_PARTS), 1.0)
    assert all(e in EXPERIMENTS for p in PARTS for e in p.experiments)
    assert len({p.name for p in PARTS}) == len(PARTS)


def test_a_part_past_its_time_starts_no_point(tmp_path):
    from benchmarks.gpu_check.child import run_part

    run_part("tf32", ("tf32",), device=torch.device("cpu"), size="tiny", work=tmp_path, until=time.time() - 1)
    status = json.loads((tmp_path / "status" / "tf32.json").read_text())
    assert status["state"] == "cut" and status["measured"] == 0 and status["points"] > 0
    assert not (tmp_path / "results").exists()


def test_a_part_stopped_from_outside_is_recorded_as_cut(tmp_path):
    from benchmarks.gpu_check.child import write_json
    from benchmarks.gpu_check.parent import _status

    write_json(tmp_path / "status" / "fig3.json", dict(state="running", measured=3, points=24))
    st = _status(Part("fig3", 0.1, ("fig3",), "x"), tmp_path, None, 12.0, 12.0)
    assert st["state"] == "cut" and st["measured"] == 3 and st["points"] == 24
    st = _status(Part("fig3", 0.1, ("fig3",), "x"), tmp_path, 1, 12.0, 12.0)
    assert st["state"] == "failed"


def test_every_cuda_test_is_in_a_file_the_check_runs():
    marked = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
              if "@pytest.mark.cuda" in p.read_text()}
    assert marked and marked <= set(CUDA_TESTS), marked - set(CUDA_TESTS)


# ----------------------------------------------------------------------------- the experiments' properties


@pytest.mark.integration
def test_eigh_routes_on_the_cpu():
    from benchmarks.experiments import eigh_routes

    cpu = torch.device("cpu")
    base = dict(batch=3, r=12, D=40, repeats=2)
    r64 = eigh_routes.measure(dict(base, route="torch-f64"), cpu)
    r32 = eigh_routes.measure(dict(base, route="torch-f32"), cpu)
    eps32, eps64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps
    assert r64["eigenvalue_error"] <= 100 * 12 * eps64 and r64["residual"] <= 100 * 12 * eps64
    assert r32["eigenvalue_error"] <= 100 * 12 * eps32 and r32["orthogonality"] <= 100 * 12 * eps32
    assert r32["eigenvalue_error"] > r64["eigenvalue_error"]
    for route in ("cupy-f32", "host-f64"):
        assert eigh_routes.measure(dict(base, route=route), cpu)["skipped"].startswith("not on this device")


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["householder", "cholesky-qr2", "cholesky"])
def test_basis_routes_give_the_optimum_on_the_cpu(backend):
    from benchmarks.experiments import basis_routes

    res = basis_routes.measure(dict(backend=backend, modules=2, d=24, D=40, r=16, p=4, client_rank=8, repeats=2),
                               torch.device("cpu"))
    eps32 = torch.finfo(torch.float32).eps
    assert 0 <= res["excess_max"] <= 100 * eps32 and res["orthogonality"] <= 100 * 16 * eps32
    assert res["timing"]["median"] > 0 and res["basis_timing"]["median"] > 0


def test_analytic_workspace_counts_each_tensor_once():
    from benchmarks.experiments.workspace import analytic_workspace

    # d = 64, D = 256, r = 16 (s = 16), p = 4: 64*16 + 16*16 + 16*256 + 16*16 + 320*4 elements
    assert analytic_workspace(64, 256, 16, 4) == 4 * (1024 + 256 + 4096 + 256 + 1280)
    # r > d: s = d
    assert analytic_workspace(8, 32, 20, 2) == 4 * (8 * 20 + 8 * 20 + 8 * 32 + 64 + 40 * 2)


# ----------------------------------------------------------------------------- on a GPU


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_experiments_run_and_agree_with_the_cpu():
    from benchmarks.experiments import basis_routes, eigh_routes, tf32, workspace

    gpu = torch.device("cuda")
    base = dict(batch=8, r=48, D=200, repeats=2)
    eps32 = torch.finfo(torch.float32).eps
    for route in eigh_routes.ROUTES:
        res = eigh_routes.measure(dict(base, route=route), gpu)
        if "skipped" in res:
            assert route.startswith("cupy") and "cupy does not import" in res["skipped"]
            continue
        assert res["eigenvalue_error"] <= 100 * 48 * eps32 and res["residual"] <= 100 * 48 * eps32, (route, res)
    for backend in ("householder", "cholesky-qr2"):
        res = basis_routes.measure(dict(backend=backend, modules=2, d=96, D=160, r=32, p=4, client_rank=8,
                                        repeats=2), gpu)
        assert res["excess_max"] <= 1e3 * eps32 and res["timing"]["device"].startswith("cuda")
    res = workspace.measure(dict(source="fig3", modules=2, d=256, D=256, r=32, p=8, client_rank=8), gpu)
    assert res["peak_bytes"] > 0 and res["ratio"] > 0
    c = dict(method="fraq", kappa=1e2, m=64, n=64, rank=16, clients=4, batch=2)
    on, off = (tf32.measure(dict(c, tf32=mode), gpu) for mode in ("on", "off"))
    assert on["allow_tf32"] is True and off["allow_tf32"] is False
    assert max(off["relative_error"]) <= 1e3 * eps32


# ----------------------------------------------------------------------------- the report's GPU section


def _write(out: Path, experiment: str, key: str, config: dict, result: dict, device: str) -> None:
    from benchmarks.results import result_record

    rec = result_record(experiment, key, dict(config, size="paper"), result)
    rec["device"] = rec["machine"]["device"] = device
    rec["machine"]["gpu"] = "NVIDIA H100 80GB HBM3" if device.startswith("cuda") else None
    (out / experiment).mkdir(parents=True, exist_ok=True)
    (out / experiment / f"{key}.json").write_text(json.dumps(rec))


def _gpu_results(out: Path, device: str, fraq_ms: float, florist_ms: float, ratio: float) -> None:
    def row(method, name, ms):
        return dict(method=method, name=name, options={"tau": 0.95}, downlink_pct=10.0,
                    latency=dict(samples=[ms / 1e3] * 6, median=ms / 1e3, q25=ms / 1e3, q75=ms / 1e3))

    _write(out, "tables123", "roberta-base", dict(table="tables123", preset="roberta-base", part="shared"),
           dict(preset="roberta-base", rows=[row("fraq (tau=0.95)", "fraq", fraq_ms),
                                             row("florist (tau=0.90)", "florist", florist_ms)]), device)
    _write(out, "workspace", "fig3-12x768x768-r80", dict(source="fig3", modules=12, d=768, D=768, r=80, p=8),
           dict(peak_bytes=100, analytic_bytes=100, ratio=ratio), device)


@pytest.mark.parametrize("fraq_ms,florist_ms,ratio,words", [
    (1.0, 20.0, 1.2, ["agrees", "agrees", "agrees"]),
    (2.0, 20.0, 2.0, ["disagrees", "disagrees", "disagrees"]),
])
def test_gpu_section_judges_gpu_results_against_the_targets(tmp_path, fraq_ms, florist_ms, ratio, words):
    import analysis
    from analysis.sections import gpu

    _gpu_results(tmp_path, "cuda:0", fraq_ms, florist_ms, ratio)
    body = gpu.draw(analysis.load(tmp_path))[0].body
    verdicts = re.findall(r"\*\*(agrees|disagrees|inconclusive|no verdict)\*\*", body)
    assert verdicts == words, body
    assert "14.3" in body and "NVIDIA H100" in body  # the paper's GH200 number beside ours, the GPU named


def test_a_presets_rows_come_from_its_shared_and_its_others_point(tmp_path):
    """At the ``gpu`` size a preset's rows are in two records (the headline rows' point and
    ``<preset>-others``): the table holds both points' rows, and the verdicts, which pair
    FRAQ with FLoRIST in the headline point, are the ones a single record gives."""
    import analysis
    from analysis.sections import gpu
    from analysis.sections.tables123 import tables123_rows

    _gpu_results(tmp_path, "cuda:0", 1.0, 20.0, 1.2)
    alone = gpu.draw(analysis.load(tmp_path))[0].body
    other = dict(method="fedit", name="fedit", options={}, downlink_pct=10.0,
                 latency=dict(samples=[3e-3] * 5, median=3e-3, q25=3e-3, q75=3e-3))
    _write(tmp_path, "tables123", "roberta-base-others", dict(table="tables123", preset="roberta-base", part="others"),
           dict(preset="roberta-base", rows=[other]), "cuda:0")
    df = analysis.load(tmp_path)
    rows = tables123_rows(df["tables123"])
    assert sorted(rows[rows["preset"] == "roberta-base"]["name"]) == ["fedit", "florist", "fraq"]
    assert gpu.draw(analysis.load(tmp_path))[0].body == alone


def test_gpu_section_prints_no_nan_for_a_point_not_measured(tmp_path):
    """FRAQ's row without samples: its verdicts say "not measured", naming it, and no NaN is printed."""
    import analysis
    from analysis.sections import gpu

    _gpu_results(tmp_path, "cuda:0", 1.0, 20.0, 1.2)
    f = tmp_path / "tables123" / "roberta-base.json"
    rec = json.loads(f.read_text())
    rec["result"]["rows"][0]["latency"]["samples"] = []
    f.write_text(json.dumps(rec))
    from analysis.notes import NotMeasured

    with pytest.warns(NotMeasured):
        body = gpu.draw(analysis.load(tmp_path))[0].body
    lines = [x for x in body.splitlines() if x.startswith("- roberta-base")]
    assert len(lines) == 2 and all("**no verdict** (not measured: " in x for x in lines), body
    assert not re.search(r"\bnan\b", body, re.IGNORECASE), body


def test_gpu_section_says_when_there_are_no_gpu_results(tmp_path):
    import analysis
    from analysis.sections import gpu

    _gpu_results(tmp_path, "cpu", 1.0, 20.0, 1.2)
    body = gpu.draw(analysis.load(tmp_path))[0].body
    assert body.startswith("No GPU results here") and "**" not in body and "target" not in body.lower()


@pytest.mark.integration
def test_a_later_call_adds_to_the_earlier_results(tmp_path, capsys):
    """A second call into the same folder keeps the first call's result files, the archive's
    other members and the log (on a lent GPU, minutes of device time): the archive holds them
    after it, the summary says so, and the temporary file of a call stopped while writing is gone."""
    import io
    import tarfile

    from fraq.internals import machine_record

    out = tmp_path / "out"
    out.mkdir()
    sha = machine_record("cpu").get("git_sha")
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        for key in ("a", "b"):
            data = json.dumps({"experiment": "workspace", "key": key, "config": {"size": "tiny"},
                               "result": {"ratio": 1.25}, "device": "cpu", "git_sha": sha}).encode()
            info = tarfile.TarInfo(f"results/workspace/{key}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("README.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"notes"))
    (out / "gpu_check.log").write_text("the first call's log\n")
    (out / ".summary.md.tmp").write_text("")  # left by a call stopped while writing
    from benchmarks.gpu_check.__main__ import main

    assert main(["--out", str(out), "--device", "cpu", "--size", "tiny", "--budget-s", "20", "--parts", "device"]) == 0
    with tarfile.open(out / "results.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["README.txt", "results/workspace/a.json", "results/workspace/b.json"]
        assert tar.extractfile("README.txt").read() == b"notes"
    text = (out / "summary.md").read_text()
    assert "2 result files kept" in text and "peak / analytic from 1.25 to 1.25 over 2 points" in text
    assert (out / "gpu_check.log").read_text().startswith("the first call's log\n")
    assert (out / "device.json").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["device.json", "gpu_check.log", "results.tar.gz", "summary.md"]
    capsys.readouterr()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_terminating_the_check_leaves_no_child_or_work_folder(tmp_path):
    """SIGTERM to the check while a part runs: the part's process dies with it and the
    check's work folder under the temporary directory is removed."""
    import signal

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--size", "tiny",
                          "--budget-s", "60", "--parts", "fig3", "--out", str(tmp_path / "out")], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    child = None
    while child is None and time.time() < deadline:  # the part's process, started by the check
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                    if int(stat.split(") ")[-1].split()[1]) == p.pid:
                        child = int(d.name)
                except (OSError, ValueError, IndexError):
                    continue
        time.sleep(0.1)
    assert child is not None
    p.send_signal(signal.SIGTERM)
    p.wait(30)
    deadline = time.time() + 10
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.05)
    assert _gone(child), "the part's process outlived the check"
    assert not list(tmp.glob("fraq-gpu-check-*")), "the work folder was left behind"


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie not yet reaped counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] == "Z"
    except OSError:
        return True
