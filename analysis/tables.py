"""What the report's tables share: :func:`markdown` renders any table for ``report.md`` (no
extra dependency).

Each table is built by its report section (``analysis/sections/<name>.py``, beside its figure
and its verdicts): tidy rows in, a DataFrame shaped like the paper's table out.
"""

from __future__ import annotations

import pandas as pd

from analysis.columns import column_format, numbers

__all__ = ["markdown"]


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of ``df``: each column's numbers in the one format
    :func:`analysis.columns.column_format` chooses from the whole column, a missing value
    (None, NaN) as ``-``, anything else as its text."""
    cols = list(df.columns)
    fmts = {c: column_format(df[c]) for c in cols}

    def cell(c, v) -> str:
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            return "-"
        return fmts[c](v) if numbers([v]) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(cell(c, r[c]) for c in cols) + " |")
    return "\n".join(lines)
