"""How a table column's numbers are written: one format per column, chosen from all its values.

A table that prints ``5`` beside ``10.0``, or ``2722.2`` beside ``197,270``, makes the
reader wonder whether the digits mean something (were some values rounded, some exact?).
Every table of the report (:func:`analysis.tables.markdown`), every notebook table
(:func:`analysis.style.formatted`) and every column that composes several numbers in one
cell (a median with its quartiles) writes a column's numbers with the one format
:func:`column_format` chooses from the column's finite values:

- **integers** when every value is integral: ``768``, ``4096``; grouped by thousands
  (``197,270``) when the largest reaches 10,000, so the digits of large counts are legible;
- **e-notation with 3 significant digits** (``1.23e-06``) when the smallest nonzero
  magnitude is below 0.01 or the largest reaches 1e9: with at most 3 decimals fixed-point
  would keep under 2 significant digits of the one, and print ten and more digits of the
  other;
- **fixed-point** otherwise, with the same number of decimals for every value, grouped by
  thousands when the largest reaches 10,000. The decimals are the fewest (at most 3) at
  which every value is written exactly, when there are such (numbers given to a precision,
  as the paper's ``2722.2`` and ``197270.4``, keep their digits); else enough to give the
  smallest nonzero magnitude 3 significant digits, at most 3 (``0.0913`` -> ``0.091``, 2
  digits; a larger magnitude keeps more).

Zero is ``0`` in e-notation (``0.00e+00`` says nothing more). Values that are not finite
numbers (text, None, NaN) are left to the caller, which writes its own mark for a missing
value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

__all__ = ["column_format", "numbers"]

GROUP_FROM = 1e4
"""From this magnitude up, digits are grouped by thousands."""

SCI_BELOW, SCI_FROM = 1e-2, 1e9
"""A smallest nonzero magnitude below ``SCI_BELOW``, or a largest from ``SCI_FROM``: e-notation."""

MAX_DECIMALS = 3
"""The most decimals of a fixed-point column: a fourth would serve only magnitudes below
0.1 (from 0.01 up, 3 decimals keep at least 2 significant digits; below, e-notation), at the
price of a fourth digit on every larger value of the column."""

SIGNIFICANT = 3
"""Significant digits the smallest nonzero magnitude of a measured column keeps (the
report's intervals resolve a few per cent, so a third digit is the last that means
something)."""


def numbers(values: Iterable) -> list[float]:
    """The finite real numbers among ``values`` (bools, text, None, NaN and inf dropped)."""
    out = []
    for v in values:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def _exact(v: float, decimals: int) -> bool:
    return abs(v - round(v, decimals)) <= 1e-9 * max(1.0, abs(v))


def column_format(values: Iterable) -> Callable[[float], str]:
    """The format of a column holding ``values`` (the module docstring's rules), as a
    function of one finite number.

    >>> fmt = column_format([5.0, 10.0, 27.04])
    >>> [fmt(v) for v in (5.0, 10.0, 27.04)]
    ['5.00', '10.00', '27.04']
    >>> fmt = column_format([2722.2, 197270.4, 1.4])
    >>> [fmt(v) for v in (2722.2, 197270.4, 1.4)]
    ['2,722.2', '197,270.4', '1.4']
    """
    v = numbers(values)
    if not v:
        return lambda x: f"{x:g}"
    hi = max(abs(x) for x in v)
    group = "," if hi >= GROUP_FROM else ""
    if all(x == int(x) for x in v) and hi < 1e15:
        return lambda x: f"{int(round(x)):{group}d}"
    nonzero = [abs(x) for x in v if x != 0]
    lo = min(nonzero) if nonzero else hi
    if lo < SCI_BELOW or hi >= SCI_FROM:
        return lambda x: "0" if x == 0 else f"{x:.{SIGNIFICANT - 1}e}"
    decimals = next((d for d in range(MAX_DECIMALS + 1) if all(_exact(x, d) for x in v)), None)
    if decimals is None:
        decimals = min(MAX_DECIMALS, max(0, SIGNIFICANT - 1 - math.floor(math.log10(lo))))
    return lambda x: f"{x:{group}.{decimals}f}"
