"""Measuring processes that die with the process that started them.

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

__all__ = ["die_with_parent"]

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
