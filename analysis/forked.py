"""Figure files written in forked children while the report goes on drawing.

Rendering a figure to PNG and PDF (``bbox_inches="tight"`` draws it once more per format)
is most of a report's build: about three quarters of ``analysis.reproduce`` on the reduced
results, one figure after another on one core. Within :func:`in_children`,
:func:`write` forks a child per figure that renders and writes it (the figure is the
parent's memory, copied on write: nothing is pickled), at most ``jobs`` children at a
time, while the parent draws the next figure; the block's end waits for every child.
The report is written after the block, so it never links a figure that is not written
yet. Measurements never run beside it: the report is drawn after the last of them.

What a child does is what the parent would have done: the files appear whole or not at
all (:func:`analysis.atomic.write_together`), a file that cannot be written raises
OSError naming it, in the parent, once every child is done (the first such error; the
old files stay), any other failure of a child is a note that the figure was not written
(:class:`analysis.notes.NotDrawn`, listed in the report, as a section whose drawing fails
is), and the warnings a child's rendering issues are issued again in the parent, in
order, when it is waited for. Without ``os.fork`` (or outside the block)
:func:`write` writes in the caller.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["in_children", "write"]

_ACTIVE: list[dict] = []
"""The open :func:`in_children` blocks, innermost last: ``jobs``, the ``running`` children
(``(pid, read end of its pipe, the paths it writes)``) and the ``errors`` of those waited for."""


@contextlib.contextmanager
def in_children(jobs: int | None = None) -> Iterator[None]:
    """Within the block :func:`write` writes in forked children, at most ``jobs`` at a time
    (default: the CPUs this process may run on, at most 2: the parent draws beside them).
    Leaving the block waits for every child; the first that failed raises its OSError."""
    if jobs is None:
        jobs = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if jobs < 1:
        raise ValueError(f"jobs(={jobs}) must be >= 1")
    block = {"jobs": jobs, "running": [], "errors": []}
    _ACTIVE.append(block)
    try:
        yield
    finally:
        _ACTIVE.remove(block)
        while block["running"]:
            _wait(block)
    if block["errors"]:
        raise block["errors"][0]


def write(paths: list[Path], fn: Callable[[], list[Path]]) -> list[Path]:
    """``fn()`` (which writes ``paths``) in a forked child inside :func:`in_children`, else
    here. Returns ``paths``: inside the block, the files are whole once the block ends."""
    if not _ACTIVE or not hasattr(os, "fork"):
        return fn()
    block = _ACTIVE[-1]
    while len(block["running"]) >= block["jobs"]:
        _wait(block)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write, report, leave without running the parent's cleanup
        os.close(r)
        code, out = 0, {}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
            out["warnings"] = [(w_.category, str(w_.message)) for w_ in caught]
        except OSError as e:
            code, out["oserror"] = 1, [e.errno, e.strerror, e.filename]
        except BaseException as e:  # noqa: BLE001 - said in the parent, which raises it there
            code, out["error"] = 1, f"{type(e).__name__}: {e}"
        try:
            try:
                data = pickle.dumps(out)
            except Exception:  # noqa: BLE001 - a category that does not pickle: said as a UserWarning
                out["warnings"] = [(UserWarning, m) for _, m in out.get("warnings", [])]
                data = pickle.dumps(out)
            with os.fdopen(w, "wb") as f:
                f.write(data)
        finally:
            os._exit(code)
    os.close(w)
    block["running"].append((pid, r, list(paths)))
    return list(paths)


def _wait(block: dict) -> None:
    """Wait for the oldest running child of ``block``; issue its warnings again and keep
    its error."""
    from analysis.notes import NotDrawn

    pid, r, paths = block["running"].pop(0)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    try:
        out = pickle.loads(data) if data else {}  # our own child's, of the classes this process holds
    except Exception:  # noqa: BLE001 - a child that died mid-write: its exit status says so below
        out = {}
    for category, message in out.get("warnings", []):
        warnings.warn(message, category, stacklevel=2)
    if "oserror" in out:
        errno_, strerror, filename = out["oserror"]
        block["errors"].append(OSError(errno_, strerror, filename))
    elif "error" in out or os.waitstatus_to_exitcode(status) != 0:
        why = out.get("error") or f"its writer's exit status {os.waitstatus_to_exitcode(status)}"
        warnings.warn(NotDrawn(f"figure {', '.join(str(p) for p in paths)} not written: {why}"), stacklevel=2)
