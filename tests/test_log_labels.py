"""Log axes labelled in one notation per axis, never matplotlib's ``2 x 10^0``
(:func:`analysis.style.log_labels`), on made-up lines over views of every kind."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from analysis import style  # noqa: E402


def _labels(lo: float, hi: float, axis: str = "y") -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style.setup()
    fig, ax = plt.subplots(figsize=(4, 3))
    x = np.geomspace(lo, hi, 7)
    ax.plot(x, x)
    ax.set_xscale("log")
    ax.set_yscale("log")
    style.log_labels(ax.yaxis if axis == "y" else ax.xaxis)
    fig.canvas.draw()
    which = ax.yaxis if axis == "y" else ax.xaxis
    vlo, vhi = which.get_view_interval()
    ticks = [(t.get_loc(), t.label1.get_text()) for t in which.get_major_ticks() + which.get_minor_ticks()]
    plt.close(fig)
    return [text for loc, text in sorted(ticks) if text and vlo <= loc <= vhi]  # the labels drawn, in order


def _kind(text: str) -> str:
    if "10^" in text:
        return "decade"
    if re.fullmatch(r"\d(\.\d)?e-?\d+", text):
        return "e"
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return "plain"
    return f"other: {text!r}"


@pytest.mark.parametrize("lo, hi, kind", [
    (0.9, 2.5, "plain"),  # under a decade: minor labels, "2" and not "2 x 10^0"
    (0.3, 40.0, "plain"),
    (1e-3, 2e4, "plain"),
    (2.2e-7, 1.9e-6, "e"),  # under a decade of small numbers: "2e-7", "5e-7", "1e-6"
    (1.0, 1e8, "decade"),  # many decades: 10^k alone
    (1e-7, 1e-2, "decade"),
])
def test_a_log_axis_has_one_notation_and_no_times_ten(lo, hi, kind):
    for axis in ("y", "x"):
        labels = _labels(lo, hi, axis)
        assert len(labels) >= 2, (lo, hi, labels)
        assert not any("times" in t or "×" in t for t in labels), labels
        assert {_kind(t) for t in labels} == {kind}, (lo, hi, labels)


def test_plain_labels_read_as_their_values():
    assert [style.log_tick(v) for v in (0.002, 2.0, 500.0, 20000.0)] == ["0.002", "2", "500", "20000"]
    assert [style.log_tick(v, plain=False) for v in (2e-7, 1e-6, 5e6)] == ["2e-7", "1e-6", "5e6"]
    assert style.log_tick(2e-7) == "2e-7" and style.log_tick(0.0) == ""
    labels = _labels(0.9, 2.5)
    assert labels == sorted(labels, key=float) and "2" in labels and "1" in labels  # each its tick's value
