"""Results archives are read only once gzip's checksum is verified (:mod:`fraq._archive`):
a damaged archive is refused naming the file, or read to the very bytes it was written with."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from analysis import reproduce
from fraq.internals import ArchiveError, open_tar_gz
from tests.tiny_fixture import ARCHIVE

HEADER, TRAILER = 10, 8
"""gzip's fixed header (no name or comment: ``tarfile``'s writer through a file object) and its
CRC-32 + length trailer, in bytes."""


def _small_archive(path, n=3) -> dict[str, bytes]:
    """The first ``n`` result files of the recorded tiny run packed into ``path``; returns them."""
    with open_tar_gz(ARCHIVE) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    chosen = dict(sorted(members.items())[:n])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in chosen.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    return chosen


def _unpacked(out) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "results").rglob("*.json"))}


def test_every_single_bit_flip_is_refused_or_reads_the_written_bytes(tmp_path):
    """One bit flipped in each byte of the compressed data in turn (the bit moving through the
    byte): ``analysis.reproduce``'s unpacking either refuses the archive, naming it and leaving
    it as it is, or writes exactly the files that were packed."""
    out = tmp_path / "run"
    out.mkdir()
    pack = out / "results.tar.gz"
    written = _small_archive(pack)
    good = pack.read_bytes()
    refused = 0
    for pos in range(HEADER, len(good) - TRAILER):
        damaged = bytearray(good)
        damaged[pos] ^= 1 << (pos % 8)
        pack.write_bytes(bytes(damaged))
        try:
            reproduce._unpack(out)
        except ArchiveError as exc:
            refused += 1
            assert str(pack) in str(exc) and "\n" not in str(exc)
            assert pack.read_bytes() == bytes(damaged) and not (out / "results").exists()
            continue
        got = _unpacked(out)
        assert got == written, f"a flip at byte {pos} changed the unpacked files"
        for p in sorted((out / "results").rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        (out / "results").rmdir()
    assert refused > 0


@pytest.mark.parametrize("case", ["empty", "truncated", "garbage", "plain gzip", "trailer cut", "checksum"])
def test_an_archive_that_is_not_whole_is_refused_naming_the_file(tmp_path, case):
    pack = tmp_path / "results.tar.gz"
    _small_archive(pack)
    good = pack.read_bytes()
    damaged = {
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "garbage": bytes(range(256)) * 4,
        "plain gzip": gzip.compress(b'{"key": "not a tar"}\n' * 40),
        "trailer cut": good[:-4],
        "checksum": good[:-8] + bytes([good[-8] ^ 0xFF]) + good[-7:],
    }[case]
    pack.write_bytes(damaged)
    with pytest.raises(ArchiveError) as info:
        open_tar_gz(pack)
    assert str(pack) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ArchiveError, match="results.tar.gz"):
        reproduce._unpack(tmp_path)
    assert pack.read_bytes() == damaged and not (tmp_path / "results").exists()


def test_the_front_doors_refuse_a_damaged_archive_in_one_line(tmp_path, capsys):
    """``python -m analysis.reproduce`` and the GPU check (which adds to an earlier call's
    archive) stop with one line naming the archive, and leave it as it is."""
    from benchmarks.gpu_check.__main__ import main as gpu_check

    pack = tmp_path / "results.tar.gz"
    _small_archive(pack)
    damaged = pack.read_bytes()[:-4]
    pack.write_bytes(damaged)
    assert reproduce.main(["--out", str(tmp_path), "--no-pdf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and str(pack) in err and "\n" not in err
    assert gpu_check(["--out", str(tmp_path), "--device", "cpu", "--parts", "device"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and str(pack) in err and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.tar.gz"] and pack.read_bytes() == damaged
