"""The GPU check's ``DIR`` (:mod:`benchmarks.gpu_check.folder`): one call at a time, one
device, size and commit per folder; an earlier archive's other members kept; what a
stopped call left removed by the next, and nothing else."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from benchmarks.gpu_check import folder
from fraq.internals import machine_record

SHA = machine_record("cpu").get("git_sha")


def _record(key: str, *, device="cpu", size="tiny", sha=SHA) -> dict:
    return dict(experiment="workspace", key=key, config=dict(size=size), result=dict(ratio=1.25), device=device,
                git_sha=sha)


def _archive(out: Path, records: list[dict], extra: dict[str, bytes] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        for rec in records:
            data = json.dumps(rec).encode()
            info = tarfile.TarInfo(f"results/{rec['experiment']}/{rec['key']}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("earlier,named", [
    (dict(device="cuda:0"), "device 'cuda:0'"),
    (dict(size="reduced"), "size 'reduced'"),
    (dict(sha="0" * 40), "commit '0000000000"),
])
def test_results_of_another_device_size_or_commit_are_refused(tmp_path, earlier, named):
    _archive(tmp_path, [_record("a"), _record("b", **earlier)])
    why = folder.refused(tmp_path, device="cpu", size="tiny", git_sha=SHA)
    assert why is not None and named in why and "results/workspace/b.json" in why and "\n" not in why


def test_results_of_the_same_device_size_and_commit_are_added_to(tmp_path):
    assert folder.refused(tmp_path, device="cpu", size="tiny", git_sha=SHA) is None  # nothing yet
    _archive(tmp_path, [_record("a"), _record("b")])
    assert folder.refused(tmp_path, device="cpu", size="tiny", git_sha=SHA) is None


def test_a_record_that_does_not_say_is_refused_and_device_json_counts(tmp_path):
    rec = _record("a")
    del rec["device"]
    _archive(tmp_path, [rec])
    assert "records no device" in folder.refused(tmp_path, device="cpu", size="tiny", git_sha=SHA)
    other = tmp_path / "other"
    other.mkdir()
    (other / "device.json").write_text(json.dumps({"record": {"device": "cuda:0", "git_sha": SHA}}))
    assert "device 'cuda:0' (device.json)" in folder.refused(other, device="cpu", size="tiny", git_sha=SHA)


def test_a_cpu_call_into_a_gpu_folder_stops_before_any_work(tmp_path, capsys):
    from benchmarks.gpu_check.__main__ import main

    _archive(tmp_path, [_record("a", device="cuda:0")])
    before = (tmp_path / "results.tar.gz").read_bytes()
    assert main(["--out", str(tmp_path), "--device", "cpu", "--size", "tiny", "--budget-s", "20",
                 "--parts", "device"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "cuda:0" in err and "\n" not in err
    assert (tmp_path / "results.tar.gz").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.tar.gz"]  # no lock left


def test_a_live_lock_refuses_naming_its_pid(tmp_path):
    with folder.held(tmp_path) as lock:
        assert lock.lock.read_text().strip() == str(os.getpid())
        with pytest.raises(ValueError, match=f"pid {os.getpid()}") as exc:
            folder.held(tmp_path)
        assert "\n" not in str(exc.value)
    assert not (tmp_path / folder.LOCK).exists()  # removed at the end


def test_a_dead_lock_is_taken_over_in_one_line(tmp_path, capsys):
    pid = _dead_pid()
    (tmp_path / folder.LOCK).write_text(f"{pid}\n")
    with folder.held(tmp_path):
        assert (tmp_path / folder.LOCK).read_text().strip() == str(os.getpid())
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pid {pid} is not running" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_two_calls_at_once_one_refused(tmp_path):
    """Two checks started together into one new folder: one runs, the other stops at once
    with one line naming the first's pid (the lock is held for the whole call)."""
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from benchmarks.gpu_check.folder import held\n"
                               f"with held(Path({str(out)!r})):\n print('held', flush=True)\n time.sleep(30)\n"],
                              cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        p = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--out", str(out), "--device", "cpu",
                            "--size", "tiny", "--budget-s", "20", "--parts", "device"],
                           cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and f"pid {holder.pid}" in p.stderr and p.stderr.count("\n") == 1, p.stderr
        assert sorted(x.name for x in out.iterdir()) == [folder.LOCK]
    finally:
        holder.kill()
        holder.wait()


def test_repacking_keeps_the_members_the_check_does_not_write(tmp_path):
    """A README and notes under results/ stay in the archive, byte for byte, beside the results this call adds; a point measured again replaces its own."""
    from benchmarks.gpu_check.parent import _keep, _pack

    out, work = tmp_path / "out", tmp_path / "work"
    work.mkdir()
    extra = {"README.txt": b"measured on the lab's H200\n", "results/NOTES.md": b"# notes\n"}
    _archive(out, [_record("a"), _record("b")], extra)
    kept, others = _keep(out, work)
    assert kept == 2 and sorted(m.name for m, _ in others) == sorted(extra)
    (work / "results" / "workspace" / "b.json").write_text(json.dumps(_record("b") | {"result": {"ratio": 2.0}}))
    (work / "results" / "fig3").mkdir()
    (work / "results" / "fig3" / "c.json").write_text(json.dumps(_record("c")))
    _pack(work, out, others)
    with tarfile.open(out / "results.tar.gz") as tar:
        names = tar.getnames()
        assert sorted(names) == sorted(["results/workspace/a.json", "results/workspace/b.json", "results/fig3/c.json",
                                        *extra]), names
        for name, data in extra.items():
            assert tar.extractfile(name).read() == data
        assert json.loads(tar.extractfile("results/workspace/b.json").read())["result"]["ratio"] == 2.0
