"""Outputs that appear whole: every figure and report is written beside its target and
renamed into place, so a failed write (a read-only folder, a full disk, the file-size
limit) keeps the old file and raises an OSError naming the target.

The analysis imports nothing from the code it describes, so this is its own small copy of
the rule :mod:`fraq._files` follows for the library's outputs: a hidden temporary file in
the target's directory, ``os.replace`` over the target (atomic on POSIX within one
directory), the temporary removed on any failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["cannot_write", "write_text", "write_together"]


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


def write_together(paths: Sequence[Path], write: Callable[[Path, Path], None]) -> list[Path]:
    """Call ``write(tmp, target)`` for each of ``paths`` with a temporary file beside it; once
    all are written, rename each over its target. A failure leaves every target as it was and
    raises OSError naming the target (``exc.filename``) and the reason."""
    paths = [Path(p) for p in paths]
    tmps = []
    try:
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = _tmp(p)
            tmps.append(tmp)
            try:
                write(tmp, p)
            except OSError as e:
                raise OSError(e.errno, e.strerror or str(e), str(p)) from None
        for tmp, p in zip(tmps, paths):
            try:
                os.replace(tmp, p)
            except OSError as e:
                raise OSError(e.errno, e.strerror or str(e), str(p)) from None
    finally:
        for tmp in tmps:
            if tmp.exists():
                tmp.unlink()
    return paths


def write_text(path: Path, text: str) -> Path:
    """``text`` (UTF-8) at ``path``, whole (:func:`write_together`)."""
    write_together([path], lambda tmp, _: tmp.write_text(text, encoding="utf-8"))
    return Path(path)


def cannot_write(exc: OSError) -> str:
    """The one ``error:`` line's text for a file that could not be written (read-only folder,
    full disk, file-size limit): the file and the reason, or the error itself when it names no file."""
    return f"cannot write {exc.filename}: {exc.strerror}" if exc.filename is not None else str(exc)
