"""analysis.verdicts: a verdict rests on an interval, so runs drawn from one distribution
never give opposite verdicts; a point not measured gets no verdict."""

from __future__ import annotations

import re

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from analysis import agreement  # noqa: E402
from analysis.verdicts import Verdict, exact, judge  # noqa: E402

OPPOSITE = {"agrees", "disagrees"}


def _ratio(g):
    return g["a"] / g["b"]


@pytest.mark.parametrize("threshold", [0.9, 1.0, 1.1])
def test_two_runs_from_one_distribution_never_oppose(threshold):
    """Timings of two methods with the same distribution (ratio 1, 5% lognormal noise plus
    an occasional 2x outlier), judged against thresholds at and near the truth: over many
    pairs of runs the verdicts differ at most by an "inconclusive"."""
    rng = np.random.default_rng(1)

    def run(n=7):
        def timing():
            x = 10.0 * np.exp(0.05 * rng.standard_normal(n))
            return np.where(rng.random(n) < 0.1, 2 * x, x)  # load spikes on a shared machine
        return {"a": timing(), "b": timing()}

    decided = 0
    for _ in range(200):
        first, second = (judge(run(), _ratio, above=threshold).word for _ in range(2))
        assert {first, second} != OPPOSITE
        decided += (first != "inconclusive") + (second != "inconclusive")
    if threshold == 1.0:
        assert decided <= 0.05 * 400  # the claim sits on the truth: rarely decided either way


def test_table4_verdicts_of_two_noisy_runs_do_not_oppose():
    """The orientation line that once read "disagrees 0.93x" and then "agrees 1.34x"."""
    rng = np.random.default_rng(7)

    def table4():
        rows = []
        for variant, ms in (("adaptive-gram", 11.0), ("fixed-gram", 11.0), ("adaptive-svd", 57.0)):
            samples = ms * 1e-3 * np.exp(0.08 * rng.standard_normal(7))
            rows.append(dict(variant=variant, modules=4, peak_bytes=2**20 * (3 if "svd" in variant else 1),
                             gap_to_svd=list(1e-6 * (1 + rng.random(4))), excess=[0.0] * 4,
                             **{"timing.samples": list(samples), "timing.median": float(np.median(samples))}))
        return pd.DataFrame(rows)

    for _ in range(50):
        first, second = (re.findall(r"\*\*(agrees|disagrees|inconclusive|no verdict)\*\*", "\n".join(
            agreement.table4_lines(table4()))) for _ in range(2))
        assert len(first) == len(second) == 4
        assert all({x, y} != OPPOSITE for x, y in zip(first, second)), (first, second)


def test_decided_claims_are_decided():
    rng = np.random.default_rng(0)
    fast, slow = 10 * np.exp(0.05 * rng.standard_normal(7)), 20 * np.exp(0.05 * rng.standard_normal(7))
    v = judge({"a": slow, "b": fast}, _ratio, above=1.0)
    assert v.word == "agrees" and 1.0 < v.lo <= v.value <= v.hi
    assert judge({"a": fast, "b": slow}, _ratio, above=1.0).word == "disagrees"
    assert judge({"a": slow, "b": fast}, _ratio, below=1.0).word == "disagrees"
    assert exact(3.0, above=2).word == "agrees" and exact(3.0, above=2).interval() == "exact"


def test_a_point_not_measured_gets_no_verdict_and_a_warning():
    with pytest.warns(UserWarning, match=r"no verdict on 'the claim': not measured: b \(NaN or inf\), c \(no samples\)"):
        v = judge({"a": [1.0, 2.0], "b": [1.0, np.nan], "c": []}, lambda g: g["a"], above=0.0, claim="the claim")
    assert v.word == "no verdict" and v.missing == ("b (NaN or inf)", "c (no samples)")
    assert "not measured: b (NaN or inf)" in str(v)


def test_interval_is_reproducible():
    g = {"a": [1.0, 1.2, 0.9, 1.1], "b": [1.0, 1.05, 0.95]}
    assert judge(g, _ratio, above=1.0) == judge(g, _ratio, above=1.0)
    assert isinstance(judge(g, _ratio, above=1.0), Verdict)
