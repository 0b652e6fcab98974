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

The rules every output follows (checked before any work by :func:`check_parent` and
:func:`check_file_target`, and again at the swap):

- A symbolic link is followed: its target is replaced and the link stays, for files and
  directories alike.
- An existing output that is not a regular file (a FIFO, a device such as ``/dev/null``, a
  socket) is refused: replacing it would turn it into a regular file. A command that can
  write to stdout says that ``-`` does.
- A replaced output keeps the old one's permission bits (and group, where the owner may
  set it); a new one gets ``0o666`` (directories ``0o777``) less the umask.
- The current directory and a mount point cannot be renamed, so they are refused up front
  with a suggestion to write into a subdirectory.
- A failure while writing (a full disk, the file-size limit ``ulimit -f``) leaves the old
  output whole and is raised as an :class:`OSError` naming the output and the reason,
  whatever library wrote the data (safetensors and ``torch.save`` raise their own types).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import sys
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LeftoverWarning", "check_dir_out", "check_file_target", "check_parent", "default_mode", "file_target",
           "leftovers_as_lines", "replacing_dir", "replacing_file"]

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


def failed_write(err: OSError) -> str:
    """A failed write as one line naming the file: ``cannot write PATH: REASON`` (an OSError
    from ``open``, ``mkdir`` or ``rename`` carries the path), else the error's own message
    (those of :func:`replacing_file` and :func:`replacing_dir` already name it)."""
    if err.filename is not None:
        other = f" -> {err.filename2}" if err.filename2 is not None else ""
        return f"cannot write {err.filename}{other}: {err.strerror or err}"
    return str(err)


def default_mode(path: str | os.PathLike) -> None:
    """Give a file the permissions ``open`` would, 0o666 less the umask (safetensors creates its files 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def check_parent(path: Path, what: str) -> None:
    """Refuse ``path`` before any work when it cannot be swapped in: its directory cannot be
    created or written (the nearest existing ancestor must be a writable directory), or it
    is the current directory or a mount point, which ``rename(2)`` cannot replace."""
    path = Path(path)
    _check_swappable(path, what)
    _check_writable_ancestor(path, path.parent, what)


def _check_writable_ancestor(path: Path, start: Path, what: str) -> None:
    """The nearest existing ancestor of ``start`` (itself included) is a writable directory, and
    no link on the way dangles: where ``path`` (the argument ``what``) would be created."""
    nearest = start
    while not nearest.exists():
        if nearest.is_symlink():
            raise ValueError(f"{what}(={str(path)!r}): {nearest} is a dangling symbolic link")
        nearest = nearest.parent
    if not nearest.is_dir():
        raise ValueError(f"{what}(={str(path)!r}): {nearest} is not a directory")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ValueError(f"{what}(={str(path)!r}): directory {nearest} is not writable")


def _check_swappable(path: Path, what: str) -> None:
    if path.name in ("", ".", "..") or path.is_symlink():
        real = Path(os.path.realpath(path))
    else:
        real = Path(os.path.realpath(path.parent)) / path.name
    if not real.exists():
        return
    here = Path(os.path.realpath(os.getcwd())) if os.path.exists(".") else None
    if real == here:
        raise ValueError(f"{what}(={str(path)!r}) is the current directory, which cannot be replaced whole: "
                         f"write into a subdirectory, e.g. {str(path / 'out')!r}")
    if os.path.ismount(real):
        raise ValueError(f"{what}(={str(path)!r}) is a mount point, which cannot be replaced whole: "
                         f"write into a subdirectory, e.g. {str(path / 'out')!r}")


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def file_target(path: str | os.PathLike, what: str = "path", *, dash: bool = False) -> Path:
    """The file a write to ``path`` replaces: ``path`` itself, or for a symbolic link the
    file it points to (the link stays, as for a directory output). ValueError, one line,
    when something other than a regular file is there; ``dash``: the command writes to
    stdout for ``-``, and the message says so."""
    path = Path(path)
    hint = "; '-' writes to stdout" if dash else ""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there (check_parent names a file on the way)
        mode = None
    except OSError as e:  # a loop of links, no permission
        raise ValueError(f"{what}(={str(path)!r}) cannot be examined ({e.strerror}): give another path") from None
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            raise ValueError(f"{what}(={str(path)!r}) is a directory; give the path of a file{hint}")
        raise ValueError(f"{what}(={str(path)!r}) is {_kind(mode)}, not a regular file, and would be replaced "
                         f"by one: give the path of a regular file{hint}")
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_file_target(path: str | os.PathLike, what: str, *, dash: bool = False) -> Path:
    """Check a file output before any work: :func:`file_target` (a regular file or none,
    symbolic links followed) and :func:`check_parent` on the file that will be written.
    Returns that file."""
    target = file_target(path, what, dash=dash)
    check_parent(target, what)
    return target


def check_dir_out(path: str | os.PathLike, what: str) -> None:
    """Refuse, before any work, a directory output that is something else (a file, a
    FIFO) or cannot be created: its nearest existing ancestor must be a writable
    directory. For outputs written file by file into the directory (not swapped whole)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as e:
        raise ValueError(f"{what}(={str(path)!r}) cannot be examined ({e.strerror}): give another directory") from None
    if mode is not None and not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else _kind(mode)
        raise ValueError(f"{what}(={str(path)!r}) is {kind}, not a directory: give a directory (it is created "
                         f"when missing)")
    _check_writable_ancestor(path, path, what)


def _keep_mode(new: Path, old: Path, default: int) -> None:
    """Give ``new`` the permission bits and group of ``old`` when it exists, else ``default``
    less the umask. The group is kept only where the owner may set it."""
    try:
        st = os.stat(old)
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(new, default & ~mask)
        return
    if st.st_gid != os.stat(new).st_gid:
        try:
            os.chown(new, -1, st.st_gid)
        except OSError:
            pass
    os.chmod(new, stat.S_IMODE(st.st_mode))


def _keep_modes(new: Path, old: Path) -> None:
    """:func:`_keep_mode` for a directory swapped in whole: the directory itself, and every
    file in it that replaces a regular file of the same relative path in the old one."""
    if old.is_dir():
        for root, _, files in os.walk(new):
            for name in files:
                rel = (Path(root) / name).relative_to(new)
                if (old / rel).is_file() and not (old / rel).is_symlink():
                    _keep_mode(Path(root) / name, old / rel, 0o666)
    _keep_mode(new, old, 0o777)


def _write_failed(path: Path, err: BaseException) -> OSError | None:
    """An OSError naming ``path`` for a failure while writing that a library raised as
    its own type (safetensors' SafetensorError, torch.save's RuntimeError) or that an
    OSError reports without a file name (a ``write`` past a full disk or the file-size
    limit: ``[Errno 27] File too large``); None for anything else, which is left as it is
    (an OSError from ``open`` or ``rename`` names its file already)."""
    unnamed = isinstance(err, OSError) and err.filename is None
    if not unnamed and (isinstance(err, OSError) or not (isinstance(err, RuntimeError)
                                                         or type(err).__name__ == "SafetensorError")):
        return None
    reasons = []
    try:
        fs = os.statvfs(path.parent)
        if fs.f_bavail * fs.f_frsize < 1 << 20:
            reasons.append("the disk is full")
    except OSError:
        pass
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            reasons.append(f"the file-size limit (ulimit -f) is {limit} bytes")
    except (ImportError, OSError, ValueError):
        pass
    lines = str(err).strip().splitlines() if not unnamed else [err.strerror or str(err)]
    detail = lines[-1][:200] if lines else type(err).__name__
    reason = f" ({' and '.join(reasons)})" if reasons else ""
    return OSError(f"cannot write {path}: {detail}{reason}; it was left as it was: free some space, raise the "
                   f"limit or write elsewhere")


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
    (flushed; the old file's mode and group, or 0o666 less the umask for a new one) is
    renamed over ``path``. A symbolic link is followed: its target is replaced, the link
    stays. Something other than a regular file at ``path`` is refused (ValueError) before
    the body runs. On an exception the temporary file is removed and ``path`` is
    untouched; a library's own error type for a failed write becomes an OSError naming
    ``path``."""
    path = file_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    try:
        with _write_failures_named(path):
            yield tmp
        _keep_mode(tmp, path, 0o666)
        _fsync(tmp)
        os.replace(tmp, file_target(path))  # again: a FIFO put there meanwhile is refused
        _fsync(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def _write_failures_named(path: Path) -> Iterator[None]:
    """A library's own error type for a failed write of ``path`` (a full disk inside
    safetensors or torch.save, say) raised as an OSError naming ``path``; other errors as they are."""
    try:
        yield
    except BaseException as e:
        failed = _write_failed(path, e)
        if failed is not None:
            raise failed from e
        raise


@contextmanager
def replacing_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty directory beside ``path``; on a normal exit it takes ``path``'s place.

    ``path`` missing (or an empty directory): one rename. ``path`` a directory with
    entries: one atomic exchange (:func:`exchange`), after which the old version, now at
    the temporary name, is removed. On an exception before the swap the temporary
    directory is removed and ``path`` is untouched. A symbolic link is followed: its
    target directory is replaced, the link stays. The new directory gets the old one's
    mode and group (a new one: 0o777 less the umask), and so does each file in it that
    replaces one of the same name; a library's own error type for a failed write becomes
    an OSError naming ``path``.
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    tmp.mkdir()
    swapped = False
    try:
        with _write_failures_named(path):
            yield tmp
        _keep_modes(tmp, path)
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
