"""Folders a process works in and removes at its end, named after it so that the next run
can remove what a killed one left.

A folder made by :func:`own_folder` is ``<prefix><pid>-<8 characters>`` (:func:`tempfile.mkdtemp`'s
random tail after the creating process's id). A process removes its own folder on the way
out, but SIGKILL (or a crash of the interpreter) skips every ``finally``; the next run of the
same command calls :func:`remove_dead` with the same prefix, which removes a folder only
when all of these hold:

- its name is exactly the pattern above for that prefix (nothing else is touched, whatever
  it is called);
- it is a directory, not a link to one, and belongs to this user;
- the process that made it is gone (``kill(pid, 0)`` says no such process).

A folder of a process still running, here or under another user, stays: two runs at once
never remove each other's work. A process id reused by another process keeps the folder of
the dead one until that process ends too: a folder is left rather than one removed in use.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["alive", "own_folder", "remove_dead"]

_TAIL = r"(\d+)-[a-z0-9_]{8}"
"""The pid, then :func:`tempfile.mkdtemp`'s eight random characters (lowercase letters, digits, _)."""


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a process of another user counts: it exists)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def own_folder(prefix: str, dir: str | Path | None = None) -> Path:
    """A new folder ``dir/<prefix><pid>-XXXXXXXX`` (``dir``: the temporary directory when None)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=dir))


def remove_dead(prefix: str, dir: str | Path | None = None) -> list[Path]:
    """Remove the folders of ``dir`` that :func:`own_folder` made with ``prefix`` for a process
    now gone (the rules in the module's docstring); returns those removed."""
    where = Path(tempfile.gettempdir() if dir is None else dir)
    pattern = re.compile(re.escape(prefix) + _TAIL)
    removed = []
    try:
        entries = list(where.iterdir())
    except OSError:
        return removed
    for path in entries:
        m = pattern.fullmatch(path.name)
        if m is None or int(m.group(1)) == os.getpid() or alive(int(m.group(1))):
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid():
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed
