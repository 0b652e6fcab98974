"""The federated section's statistics: intervals over seeds, paired verdicts, the table's marks.

The verdict code is fed seeds drawn from one distribution: two identical methods (the same
result on every seed, as two runs of one method are) must never be called different, and
two methods whose results are independent draws from one distribution are called
different in about 5% of experiments, as a 95% interval promises, not more.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
stats = pytest.importorskip("scipy.stats")

from analysis.sections import federated  # noqa: E402


def runs_frame(acc: dict[str, np.ndarray], seeds: np.ndarray, rng, down: dict[str, float] | None = None,
               variant: str = "homogeneous") -> pd.DataFrame:
    """A :func:`analysis.sections.federated.runs` frame: per method its accuracy on each seed, rows shuffled
    (so a comparison that pairs rows by position instead of by seed would pair wrong seeds)."""
    rows = []
    for m, a in acc.items():
        for s, x in zip(seeds, a):
            rows.append({"variant": variant, "method": m, "seed": int(s), "skipped": None, "accuracy": float(x),
                         "downlink_pct_flora": (down or {}).get(m, 10.0), "agg_ms": [1.0, 1.2], "rank_mean": 8.0,
                         "rounds": 2})
    return pd.DataFrame(rows).iloc[rng.permutation(len(rows))].reset_index(drop=True)


DRAWS = {
    "normal": lambda rng, n: rng.normal(75.0, 3.0, n),
    "uniform": lambda rng, n: rng.uniform(60.0, 90.0, n),
    "heavy-tailed": lambda rng, n: 75.0 + 2.0 * rng.standard_t(2, n),
    "skewed": lambda rng, n: 100.0 * rng.beta(8.0, 2.0, n),
    "tied": lambda rng, n: np.full(n, 71.25),
}


@pytest.mark.parametrize("dist", sorted(DRAWS))
def test_identical_methods_are_never_called_different(dist):
    rng = np.random.default_rng(len(dist))
    for trial in range(400):
        n = (2, 3, 5, 10)[trial % 4]
        seeds = rng.choice(1000, n, replace=False)
        x = DRAWS[dist](rng, n)
        a, b = dict(zip(seeds, x)), dict(zip(seeds[::-1], x[::-1].copy()))  # the same per seed, listed otherwise
        for first, second in ((a, b), (b, a)):
            v = federated.paired(first, second, above=0.0)
            assert v.word == "inconclusive" and v.value == 0.0 and v.lo == v.hi == 0.0, (dist, n, v)
            assert federated.paired(first, second, above=-federated.CLOSE_POINTS).word == "agrees"
        if trial < 20:  # through the result rows, shuffled: paired by seed, not by position
            runs = runs_frame({"a": x, "b": x.copy()}, seeds, rng)
            v = federated.compare(runs, "homogeneous", "b", "a", above=0.0)
            assert v.word == "inconclusive" and v.lo == v.hi == 0.0, (dist, n, v)


@pytest.mark.parametrize("n", [3, 5])
def test_methods_drawn_from_one_distribution_are_called_different_at_the_nominal_rate(n):
    """Per seed a shared effect (the partition) plus each method's own noise, both from one
    distribution: the paired 95% interval misses 0 in at most 5% of experiments (the bound
    allows 4 binomial standard deviations over 2000 experiments: 6.9%)."""
    rng = np.random.default_rng(n)
    trials, called = 2000, 0
    for _ in range(trials):
        seeds = np.arange(n)
        shared = rng.normal(75.0, 4.0, n)
        a, b = shared + rng.normal(0, 1.0, n), shared + rng.normal(0, 1.0, n)
        called += federated.paired(dict(zip(seeds, a)), dict(zip(seeds, b)), above=0.0).word != "inconclusive"
    assert called / trials <= 0.05 + 4 * math.sqrt(0.05 * 0.95 / trials)
    assert called > 0  # an interval that never excludes 0 would pass above and detect nothing


def test_a_real_difference_is_found_and_its_sign_kept():
    rng = np.random.default_rng(7)
    seeds = np.arange(5)
    shared = rng.normal(75.0, 4.0, 5)
    runs = runs_frame({"a": shared + 3.0 + rng.normal(0, 0.5, 5), "b": shared}, seeds, rng)
    assert federated.compare(runs, "homogeneous", "a", "b", above=0.0).word == "agrees"
    assert federated.compare(runs, "homogeneous", "b", "a", above=0.0).word == "disagrees"
    one = runs_frame({"a": [80.0], "b": [70.0]}, np.arange(1), rng)
    with pytest.warns(UserWarning, match="common seed"):
        assert federated.compare(one, "homogeneous", "a", "b", above=0.0).word == "no verdict"


@pytest.mark.parametrize("x", [[71.0, 74.5], [70.0, 72.0, 77.5], list(np.linspace(60, 90, 7))])
def test_interval_is_the_student_t_interval(x):
    """Against scipy's one-sample t-test confidence interval (another route to the same interval)."""
    mean, lo, hi = federated.interval(x)
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
    eps = np.finfo(np.float64).eps * 100 * max(abs(v) for v in x)
    assert abs(mean - np.mean(x)) <= eps and abs(lo - ci.low) <= eps and abs(hi - ci.high) <= eps
    assert math.isnan(federated.interval([70.0])[1])


def test_table_marks_best_and_second_among_compressed_methods_only():
    rng = np.random.default_rng(0)
    seeds = np.arange(3)
    acc = {"flora": np.array([90.0, 91, 92]), "fedex-lora": np.array([89.0, 90, 91]),
           "florist": np.array([80.0, 81, 82]), "fraq:tau=0.95": np.array([85.0, 86, 87]),
           "fedit": np.array([70.0, 71, 72])}
    down = {"flora": 100.0, "fedex-lora": 110.0, "florist": 5.0, "fraq:tau=0.95": 9.5, "fedit": 10.0}
    t = federated.table(runs_frame(acc, seeds, rng, down), "homogeneous").set_index("Method")["Accuracy (%)"]
    assert t["FRAQ (τ=0.95)"].startswith("**86.00**") and t["FLoRIST"].startswith("<u>81.00</u>")
    assert not any(c in t["FLoRA"] + t["FedEx-LoRA"] + t["FedIT"] for c in ("**", "<u>"))
    assert list(t.index[:2]) == ["FLoRA", "FedEx-LoRA"]  # the paper's order: uncompressed baselines first
    acc["florist"] = acc["fraq:tau=0.95"].copy()  # a tie shares the bold; the next value is second
    t = federated.table(runs_frame(acc, seeds, rng, down), "homogeneous").set_index("Method")["Accuracy (%)"]
    assert t["FRAQ (τ=0.95)"].startswith("**86.00**") and t["FLoRIST"].startswith("**86.00**")
    assert t["FedIT"].startswith("<u>71.00</u>")


def test_one_round_curves_have_integer_round_ticks(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    curves = pd.DataFrame({"variant": ["homogeneous"] * 2, "method": ["fraq:tau=0.95"] * 2, "seed": [0, 1],
                           "round": [1, 1], "accuracy": [50.0, 52.0]})
    fig = federated.figure(curves, ["homogeneous"])
    ticks = [t for ax in fig.axes for t in ax.get_xticks()]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_ydata()) == [51.0]  # the mean over seeds


@pytest.mark.parametrize("layers, says", [([5], "LoRA on layer 5)"), ([1, 2], "LoRA on layers 1, 2)"),
                                          (None, "LoRA on every layer)")])
def test_setting_names_one_layer_in_the_singular(layers, says):
    from analysis.sections.federated import _setting

    df = pd.DataFrame([{"dataset.name": "intents", "model.name": "embedded:minilm", "partition.scheme": "iid",
                        "seed": 0, "federated.clients": 3, "federated.rounds": 2, "train.steps": 3,
                        "model.layers_to_transform": layers}])
    assert says in _setting(df, ["homogeneous"])


def test_a_method_the_analysis_does_not_know_is_drawn_labelled_and_ordered_after_the_paper():
    """Names, order and colours come from analysis.style: a registry name it has no entry for
    is shown as written, placed after the paper's methods, in a colour of its own."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from analysis.style import COLORS

    rows = [{"variant": "uniform", "method": m, "seed": s, "round": 1, "accuracy": 50.0 + s}
            for m in ("outside-core:tau=1.0", "fraq:tau=0.95", "flora") for s in (0, 1)]
    assert federated._order(["outside-core:tau=1.0", "fraq:tau=0.95", "flora"]) == \
        ["flora", "fraq:tau=0.95", "outside-core:tau=1.0"]
    assert federated.display_name("outside-core:tau=1.0") == "outside-core (τ=1.0)"
    fig = federated.figure(pd.DataFrame(rows), ["uniform"])
    lines = {line.get_label(): line.get_color() for ax in fig.axes for line in ax.get_lines()}
    assert set(lines) == {"FLoRA", "FRAQ (τ=0.95)", "outside-core (τ=1.0)"}
    assert lines["FRAQ (τ=0.95)"] == COLORS["FRAQ"] and lines["outside-core (τ=1.0)"] not in COLORS.values()
    assert [ax.get_title().split("\n")[1] for ax in fig.axes] == ["FRAQ and the uncompressed baselines",
                                                                  "FRAQ and the other methods"]


def test_a_method_is_shown_by_the_display_name_its_results_record():
    """The harness records each method's class's display name (a method from outside the
    package by its own): the table, the figure's legend and the report's names use it, with
    the spec's options; results written without it fall back to analysis.style's names."""
    import matplotlib

    matplotlib.use("Agg")
    recs = [{"variant": "uniform", "method": m, "seed": s, "display_name": shown, "skipped": None,
             "rounds": [{"round": 1, "accuracy": 0.5 + 0.01 * s, "downlink_pct_flora": 10.0, "agg_ms": 1.0,
                         "rank_mean": 4.0}]}
            for m, shown in (("outside-core:tau=1.0", "Outside core"), ("fraq:tau=0.95", "FRAQ"), ("flora", None))
            for s in (0, 1)]
    df = pd.DataFrame(recs)
    r = federated.runs(df)
    assert dict(zip(r["method"], r["name"])) == {"outside-core:tau=1.0": "Outside core (τ=1.0)",
                                                 "fraq:tau=0.95": "FRAQ (τ=0.95)", "flora": "FLoRA"}
    assert list(federated.table(r, "uniform")["Method"]) == ["FLoRA", "FRAQ (τ=0.95)", "Outside core (τ=1.0)"]
    fig = federated.figure(federated.curves(df), ["uniform"])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["FLoRA", "FRAQ (τ=0.95)", "Outside core (τ=1.0)"]


def test_nine_methods_are_drawn_a_group_to_a_panel_beside_fraq():
    """The paper's nine rows: a panel per group of its table (uncompressed, factor averaging,
    recompression) and variant, FRAQ's two settings in each; no panel holds more than five
    curves, every method is on one, and a band is drawn for each solid curve alone (FRAQ's
    other setting is dashed, without one)."""
    import matplotlib

    matplotlib.use("Agg")
    methods = ["flora", "fedex-lora", "fedit", "lora-a2", "flexlora", "florg", "florist", "fraq:tau=0.8",
               "fraq:tau=0.95"]
    rows = [{"variant": v, "method": m, "seed": s, "round": t, "accuracy": 40.0 + 5 * t + s + i}
            for v in ("a", "b") for i, m in enumerate(methods) for s in (0, 1, 2) for t in (1, 2, 3)]
    fig = federated.figure(pd.DataFrame(rows), ["a", "b"], {"a": "a: Dir(0.1)", "b": "b: Dir(0.02)"})
    assert len(fig.axes) == 6
    assert [ax.get_title() for ax in fig.axes[:3]] == [
        "a: Dir(0.1)\nFRAQ and the uncompressed baselines", "a: Dir(0.1)\nFRAQ and the factor-averaging methods",
        "a: Dir(0.1)\nFRAQ and the recompression methods"]
    drawn = set()
    for ax in fig.axes:
        labels = [line.get_label() for line in ax.get_lines()]
        assert len(labels) <= 5 and {"FRAQ (τ=0.8)", "FRAQ (τ=0.95)"} <= set(labels), labels
        solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
        assert len(ax.collections) == len(solid) == len(labels) - 1  # a band per solid curve; τ=0.8 dashed
        drawn |= set(labels)
    assert drawn == {federated.display_name(m) for m in methods}
    assert len(fig.legends[0].get_texts()) == 9
