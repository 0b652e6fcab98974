"""What the report sections' verdict lines share: how a verdict is written beside our
number (:func:`_ours`), and the samples of a result as an array. Each section owns its own
verdicts, next to what it draws (``analysis/sections/<name>.py``: ``fig1_lines``,
``fig3_lines`` and ``table5_lines``, ``fig4_lines``, ``table4_lines``, ``backends_lines``,
Tables 1-3's ``verdict_lines``); the claims they test are quoted from the paper or read
from ``analysis/paper.json``, nothing typed by hand.

Every agree/disagree statement is a :class:`analysis.verdicts.Verdict` and prints the
interval it rests on (:data:`analysis.verdicts.HOW` says how it is computed); a claim over
a point that was not measured gets no verdict, and the point is named.
"""

from __future__ import annotations

import numpy as np

from analysis.verdicts import Verdict

__all__: list[str] = []  # helpers of analysis.sections only


def _ours(v: Verdict, text: str, fmt: str = ".3g", unit: str = "", test: str = "") -> str:
    """``Ours **word** (tested: test): text [lo, hi]``, or the points not measured."""
    tested = f" (tested: {test})" if test else ""
    if v.word == "no verdict":
        return f"Ours {v.bold()}{tested}: {v.interval()}"
    iv = v.interval(fmt, unit)
    return f"Ours {v.bold()}{tested}: {text} {iv if v.has_interval and iv != 'exact' else f'({iv})'}"


def _arr(x) -> np.ndarray:
    return np.asarray(x if isinstance(x, (list, tuple, np.ndarray)) else [x], dtype=float)


def _ms(row) -> np.ndarray:
    return 1e3 * _arr(row["timing.samples"])
