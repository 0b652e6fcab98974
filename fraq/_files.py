"""Outputs that appear whole: at every moment an output path holds its complete old version
or its complete new one, never a mix, whatever fails or is killed in between.

Every writer of the project's user-facing files (:mod:`fraq.peft.writer` for ``fraq
aggregate``'s adapter, delta and JSON report, :mod:`fraq.federated.export`,
:func:`fraq.federated.adapters.save_client_adapters`) writes through the two context
managers here:

- :func:`replacing_file`: write a temporary file beside the target, then ``rename(2)`` it
  over the target (atomic on POSIX within one directory).
- :func:`replacing_dir`: build a temporary directory beside the target, then swap the two
  with one ``renameat2(RENAME_EXCHANGE)`` (Linux >= 3.15; ext4, xfs, btrfs, tmpfs), so the
  old directory stays at its path until the new one is complete and the swap itself is one
  system call. Where the exchange is not available (another OS, a filesystem without it)
  the fallback is two renames, old aside then new in, with the old put back if the second
  fails; only a kill between those two renames leaves the path missing (both versions stay
  beside it, as ``.NAME.old-*`` and ``.NAME.tmp-*``).

Data is flushed (``fsync``) before the swap, so after a crash of the machine the path does
not point at an empty file. A process killed mid-write leaves a hidden ``.NAME.tmp-*``
beside the target, never a damaged target. When the old version cannot be removed after
the swap (a file in it made immutable with ``chattr +i``), the new one stays in place and
a :class:`LeftoverWarning` names the hidden directory left behind.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LeftoverWarning", "check_parent", "default_mode", "leftovers_as_lines", "replacing_dir",
           "replacing_file"]

_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


class LeftoverWarning(UserWarning):
    """An output was replaced, but a temporary copy beside it (the old version) could not be removed."""


@contextmanager
def leftovers_as_lines(prog: str) -> Iterator[None]:
    """Print each :class:`LeftoverWarning` raised inside as one line ``PROG: warning: ...``
    (an output was replaced but the old copy beside it could not be removed); other warnings
    are shown as usual."""
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LeftoverWarning)
            yield
    finally:
        for w in caught:
            if issubclass(w.category, LeftoverWarning):
                print(f"{prog}: warning: {w.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def default_mode(path: str | os.PathLike) -> None:
    """Give a file the permissions ``open`` would, 0o666 less the umask (safetensors creates its files 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def check_parent(path: Path, what: str) -> None:
    """Refuse ``path`` before any work when its directory cannot be created or written:
    the nearest existing ancestor must be a writable directory."""
    parent = path.parent
    while not parent.exists():
        if parent.is_symlink():
            raise ValueError(f"{what}(={str(path)!r}): {parent} is a dangling symbolic link")
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{what}(={str(path)!r}): {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{what}(={str(path)!r}): directory {parent} is not writable")


def _sibling(path: Path, tag: str) -> Path:
    return path.parent / f".{path.name}.{tag}-{uuid.uuid4().hex[:8]}"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """Flush every file under ``path`` and the directories themselves."""
    for root, _, files in os.walk(path):
        for name in files:
            _fsync(Path(root) / name)
        _fsync(Path(root))


@contextmanager
def replacing_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on a normal exit the file written there
    (mode 0o666 less the umask, flushed) is renamed over ``path``. On an exception the
    temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        default_mode(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def replacing_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty directory beside ``path``; on a normal exit it takes ``path``'s place.

    ``path`` missing (or an empty directory): one rename. ``path`` a directory with
    entries: one atomic exchange (:func:`exchange`), after which the old version, now at
    the temporary name, is removed. On an exception before the swap the temporary
    directory is removed and ``path`` is untouched. A symbolic link is followed: its
    target directory is replaced, the link stays.
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    tmp.mkdir()
    swapped = False
    try:
        yield tmp
        _fsync_tree(tmp)
        if path.is_dir() and any(path.iterdir()):
            exchange(tmp, path)  # tmp now holds the old version
        else:
            os.replace(tmp, path)  # rename(2) replaces an empty directory
        swapped = True
        _fsync(path.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if tmp.exists():
            left = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if not p.is_dir())
            what = "the old version of" if swapped else "an incomplete new version of"
            warnings.warn(LeftoverWarning(
                f"{path} was {'replaced' if swapped else 'left as it was'}, but {what} it at {tmp} could not be "
                f"removed ({', '.join(left[:3]) or 'empty directories'} left; immutable? lsattr -R shows it): "
                f"remove it by hand"), stacklevel=3)


def exchange(a: Path, b: Path) -> None:
    """Swap two directories' names: one ``renameat2(RENAME_EXCHANGE)`` on Linux, so each
    path always holds one of the two. Elsewhere, or where the filesystem refuses the flag,
    two renames with ``b``'s old version put back if the second fails."""
    if _renameat2(a, b):
        return
    old = _sibling(b, "old")
    os.replace(b, old)
    try:
        os.replace(a, b)
    except BaseException:
        os.replace(old, b)
        raise
    os.replace(old, a)


def _renameat2(a: Path, b: Path) -> bool:
    """True when the kernel exchanged ``a`` and ``b``; False when the call is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # no RENAME_EXCHANGE here
        return False
    raise OSError(err, f"cannot exchange {a} and {b}: {os.strerror(err)}")
