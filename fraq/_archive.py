"""Results archives (``.tar.gz``) read only once their gzip checksum has been verified.

gzip ends each stream with the CRC-32 and length of the data it holds, and Python's
:mod:`gzip` checks them only when a read reaches that end. :mod:`tarfile` stops reading at
the tar's end-of-archive blocks, before the gzip trailer, so a bit flipped inside the
compressed data can inflate to other bytes that still parse as a tar of JSON files, with
changed numbers and no error. :func:`open_tar_gz` therefore reads the whole gzip stream to
its end first (checking CRC and length), then every tar header, and only then hands the
archive over. Results archives are small (kilobytes to a few megabytes), so the verified
bytes are kept in memory rather than read twice.

Every reader of a ``.tar.gz`` in the project (``analysis.reproduce``, the GPU check that
adds to an earlier call's archive) opens it here; a damaged archive is refused with one
:class:`ArchiveError` line naming the file, and nothing is written to it.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from pathlib import Path

__all__ = ["ArchiveError", "open_tar_gz"]


class ArchiveError(ValueError):
    """A ``.tar.gz`` that is not whole: its one line names the file and what is wrong."""


def open_tar_gz(path: str | Path) -> tarfile.TarFile:
    """The tar archive in the gzip file ``path``, its every member header already read.

    The gzip stream is read to its end (which verifies its CRC-32 and length), the tar is
    opened over the verified bytes and its headers are all read (which verifies their
    checksums and that no member runs past the end), before any member is returned.
    Use it as ``with open_tar_gz(p) as tar: ...``.

    Raises:
        ArchiveError: ``path`` cannot be read, is empty, is not gzip, fails gzip's checksum
            or length, is cut short, or is gzip holding something other than a tar.
    """
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            raise ArchiveError(f"{path} is empty: not a .tar.gz archive")
        with gzip.open(path, "rb") as f:
            raw = f.read()  # to the end of the stream: the CRC-32 and length are checked there
    except ArchiveError:
        raise
    except EOFError:
        raise ArchiveError(f"{path} is cut short: the gzip stream ends before its checksum") from None
    except gzip.BadGzipFile as exc:
        raise ArchiveError(f"{path} is damaged or not gzip ({exc})") from None
    except zlib.error as exc:
        raise ArchiveError(f"{path} is damaged: its compressed data does not inflate ({exc})") from None
    except OSError as exc:
        raise ArchiveError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")
        tar.getmembers()  # every header now: a damaged or cut-short tar fails here, not mid-use
    except tarfile.TarError as exc:
        raise ArchiveError(f"{path} is gzip but not a whole tar archive ({exc})") from None
    return tar
