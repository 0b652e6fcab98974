"""What a killed run leaves (:mod:`fraq._leftovers`, the GPU check's work folder and
``DIR/.NAME.tmp``, ``analysis.reproduce``'s unpacking folder): removed by the next run of
the same command when its process is gone, and nothing else ever removed."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from fraq._leftovers import alive, own_folder, remove_dead


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def live_pid():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p.pid
    p.kill()
    p.wait()


def _left(where: Path, prefix: str, dead: int, live: int) -> dict[str, Path]:
    """A dead run's folder, a live run's, and names that only look alike."""
    made = dict(dead=where / f"{prefix}{dead}-abcd_123", live=where / f"{prefix}{live}-abcd_123",
                nopid=where / f"{prefix}abcdefgh", longer=where / f"{prefix}{dead}-abcd_1234",
                other=where / f"x{prefix}{dead}-abcd_123", file=where / f"{prefix}{dead}-file_123")
    for name, path in made.items():
        if name == "file":
            path.write_text("not a folder")
        else:
            path.mkdir()
            (path / "inside").write_text("x")
    link = where / f"{prefix}{dead}-link_123"
    link.symlink_to(made["nopid"])
    made["link"] = link
    return made


def test_only_a_dead_runs_folder_of_the_exact_pattern_is_removed(tmp_path, live_pid):
    assert alive(live_pid) and alive(os.getpid()) and not alive(_dead_pid())
    made = _left(tmp_path, "fraq-x-", _dead_pid(), live_pid)
    assert remove_dead("fraq-x-", tmp_path) == [made["dead"]]
    assert not made["dead"].exists()
    assert all(p.exists() or p.is_symlink() for k, p in made.items() if k != "dead")


def test_own_folder_names_its_pid_and_is_never_removed_while_it_runs(tmp_path):
    mine = own_folder("fraq-x-", tmp_path)
    assert mine.name.startswith(f"fraq-x-{os.getpid()}-")
    assert remove_dead("fraq-x-", tmp_path) == [] and mine.is_dir()


def test_the_gpu_check_removes_a_killed_calls_work_folder(tmp_path, monkeypatch, live_pid):
    """The check's work folder carries its pid; one left by a killed check (SIGKILL skips the
    finally) goes at the next call, a running check's stays."""
    import tempfile

    from benchmarks.gpu_check.parent import WORK_PREFIX, check

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    made = _left(tmp, WORK_PREFIX, _dead_pid(), live_pid)
    assert check(tmp_path / "out", [], device=torch.device("cpu"), size="tiny", budget_s=20) == 0
    assert not made["dead"].exists()
    assert sorted(p.name for p in tmp.iterdir()) == sorted(p.name for k, p in made.items() if k != "dead")


def test_a_full_disk_leaves_no_temporary_archive_and_the_old_one_whole(tmp_path, monkeypatch):
    from benchmarks.gpu_check import parent

    out, work = tmp_path / "out", tmp_path / "work"
    (work / "results" / "fig3").mkdir(parents=True)
    (work / "results" / "fig3" / "k.json").write_text(json.dumps({"key": "k"}))
    out.mkdir()
    parent._pack(work, out)
    before = (out / "results.tar.gz").read_bytes()
    real = tarfile.TarFile.add

    def full(self, *a, **k):
        real(self, *a, **k)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "add", full)
    with pytest.raises(OSError, match="No space"):
        parent._pack(work, out)
    assert sorted(p.name for p in out.iterdir()) == ["results.tar.gz"]
    assert (out / "results.tar.gz").read_bytes() == before


def test_the_next_call_removes_the_tmp_files_of_a_stopped_one_only(tmp_path):
    from benchmarks.gpu_check import FILES
    from benchmarks.gpu_check.folder import remove_own_tmp

    for name in FILES:
        (tmp_path / f".{name}.tmp").write_text("")
    (tmp_path / "results.tar.gz").write_text("")
    remove_own_tmp(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.tar.gz"]


def test_a_killed_unpacking_is_removed_by_the_next(tmp_path, live_pid):
    from analysis import reproduce

    made = _left(tmp_path, ".results-unpacking-", _dead_pid(), live_pid)
    reproduce._unpack(tmp_path)  # no archive here: only the leftovers are looked at
    assert not made["dead"].exists()
    assert all(p.exists() or p.is_symlink() for k, p in made.items() if k != "dead")
