"""Flower's log lines in colour only at a terminal.

flwr's console handler writes ANSI colour codes whatever its stream is; in a log file
(``flwr-run.log``, ``make flower-local > log``) they read as ``\\x1b[92m``. Its logger is
configured here, once, when the Flower App's components are imported: coloured when stderr
is a terminal, plain otherwise. The processes :mod:`~fraq.federated.flower.local` starts
write into files and get ``NO_COLOR=1`` as well.
"""

from __future__ import annotations

import sys

from flwr.common.logger import update_console_handler

__all__ = ["colour_at_a_terminal_only"]


def colour_at_a_terminal_only(stream=None) -> bool:
    """Colour flwr's log lines only when ``stream`` (default stderr) is a terminal; returns whether it is."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    tty = bool(isatty and isatty())
    update_console_handler(colored=tty)
    return tty


colour_at_a_terminal_only()
