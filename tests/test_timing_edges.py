"""Timings that have no ratio (zero, NaN, infinite) decide nothing in the paired comparison
(:func:`benchmarks.measure.paired.decided`)."""

from __future__ import annotations

import math

import pytest

from benchmarks.measure.paired import decided

ROUNDS = 8
"""More rounds than a 95% sign-test interval needs (6)."""


@pytest.mark.parametrize("bad", [0.0, math.nan, math.inf, -1.0])
@pytest.mark.parametrize("where", ["both", "first", "second", "one round"])
def test_a_timing_without_a_ratio_decides_nothing(bad, where):
    fast, slow = [1.0] * ROUNDS, [3.0] * ROUNDS
    assert decided({"a": fast, "b": slow}) and decided({"a": slow, "b": fast})  # the pair decides when whole
    a = [bad] * ROUNDS if where in ("both", "first") else list(fast)
    b = [bad] * ROUNDS if where in ("both", "second") else list(slow)
    if where == "one round":
        a[3] = bad
    assert not decided({"a": a, "b": b})
    assert not decided({"a": a, "b": b}, against="a")
    assert not decided({"a": a, "b": b}, pairs=[("b", "a")])


def test_two_zero_timings_are_not_an_infinite_ratio():
    assert not decided({"a": [0.0] * ROUNDS, "b": [0.0] * ROUNDS})
    assert not decided({"a": [1.0] * ROUNDS, "b": [0.0] * ROUNDS})
