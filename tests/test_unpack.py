"""``analysis.reproduce`` unpacking a run's ``results.tar.gz``: whole or not at all."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from analysis import reproduce


def _pack(out, n=5):
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        for i in range(n):
            data = json.dumps({"key": f"k{i}"}).encode()
            info = tarfile.TarInfo(f"results/fig3/k{i}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_an_interrupted_unpacking_leaves_nothing_to_draw_and_the_rerun_unpacks_all(tmp_path, monkeypatch):
    _pack(tmp_path)
    real, seen = tarfile.TarFile.extractfile, []

    def interrupted(self, member):
        seen.append(member)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return real(self, member)

    monkeypatch.setattr(tarfile.TarFile, "extractfile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reproduce._unpack(tmp_path)
    assert not (tmp_path / "results").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.tar.gz"]  # nothing left beside
    monkeypatch.setattr(tarfile.TarFile, "extractfile", real)
    reproduce._unpack(tmp_path)
    assert sorted(p.name for p in (tmp_path / "results" / "fig3").iterdir()) == [f"k{i}.json" for i in range(5)]


def test_a_member_outside_results_is_refused_and_nothing_is_unpacked(tmp_path):
    _pack(tmp_path)
    with tarfile.open(tmp_path / "x.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("elsewhere.txt")
        tar.addfile(info, io.BytesIO(b""))
    (tmp_path / "x.tar.gz").replace(tmp_path / "results.tar.gz")
    with pytest.raises(ValueError, match="elsewhere.txt"):
        reproduce._unpack(tmp_path)
    assert not (tmp_path / "results").exists()


def test_the_folders_tar_records_are_skipped(tmp_path):
    """``tar czf results.tar.gz results`` records ``results/`` and ``results/<experiment>/`` as
    members of their own (the committed docs/results/paper archive does): skipped, the files
    unpacked; a folder elsewhere is still refused."""
    with tarfile.open(tmp_path / "results.tar.gz", "w:gz") as tar:
        for name in ("results", "results/fig3"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        data = json.dumps({"key": "k0"}).encode()
        info = tarfile.TarInfo("results/fig3/k0.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    reproduce._unpack(tmp_path)
    assert [p.name for p in (tmp_path / "results" / "fig3").iterdir()] == ["k0.json"]
    other = tmp_path / "other"
    other.mkdir()
    with tarfile.open(other / "results.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("elsewhere")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    with pytest.raises(ValueError, match="elsewhere"):
        reproduce._unpack(other)
