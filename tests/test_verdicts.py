"""analysis.verdicts: a verdict rests on an interval, so runs drawn from one distribution
never give opposite verdicts; a point not measured gets no verdict."""

from __future__ import annotations

import re

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from analysis.notes import Busy  # noqa: E402
from analysis.sections.table4 import table4_lines  # noqa: E402
from analysis.verdicts import Verdict, busy, exact, judge, sign_interval  # noqa: E402

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
        first, second = (re.findall(r"\*\*(agrees|disagrees|inconclusive|descriptive|no verdict)\*\*", "\n".join(
            table4_lines(table4()))) for _ in range(2))
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


# ------------------------------------------------------------------ paired samples (round-robin)


def _drifting_rounds(rng, n, ratio, noise=0.03):
    """Round-robin timings of two calls whose true ratio is ``ratio``: each round's speed drifts
    (a factor 0.5-2 shared by both calls of the round, as a shared machine's load does) and each
    call has its own ``noise`` (lognormal)."""
    drift = np.exp(rng.uniform(np.log(0.5), np.log(2.0), n))
    b = 10.0 * drift * np.exp(noise * rng.standard_normal(n))
    a = ratio * 10.0 * drift * np.exp(noise * rng.standard_normal(n))
    return {"a": a, "b": b}


def test_a_constant_paired_ratio_under_drift_is_decisive():
    """Ratio 2.5 with the machine's speed drifting 4x between rounds: paired, the verdict on
    "above 2" is decided at 10 rounds for every seed; unpaired, the drift swamps it."""
    for seed in range(50):
        g = _drifting_rounds(np.random.default_rng(seed), 10, 2.5)
        v = judge(g, _ratio, above=2.0, paired=True)
        assert v.word == "agrees" and v.method == "paired" and v.rounds == 10
        assert 2.0 < v.lo <= v.value <= v.hi < 3.0  # 3% noise per call: the interval is within 20% of 2.5
        assert judge(g, _ratio, below=2.0, paired=True).word == "disagrees"
    g = _drifting_rounds(np.random.default_rng(0), 10, 2.5)
    assert judge(g, _ratio, above=2.0).word == "inconclusive"  # the same samples, pairing thrown away


def test_identical_methods_are_never_called_different():
    """Two identical calls under drift, 10 paired rounds, 400 seeds: against a 10% difference
    either way, never decided in the wrong direction; at the truth (ratio 1), decided in at most
    3% of seeds (the sign interval's one-sided error at n = 10 is 11/1024 = 1.1% each side)."""
    decided = 0
    for seed in range(400):
        g = _drifting_rounds(np.random.default_rng(seed), 10, 1.0)
        assert judge(g, _ratio, above=1.1, paired=True).word != "agrees"
        assert judge(g, _ratio, below=0.9, paired=True).word != "agrees"
        decided += judge(g, _ratio, above=1.0, paired=True).word != "inconclusive"
    assert decided <= 0.03 * 400


@pytest.mark.parametrize("where", [0, 4, 9])
@pytest.mark.parametrize("outlier", [0.1, 50.0])
def test_one_outlier_among_few_rounds_does_not_flip_the_verdict(where, outlier):
    """10 rounds at ratio 2.5, one of them replaced by a load spike (one call 10x slower or
    faster in that round): the verdict on "above 2" stays "agrees"."""
    g = _drifting_rounds(np.random.default_rng(3), 10, 2.5)
    assert judge(g, _ratio, above=2.0, paired=True).word == "agrees"
    g["a"][where] *= outlier / 2.5
    v = judge(g, _ratio, above=2.0, paired=True)
    assert v.word == "agrees", v


def test_fewer_than_six_samples_are_descriptive_paired_or_not():
    """No interval and no verdict on fewer than 6 samples: paired rounds (no sign-test
    interval reaches 95% below 6) and unpaired groups (draws from five values or fewer are
    nearly their extremes) give "descriptive", the value alone, with the words saying why."""
    g = _drifting_rounds(np.random.default_rng(0), 5, 2.5)
    v = judge(g, _ratio, above=2.0, paired=True)
    assert v.word == "descriptive" and v.rounds == 5 and np.isnan(v.lo) and np.isnan(v.hi)
    assert not v.has_interval and v.interval() == "median of 5 paired rounds; descriptive: n < 6, no interval"
    assert v.measured(".2f", unit="x") == (f"{np.median(_ratio(g)):.2f}x "
                                           "(median of 5 paired rounds; descriptive: n < 6, no interval)")
    assert str(v) == "**descriptive** (median of 5 paired rounds; descriptive: n < 6, no interval)"
    one = judge({k: x[:1] for k, x in g.items()}, _ratio, above=2.0, paired=True)
    assert one.interval() == "median of 1 paired round; descriptive: n < 6, no interval"
    assert "[" not in one.measured()
    assert judge(_drifting_rounds(np.random.default_rng(0), 6, 2.5), _ratio, above=2.0, paired=True).has_interval
    uneven = {"a": [25.0, 26.0, 24.0], "b": [10.0, 10.5]}
    with pytest.warns(UserWarning, match=r"not paired.*unpaired interval"):
        v = judge(uneven, _ratio, above=2.0, paired=True, claim="c")
    assert v.method == "unpaired" and v.word == "descriptive" and v.rounds == 2
    assert v.interval() == "2 samples; descriptive: n < 6, no interval" and "[" not in str(v)
    for n in (2, 5):  # unpaired repeats: descriptive below 6, an interval from 6 on
        few = {"a": np.full(n, 25.0), "b": np.full(n, 10.0)}
        assert judge(few, _ratio, above=2.0).word == "descriptive"
    assert judge({"a": np.full(6, 25.0), "b": np.full(6, 10.0)}, _ratio, above=2.0).word == "agrees"


def test_adaptive_rounds_are_judged_with_the_ranks_of_all_their_looks():
    """Rounds recorded as stopping between 6 and 12 (``timing.looks``) are judged with the
    sign test over those looks, as the runner decided: 9 rounds with one ratio on the other
    side are decided at a fixed 9 (j = 2) but not over the looks 6..12 (j = 1 at 9); results
    without the record are judged as fixed-n, and the looks of several results add up."""
    from analysis.verdicts import looks

    g = {"a": np.array([2.0] * 8 + [0.5]), "b": np.ones(9)}
    assert judge(g, _ratio, above=1.0, paired=True).word == "agrees"
    v = judge(g, _ratio, above=1.0, paired=True, looks=tuple(range(6, 13)))
    assert v.word == "inconclusive" and (v.lo, v.hi) == (0.5, 2.0) and v.looks == tuple(range(6, 13))
    assert v.interval() == "[0.5, 2], paired over 9 rounds, stopped between 6 and 12"
    rows = [{"timing.samples": [1.0] * 9, "timing.looks": [6, 12]}, {"timing.samples": [1.0] * 7}]
    assert looks(rows) == (6, 7, 8, 9, 10, 11, 12)
    assert looks([{"timing.samples": [1.0] * 9}]) == (9,)  # no record: fixed-n
    assert looks([{"timing.samples": [1.0] * 24, "timing.looks": [12, 24]}]) == tuple(range(12, 25))
    lo, hi, cover = sign_interval(np.arange(1.0, 10.0), looks=range(6, 13))
    assert (lo, hi) == (1.0, 9.0) and cover == pytest.approx(1 - 176 / 4096)


def test_sign_interval_matches_the_binomial():
    # n = 10: [x_(2), x_(9)], coverage 1 - 2 * 11/1024; n = 6: [min, max], 1 - 2/64; n = 5: none reaches 95%
    lo, hi, cover = sign_interval(np.arange(10.0)[::-1])
    assert (lo, hi) == (1.0, 8.0) and cover == pytest.approx(1 - 22 / 1024)
    assert sign_interval(np.arange(6.0)) == (0.0, 5.0, pytest.approx(1 - 2 / 64))
    assert all(np.isnan(sign_interval(np.arange(5.0))))
    assert 1 - 2 / 32 < 0.95 <= 1 - 2 / 64  # MIN_ROUNDS = 6
    # coverage checked by simulation: skewed (lognormal) samples, true median 1, n = 12, 4000 trials
    rng = np.random.default_rng(5)
    hits = sum(lo <= 1.0 <= hi for lo, hi, _ in (sign_interval(np.exp(rng.standard_normal(12))) for _ in range(4000)))
    assert hits / 4000 >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / 4000)


def test_a_busy_machine_withholds_the_verdict():
    g = _drifting_rounds(np.random.default_rng(0), 10, 2.5)
    quiet = [{"loadavg": 1.2, "threads": 1, "steal": 0.01}, {"loadavg": 0.3, "threads": 1, "steal": None}]
    assert judge(g, _ratio, above=2.0, paired=True, machine=quiet).word == "agrees"
    assert busy(quiet) == "" and busy(None) == "" and busy({"loadavg": None}) == ""
    for rec, why in (({"loadavg": 2.6, "threads": 2}, r"load average 2.60 above 2 thread"),
                     ({"loadavg": 0.2, "threads": 1, "steal": 0.12}, r"steal time 12.0% above 5%")):
        with pytest.warns(Busy, match="machine was busy") as seen:  # the reason in the note, said once by a report
            v = judge(g, _ratio, above=2.0, paired=True, machine=quiet + [rec], claim="c")
        assert v.word == "no verdict" and v.interval() == "withheld: machine busy"
        assert seen[0].message.claim == "c" and re.search(why, seen[0].message.reason)
    df = pd.DataFrame(quiet + [{"loadavg": 3.0, "threads": 1, "steal": 0.0}])
    assert "load average 3.00" in busy(df)


def test_a_busy_run_is_said_once_with_its_range_and_no_nan_is_printed():
    """Many busy results give one phrase (the range of their loads and how many), not one
    sentence per result; a withheld verdict's line prints no value (no "nan withheld")."""
    recs = [{"loadavg": 6.5 + 0.01 * i, "threads": 1} for i in range(20)] + [{"loadavg": 0.1, "threads": 1}]
    assert busy(recs) == "load average 6.50-6.69 above 1 thread(s) + 0.5 in 20 of 21 results"
    g = _drifting_rounds(np.random.default_rng(0), 10, 2.5)
    with pytest.warns(Busy, match="machine was busy"):
        v = judge(g, _ratio, above=2.0, paired=True, machine=recs, claim="c")
    assert "nan" not in v.measured(".2f", prefix="K^") and v.measured(".2f") == "withheld: machine busy"
    v = judge(g, _ratio, above=2.0, paired=True)
    assert v.measured(".2f", prefix="K^").startswith(f"K^{v.value:.2f} [")


def test_points_whose_rounds_stopped_at_different_counts_are_judged_over_the_rounds_all_have():
    """Adaptive rounds (one point decided after 6, another run to 9): the sets still pair,
    and the statistic over both points is computed on rounds 0..5 of each (a paired verdict
    over 6 rounds); a set shorter than the 6 a 95% interval needs does not pair, and a set
    whose own results differ in count (a call that left its point's rounds) pairs over the
    rounds all have where that is at least 6."""
    import numpy as np

    from analysis.verdicts import judge, paired

    a = [{"timing.group": "g1", "timing.samples": [1.0] * 6}, {"timing.group": "g1", "timing.samples": [2.0] * 6}]
    b = [{"timing.group": "g2", "timing.samples": [1.0] * 9}, {"timing.group": "g2", "timing.samples": [3.0] * 9}]
    assert paired(a, b)
    short = [{"timing.group": "g3", "timing.samples": [1.0] * 3}, {"timing.group": "g3", "timing.samples": [3.0] * 3}]
    assert not paired(a, short)
    assert paired([a[0], {"timing.group": "g1", "timing.samples": [2.0] * 7}])
    assert not paired([short[0], {"timing.group": "g3", "timing.samples": [2.0] * 7}])
    groups = {"a0": [1.0] * 6, "a1": [2.0] * 6, "b0": [1.0] * 8 + [50.0], "b1": [3.0] * 9}
    v = judge(groups, lambda g: np.minimum(g["a1"] / g["a0"], g["b1"] / g["b0"]), above=1.5, paired=True)
    assert v.method == "paired" and v.rounds == 6 and v.word == "agrees" and v.value == 2.0
