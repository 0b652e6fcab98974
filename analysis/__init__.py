"""Result files -> checked, tidy DataFrames -> figures, tables, verdicts and the report.

``analysis.load()`` is the one call a notebook makes (:mod:`analysis.resultset`); the
figure, table and verdict functions take its frames. Nothing here measures.
"""

from analysis.resultset import MixedResults, NoResults, Results, load

__all__ = ["load", "Results", "NoResults", "MixedResults"]
