"""Argument types the benchmarks' front doors share (argparse ``type=`` callables)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def positive(text: str) -> int:
    """An int of at least 1, else argparse's error with the value."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def names_of(flag: str, choices: Sequence[str]) -> Callable[[str], list[str]]:
    """The ``type=`` of a comma-separated list drawn from ``choices``: the names in order, or
    argparse's error naming ``flag``, its value and the choices (an empty list too)."""

    def parse(text: str) -> list[str]:
        names = [n for n in text.split(",") if n]
        if not names or any(n not in choices for n in names):
            raise argparse.ArgumentTypeError(f"{flag}(={text!r}): a comma-separated list of {', '.join(choices)}")
        return names

    return parse
