"""Per-launch medians of a paired timing and their spread: the variance between processes, shown.

A paired timing's samples come from ``launches`` processes one after another
(:mod:`benchmarks.measure.paired`), each sample recording its ``launch``. The median of all
samples hides how far the processes disagreed, and that disagreement (memory layout, which
core, the allocator's state: docs/performance.md records 10-20% between runs on one machine)
is the part of a time that a single process cannot show. So a row with samples from two or
more launches shows each launch's median and their spread, the largest launch median over the
smallest, minus one: ``launch medians 51.2 / 53.0 ms (3.5% apart)``. Max over min rather than a
standard deviation because there are two or three launches: the extremes are all there is, and
a ratio reads in the same terms as the drift it is compared with. A row from one launch gets
nothing: it has no spread to show, and "0% apart" would claim an agreement nobody measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["launch_medians", "launch_spread", "spread_text"]


def launch_medians(samples: Sequence[float], launch: Sequence[int] | None) -> list[float]:
    """The median of each launch's samples, in launch order; ``[]`` when ``launch`` is
    missing (results written without it), not one label per sample, or a sample is not a
    finite number: a spread is shown only where every sample is known to belong to its launch."""
    if launch is None or isinstance(launch, (str, bytes)) or len(launch) != len(samples) or not len(samples):
        return []
    x = np.asarray(samples, dtype=float)
    if not np.isfinite(x).all():
        return []
    labels = np.asarray(launch)
    return [float(np.median(x[labels == k])) for k in sorted(set(labels.tolist()))]


def launch_spread(medians: Sequence[float]) -> float | None:
    """The largest launch median over the smallest, minus one (0.1: the slowest launch 10%
    above the fastest); None for fewer than two launches or a median that is not positive."""
    if len(medians) < 2 or min(medians) <= 0:
        return None
    return max(medians) / min(medians) - 1


def spread_text(samples: Sequence[float], launch: Sequence[int] | None, *, scale: float = 1e3, unit: str = "ms",
                fmt: Callable[[float], str] | None = None) -> str:
    """``"51.2 / 53.0 ms (3.5% apart)"``: each launch's median times ``scale`` written by
    ``fmt`` (3 significant digits by default; a table passes its column's format), the unit,
    (none where ``unit`` is empty: a table's header names it) and :func:`launch_spread` in
    percent to one decimal (``0.0%``: under 0.05%); ``""`` for one launch."""
    medians = launch_medians(samples, launch)
    spread = launch_spread(medians)
    if spread is None:
        return ""
    write = fmt or (lambda v: f"{v:.3g}")
    unit = f" {unit}" if unit else ""
    return " / ".join(write(m * scale) for m in medians) + f"{unit} ({100 * spread:.1f}% apart)"
