"""Text for ``--help``: docstrings without their reStructuredText markup."""

from __future__ import annotations

import re

__all__ = ["plain"]


def plain(text: str) -> str:
    """``text`` as a terminal shows it: ````code```` and ``:role:`name``` as their bare text."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text)
