"""Measuring processes: started where they import this suite, and dying with their parent.

A fresh interpreter that times a launch (:mod:`benchmarks.measure.paired`), measures a
resident set (:mod:`benchmarks.measure.rss`) or runs a part of the GPU check must not
outlive its parent: one left running after its parent was killed competes for the cores
with the resumed run's timings (and on a GPU holds the device). On Linux the child asks the
kernel for SIGKILL when its parent exits (``prctl(PR_SET_PDEATHSIG)``), set between fork and
exec, and exits at once if the parent is already gone. Elsewhere nothing is set (the
children still end when their work does).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["child_env", "die_with_parent"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The directory holding the ``benchmarks`` package."""


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with ``extra`` set and :data:`ROOT` first on ``PYTHONPATH``:
    a child started as ``python -m benchmarks...`` imports the same suite wherever it runs
    (asv imports the suite from its own working directory, with nothing on the path)."""
    path = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return dict(os.environ, **extra, PYTHONPATH=path)

_PR_SET_PDEATHSIG = 1


def die_with_parent():
    """A ``preexec_fn`` for :mod:`subprocess` (None off Linux): the child is killed when the
    process that started it exits, however it exits (``kill -9`` included)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def preexec() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the request was in place
            os._exit(1)

    return preexec
