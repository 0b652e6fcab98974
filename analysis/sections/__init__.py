"""The report's sections: one module per figure or table, each drawn there and nowhere else.

Every section module exports

- ``reads``: the experiments (result directories, :mod:`benchmarks.experiments`) it
  draws from; the section is drawn when each of them has results (one that reads none,
  the GPU results, is drawn in every report: it says when there is nothing to judge);
- ``draw(res) -> list[Section]``: its part of ``report.md`` from the checked frames of
  :func:`analysis.load` (``res[experiment]``), as :class:`Section` objects: a title, the
  markdown body (tables, the verdict lines of :func:`analysis.verdicts.ours` or the section's
  own) and at most one :class:`Figure`.

:func:`analysis.reproduce.build` is one loop over :data:`analysis.reproduce.SECTIONS`:
it saves each figure (PNG and PDF, with its caption line) and writes the sections in the
registry's order. Adding a figure or a table to the report is a module here with those
two names and a line in that registry. Nothing here measures.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["Figure", "Section"]


@dataclass(frozen=True)
class Figure:
    """A figure of a section.

    Attributes:
        name: the file stem under ``figures/`` (``<name>.png`` and ``<name>.pdf``).
        fig: the matplotlib Figure.
        rows: the result rows behind it; its caption line (machine, dtype, threads,
            versions) is read from them (:func:`analysis.style.caption`).
        detail: what the caption adds after that line (sizes, what a band means).
        what: one sentence for the report: what the figure shows.
    """

    name: str
    fig: object
    rows: pd.DataFrame
    detail: str
    what: str


@dataclass(frozen=True)
class Section:
    """One titled part of ``report.md``: ``body`` is markdown, under the figure if there is
    one; ``level`` 2 is a section (``##``), 3 a subsection of the one before."""

    title: str
    body: str
    figure: Figure | None = None
    level: int = 2

    def __post_init__(self):
        if self.level not in (2, 3):
            raise ValueError(f"level(={self.level!r}) must be 2 (a section) or 3 (a subsection)")
