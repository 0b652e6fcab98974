"""The GPU check's ``DIR``: one call at a time, one device, size and commit per folder.

A call adds to the results an earlier call left in ``DIR`` (:mod:`benchmarks.gpu_check.parent`).
That is only sound when the two measured the same thing, and when they do not overlap:

- :func:`held` locks ``DIR`` for the call: ``DIR/.gpu_check.lock`` is created with
  ``O_CREAT | O_EXCL`` (one creator wins, on every local filesystem and NFSv3+) and holds
  the caller's pid; it is removed when the call ends. A lock whose pid is running refuses
  the call, naming the pid. A lock whose pid is gone (a call killed with SIGKILL) is taken
  over: renamed aside to a name of the taker's own, read again there, and deleted only if
  it still names the dead pid (a live call's fresh lock, renamed by a taker that read the
  old one a moment before, is linked back), so two takers never both hold ``DIR``.
- :func:`refused` reads the earlier results (``results.tar.gz``'s records and
  ``device.json``) and names the first that was recorded on another device, at another
  ``--size`` or by another commit (the records' ``device``, ``config.size`` and
  ``git_sha``, :func:`fraq._results.result_record`): adding to them would leave one archive
  mixing points that no table may set side by side. Such a folder is refused before any
  work; the message says to give a new folder.
- :func:`remove_own_tmp` removes the ``.NAME.tmp`` files an earlier call was writing when
  it was stopped (a full disk, SIGKILL): only those names, and only under the lock, since
  a running call is the only writer of them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from benchmarks.gpu_check import FILES

__all__ = ["LOCK", "held", "refused", "remove_own_tmp", "temporary_names"]

LOCK = ".gpu_check.lock"
"""The lock file's name in ``DIR``."""


def temporary_names() -> set[str]:
    """The names a running call writes beside its files in ``DIR`` (and the lock)."""
    return {f".{name}.tmp" for name in FILES} | {LOCK}


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _create(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def _take(out: Path) -> Path:
    """``out``'s lock, taken (see the module's docstring); ValueError naming a live holder."""
    from fraq.internals import alive

    lock = out / LOCK
    for _ in range(5):
        if _create(lock):
            return lock
        pid = _pid_in(lock)
        if pid is None:  # being written this instant, or emptied by hand: let its creator finish
            import time

            time.sleep(0.2)
            pid = _pid_in(lock)
        if pid is not None and alive(pid):
            raise ValueError(f"--out(={str(out)!r}) is in use by the GPU check of pid {pid} ({lock} holds it): "
                             "wait for it to end, or give another directory")
        aside = out / f"{LOCK}.{os.getpid()}"
        try:
            os.rename(lock, aside)
        except FileNotFoundError:
            continue  # another taker moved it first: try again from the start
        if _pid_in(aside) == pid:
            aside.unlink()
            print(f"taking over {lock}: its pid {pid if pid is not None else '(none)'} is not running",
                  file=sys.stderr)
        else:  # a live call's fresh lock: put back unless yet another lock is there now
            try:
                os.link(aside, lock)
            except FileExistsError:
                pass
            aside.unlink()
    raise ValueError(f"--out(={str(out)!r}): its lock {lock} changed hands five times while being taken: "
                     "another GPU check is starting there")


class held:
    """``with held(out):`` the lock on ``out`` (made if missing) for the block; ValueError
    at the start when another call holds it."""

    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.lock = _take(out)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if _pid_in(self.lock) == os.getpid():
            self.lock.unlink(missing_ok=True)
        return False


def remove_own_tmp(out: Path) -> None:
    """The ``.NAME.tmp`` files of ``out`` (NAME one of :data:`~benchmarks.gpu_check.FILES`)
    removed; nothing else is touched. Call it holding the lock."""
    for name in FILES:
        (out / f".{name}.tmp").unlink(missing_ok=True)


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
