"""Per-launch medians and their spread (:mod:`analysis.launches`): shown where a timing's
samples come from two or more process launches, in Tables 1-3 and Table 4, and nowhere else."""

from __future__ import annotations

import statistics

import numpy as np
import pandas as pd
import pytest

from analysis.launches import launch_medians, launch_spread, spread_text
from analysis.sections.table4 import LAUNCH_COLUMN as T4_COLUMN
from analysis.sections.table4 import table4_ablation
from analysis.sections.tables123 import LAUNCH_COLUMN, tables123_latency

EPS64 = float(np.finfo(np.float64).eps)


def _drifting(base: float, drift: float, per_launch: int = 5, seed: int = 0) -> tuple[list[float], list[int]]:
    """Samples from two launches, the second ``1 + drift`` times the first, with noise of
    +-2% about each launch's level; the labels interleaved as rounds of a rotation are not."""
    rng = np.random.default_rng(seed)
    noise = [rng.uniform(0.98, 1.02, per_launch) for _ in range(2)]
    samples = list(base * noise[0]) + list(base * (1 + drift) * noise[1])
    return samples, [0] * per_launch + [1] * per_launch


def test_a_known_ten_percent_drift_is_printed_as_ten_percent():
    # noise-free levels, so the medians are 50 and 55 ms exactly and the spread 10%
    samples = [0.049, 0.050, 0.051, 0.0539, 0.055, 0.0561]
    text = spread_text(samples, [0, 0, 0, 1, 1, 1])
    assert text == "50 / 55 ms (10.0% apart)", text


def test_medians_per_launch_against_the_standard_librarys_median():
    samples, launch = _drifting(0.020, 0.10, per_launch=6)  # even count: the mean of the middle two
    order = np.random.default_rng(1).permutation(len(samples))  # labels in any order
    s, lab = [samples[i] for i in order], [launch[i] for i in order]
    want = [statistics.median([x for x, k in zip(s, lab) if k == j]) for j in (0, 1)]
    got = launch_medians(s, lab)
    # a median of float64 values is a value or the mean of two: one rounding, relative eps
    assert got == pytest.approx(want, rel=2 * EPS64, abs=0)
    spread = launch_spread(got)
    assert spread == pytest.approx(max(want) / min(want) - 1, rel=8 * EPS64 / spread)
    # the noise is +-2% about each level, so a 10% drift reads between 1.10 * 0.98 / 1.02 - 1 and its mirror
    assert 1.10 * 0.98 / 1.02 - 1 < spread < 1.10 * 1.02 / 0.98 - 1
    assert spread_text(s, lab).endswith(f"({100 * spread:.1f}% apart)")


@pytest.mark.parametrize("launch", [None, [0, 0, 0, 0, 0, 0], [0, 1], "010101"])
def test_one_launch_or_unknown_labels_say_nothing(launch):
    assert spread_text([0.01, 0.011, 0.012, 0.01, 0.011, 0.012], launch) == ""


def test_a_nonfinite_sample_says_nothing():
    assert launch_medians([0.01, float("nan"), 0.01, 0.02], [0, 0, 1, 1]) == []
    assert launch_spread([0.0, 0.01]) is None and launch_spread([0.01]) is None


def _tables123(launches: int) -> pd.DataFrame:
    """RoBERTa-base rows: FRAQ, and FLoRA in the same rounds, over ``launches`` launches
    with FLoRA's second launch 10% above its first, and FlexLoRA measured apart in one."""
    n = 6
    launch = [i * launches // n for i in range(n)]
    fraq = [0.050] * n
    flora = [0.020 * (1.10 if k else 1.0) for k in launch]

    def row(method, name, samples, launch, options=None):
        return {"method": method, "name": name, "options": options or {}, "downlink_pct": 1.0,
                "latency": {"samples": samples, "median": float(np.median(samples)), "q25": min(samples),
                            "q75": max(samples), "group": "g", "launch": launch}}

    rows = [row("flora", "flora", flora, launch), row("fraq (tau=0.95)", "fraq", fraq, launch, {"tau": 0.95})]
    apart = [row("flexlora", "flexlora", [3.0, 3.1], [0, 0])]
    return pd.DataFrame([{"preset": "roberta-base", "rows": rows, "threads": 1, "device": "cpu"},
                         {"preset": "roberta-base", "rows": apart, "threads": 1, "device": "cpu"}])


def test_tables123_show_each_launchs_median_and_the_spread():
    t = tables123_latency(_tables123(2), "roberta-base").set_index("Method")
    assert t.loc["FLoRA", LAUNCH_COLUMN].endswith("(10.0% apart)"), t[LAUNCH_COLUMN]
    assert t.loc["FRAQ (tau=0.95)", LAUNCH_COLUMN].endswith("(0.0% apart)")
    assert t.loc["FlexLoRA", LAUNCH_COLUMN] == "one launch"  # timed in one process: no spread claimed


def test_tables123_of_one_launch_have_no_launch_column():
    assert LAUNCH_COLUMN not in tables123_latency(_tables123(1), "roberta-base")


def test_table4_of_the_tiny_fixture_one_launch_adds_nothing(tiny_results):
    from analysis.loaders import load_results
    from analysis.sections import table4

    t4 = load_results(tiny_results / "table4")
    assert (t4["launches"] == 1).all()  # the tiny size: one launch, in the runner's process
    assert T4_COLUMN not in table4_ablation(t4)
    assert "launch medians" not in table4.draw({"table4": t4})[0].body


def test_table4_with_two_launches_shows_the_spread(tiny_results):
    """The tiny fixture's Table 4, its samples relabelled as two launches, the second's
    scaled to 10% above the first's: the column appears and says 10%."""
    from analysis.loaders import load_results

    t4 = load_results(tiny_results / "table4")

    def relabel(samples):
        n = len(samples)
        med = statistics.median(samples)
        return [med] * (n // 2) + [med * 1.10] * (n - n // 2), [0] * (n // 2) + [1] * (n - n // 2)

    new = [relabel(list(s)) for s in t4["timing.samples"]]
    t4 = t4.assign(**{"timing.samples": [s for s, _ in new], "timing.launch": [k for _, k in new], "launches": 2})
    t = table4_ablation(t4)
    assert T4_COLUMN in t and t[T4_COLUMN].str.endswith("(10.0% apart)").all(), t[T4_COLUMN]
