"""The GPU check's ``DIR``: one device, size and commit per folder.

A call adds to the results an earlier call left in ``DIR`` (:mod:`benchmarks.gpu_check.parent`).
That is only sound when the two measured the same thing, 

- :func:`refused` reads the earlier results (``results.tar.gz``'s records and
  ``device.json``) and names the first that was recorded on another device, at another
  ``--size`` or by another commit (the records' ``device``, ``config.size`` and
  ``git_sha``, :func:`fraq._results.result_record`): adding to them would leave one archive
  mixing points that no table may set side by side. Such a folder is refused before any
  work; the message says to give a new folder.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["refused"]

def _records(out: Path):
    """(where, device, size, git sha) of every earlier result of ``out``; a value the record
    lacks is ``...``. ArchiveError for a damaged archive."""
    from fraq.internals import open_tar_gz

    pack = out / "results.tar.gz"
    if pack.is_file():
        with open_tar_gz(pack) as tar:
            for m in tar.getmembers():
                parts = Path(m.name).parts
                if not (m.isfile() and len(parts) == 3 and parts[0] == "results" and m.name.endswith(".json")):
                    continue
                try:
                    rec = json.loads(tar.extractfile(m).read())
                except ValueError:
                    rec = None
                rec = rec if isinstance(rec, dict) else {}
                config = rec.get("config") if isinstance(rec.get("config"), dict) else {}
                yield f"{pack.name}:{m.name}", rec.get("device", ...), config.get("size", ...), \
                    rec.get("git_sha", ...)
    try:
        rec = json.loads((out / "device.json").read_text())["record"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if isinstance(rec, dict):
        yield "device.json", rec.get("device", ...), None, rec.get("git_sha", ...)  # it records no size


def refused(out: Path, *, device: str, size: str, git_sha: str | None) -> str | None:
    """Why ``out``'s earlier results may not be added to by a call on ``device`` at ``size``
    from commit ``git_sha`` (one line), or None when they may (or there are none)."""
    from fraq.internals import ArchiveError

    here = dict(device=device, size=size, commit=git_sha)
    try:
        for where, *seen in _records(out):
            for (what, mine), theirs in zip(here.items(), seen):
                if theirs is None and what == "size":
                    continue
                if theirs is ...:
                    return (f"--out(={str(out)!r}) holds {where}, which records no {what}: this call cannot tell "
                            "whether it measured the same thing; give a new directory")
                if theirs != mine:
                    return (f"--out(={str(out)!r}) holds results of {what} {theirs!r} ({where}), this call's is "
                            f"{mine!r}: one folder holds one device, size and commit; give a new directory")
    except ArchiveError as exc:
        return f"--out(={str(out)!r}): {exc}; it is left as it is (move it aside to start afresh)"
    return None
