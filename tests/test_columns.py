"""One format per table column (:mod:`analysis.columns`): chosen from all the column's values,
on made-up columns of mixed magnitudes, through the report's markdown tables too."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from analysis import tables  # noqa: E402
from analysis.columns import column_format  # noqa: E402


def _written(values):
    fmt = column_format(values)
    return [fmt(v) for v in values]


@pytest.mark.parametrize("values, expected", [
    ([5.0, 10.0, 27.04], ["5.00", "10.00", "27.04"]),  # not "5" beside "10.0"
    ([2722.2, 197270.4, 1.4], ["2,722.2", "197,270.4", "1.4"]),  # the paper's digits kept, grouped alike
    ([5.0, 100.0, 197270.0], ["5", "100", "197,270"]),  # counts as integers
    ([0.0913, 2645.584, 1.0], ["0.091", "2645.584", "1.000"]),  # 3 decimals: the smallest keeps 2 digits
    ([1e-6, 0.5, 0.0], ["1.00e-06", "5.00e-01", "0"]),  # the smallest below 0.01: e-notation for all
    ([1.5, 2.5e9], ["1.50e+00", "2.50e+09"]),  # ten digits and more: e-notation for all
    ([789.5761, 1875064.2738, 14662.1693], ["790", "1,875,064", "14,662"]),  # the smallest has 3 digits whole
])
def test_a_column_is_written_in_one_format(values, expected):
    assert _written(values) == expected


def _decimals(text: str) -> str:
    return "e" if "e" in text else str(len(text.partition(".")[2]))


def test_random_columns_of_mixed_magnitudes():
    """Seeded columns spanning 1e-4..1e8: one notation and one number of decimals per column,
    every value read back within half a unit of its last written digit, and a fixed-point
    column's smallest nonzero value keeping at least 2 significant digits."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 8))
        lo, hi = sorted(rng.uniform(-4, 8, 2))
        v = list(10 ** rng.uniform(lo, hi, n) * rng.choice([-1, 1], n))
        if rng.random() < 0.3:
            v = [round(x, int(rng.integers(0, 3))) for x in v]  # numbers given to a precision
        texts = _written(v)
        assert len({_decimals(t) for t in texts}) == 1, (v, texts)
        for x, t in zip(v, texts):
            back = float(t.replace(",", ""))
            if "e" in t:
                assert back == pytest.approx(x, rel=5e-3), (x, t)
            else:
                assert abs(back - x) <= 0.5 * 10.0 ** -int(_decimals(t)) * (1 + 1e-9), (x, t)
        fixed = "e" not in texts[0]
        small = min(abs(x) for x in v)
        if fixed and small > 0:
            d = int(_decimals(texts[0]))
            assert d >= 3 or small * 10 ** d >= 10 or all(x == round(x, d) for x in v), (v, texts)


def test_markdown_writes_each_column_in_one_format_and_leaves_text_alone():
    """Made-up rows as Tables 1-3 print them: a downlink column with an exact 5 beside 27.04,
    latencies from 1.4 ms to 197,270.4 ms, a missing value and text cells."""
    df = pd.DataFrame({"Method": ["a", "b", "c", "d"], "Downlink %": [5.0, 10.0, 27.04, None],
                       "paper ms": [1.4, 2722.2, 197270.4, math.nan], "samples": [6, 6, 2, 0],
                       "how": ["all 36 modules", "extrapolated", "-", "not measured: slow"]})
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in tables.markdown(df).splitlines()[2:]]
    assert [r[1] for r in rows] == ["5.00", "10.00", "27.04", "-"]
    assert [r[2] for r in rows] == ["1.4", "2,722.2", "197,270.4", "-"]
    assert [r[3] for r in rows] == ["6", "6", "2", "0"]
    assert [r[4] for r in rows] == ["all 36 modules", "extrapolated", "-", "not measured: slow"]
    for col in (1, 2):
        assert len({_decimals(r[col]) for r in rows if re.match(r"\d", r[col])}) == 1


def test_the_docstring_example_runs():
    import doctest

    import analysis.columns

    assert doctest.testmod(analysis.columns).failed == 0
