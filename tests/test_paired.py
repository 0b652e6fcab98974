"""Paired timings (benchmarks.measure.paired) and the verdicts that rest on them.

The samples of methods compared at one point must come from the same rounds (one sample of
each per round), carry their round and launch, and be judged round by round; results of
separate measurements must never be paired.
"""

from __future__ import annotations

import time

import pytest

from benchmarks.measure.paired import MIN_SAMPLE, Weighted, decided, launched, paired_rounds


def _counter():
    calls = []
    return calls, (lambda: calls.append(1))


def test_rounds_pair_every_call_and_loop_the_fast_ones():
    """A call far under 1 ms is looped to at least MIN_SAMPLE per sample (and its sample is per call);
    a 3 ms call runs once per round; every key has one sample per round."""
    fast_calls, fast = _counter()
    slow_calls = []

    def slow():
        slow_calls.append(1)
        time.sleep(0.003)

    out = paired_rounds({"fast": fast, "slow": slow}, 7, launch=2)
    assert out["fast"]["round"] == out["slow"]["round"] == list(range(7))
    assert out["fast"]["launch"] == out["slow"]["launch"] == [2] * 7
    assert len(out["fast"]["samples"]) == len(out["slow"]["samples"]) == 7
    k = out["fast"]["loops"][0]
    assert k > 1 and len(fast_calls) == 2 + 7 * k  # warm-up, calibration, then k per round
    assert out["slow"]["loops"] == [1] and len(slow_calls) == 1 + 7  # one warm-up (also the calibration)
    assert all(s < MIN_SAMPLE for s in out["fast"]["samples"])  # per call, not per loop
    assert all(s >= 0.003 for s in out["slow"]["samples"])


def test_a_weighted_sample_with_its_warm_up_times_makes_no_calibration_call():
    calls, fn = _counter()
    out = paired_rounds({"w": Weighted([(fn, 3.0), (fn, 1.0)], seconds=[1.0, 1.0])}, 4)
    assert len(calls) == 2 * 4 and out["w"]["loops"] == [1, 1]


def test_one_look_is_the_fixed_n_sign_test_the_analysis_uses():
    """At one look the ranks are the fixed-n sign test's: the largest j with coverage
    1 - 2 P(Bin(n, 1/2) <= j - 1) >= 95%, none below n = 6, at every n from 1 to 40; the
    analysis's interval (analysis.verdicts.sign_interval) is [x_(j), x_(n+1-j)] with them."""
    import math

    import numpy as np

    from analysis.verdicts import sign_interval
    from fraq.internals import sign_ranks

    for n in range(1, 41):
        ok = [j for j in range(1, (n + 1) // 2 + 1)
              if 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n >= 0.95]
        j = sign_ranks([n])[n]
        assert j == (max(ok) if ok else None), n
        lo, _, _ = sign_interval(np.arange(1.0, n + 1))
        assert (int(lo) if lo == lo else None) == j, n


LOOKS = (6, 12)
"""The adaptive rounds of the sweeps (benchmarks.sizes: ``min_rounds`` 6, ``rounds`` 12)."""


def _error_by_enumeration(first: int, last: int) -> float:
    """P(some look of decided() at first..last decides) under exchangeable timings, by
    enumerating every one of the 2^last sign sequences through the real decided(): a ratio
    above or below 1 with probability 1/2 each, independently."""
    import itertools

    wrong = 0
    for signs in itertools.product((2.0, 0.5), repeat=last):
        wrong += any(decided({"a": list(signs[:n]), "b": [1.0] * n}, looks=(first, last))
                     for n in range(first, last + 1))
    return wrong / 2**last


def test_the_looks_keep_a_wrong_decided_within_five_percent():
    """Exact: the ranks over the looks 6..12 call a no-difference pair decided at some look
    with probability 176 / 4096 = 4.30% (the dynamic programme of fraq._sign_test, and the
    same number by enumerating all 4,096 sign sequences through decided()); 95% at each look
    would be 290 / 4096 = 7.08%. At the looks a sweep's clients points use (12 alone) and
    those two launches would add up to (12..24), at most 5% as well."""
    from fraq.internals import sign_error, sign_ranks

    assert sign_error(range(6, 13)) == 176 / 4096
    assert _error_by_enumeration(*LOOKS) == 176 / 4096
    assert sign_ranks(range(6, 13)) == {6: 1, 7: 1, 8: 1, 9: 1, 10: 2, 11: 2, 12: 2}
    for looks in ([12], range(12, 25), range(6, 25), [6], range(9, 13)):
        assert sign_error(looks) <= 0.05, looks
    one_other_way = {"a": [2.0] * 8 + [0.5], "b": [1.0] * 9}  # 1 of 9 ratios below 1
    assert decided(one_other_way)  # one look at 9: j = 2, decided
    assert not decided(one_other_way, looks=LOOKS)  # the looks 6..12: j = 1 at 9, not decided
    with pytest.raises(ValueError, match="not among the looks"):
        decided({"a": [1.0] * 5, "b": [2.0] * 5}, looks=LOOKS)


RUNS = 10_000
"""Null runs of the simulation: the standard error of a rate near 5% is sqrt(0.05 * 0.95 /
10,000) = 0.22%, so 4 of them (0.87%) bound the simulated rate's distance from the exact one
for all but about 1 in 15,000 seeds."""


def _runner(monkeypatch, draws):
    """paired_rounds at the sweeps' LOOKS with its clock replaced by ``draws`` (one per call)."""
    import benchmarks.measure.paired as paired

    monkeypatch.setattr(paired, "_loop_time", lambda fn, loops, device: fn())
    monkeypatch.setattr(paired, "sync", lambda device: None)

    def run(a, b):
        ta, tb = iter(a), iter(b)
        return paired_rounds({"a": lambda: next(ta), "b": lambda: next(tb)}, LOOKS[1], min_rounds=LOOKS[0])
    return run


def test_a_simulated_null_is_decided_wrongly_within_the_exact_rate(monkeypatch):
    """10,000 runs of the adaptive rounds as the runner makes them (paired_rounds and its
    decided(), the clock replaced by draws): both calls' times i.i.d. lognormal (sigma 0.3,
    no difference). A run is wrongly decided when it stops before round 12 or is decided at
    12. The rate is within 4 standard errors of the exact 4.30%, and so below 5% + 0.57%
    whatever the seed; the exact rate itself is below 5% (the test above)."""
    import numpy as np

    rng = np.random.default_rng(11)
    t = np.exp(0.3 * rng.standard_normal((RUNS, 2, LOOKS[1] + 1)))  # seconds, above min_sample: one calibration call, the +1
    run = _runner(monkeypatch, t)
    wrong = 0
    for a, b in zip(t[:, 0].tolist(), t[:, 1].tolist()):
        out = run(a, b)
        n = len(out["a"]["samples"])
        wrong += n < LOOKS[1] or decided({k: out[k]["samples"] for k in "ab"}, looks=LOOKS)
    se = np.sqrt(0.043 * 0.957 / RUNS)
    assert abs(wrong / RUNS - 176 / 4096) <= 4 * se, wrong / RUNS


def test_a_real_difference_is_still_decided_within_the_rounds(monkeypatch):
    """One call 1.2x the other's time with 5% noise on each (lognormal: a round's ratio is
    below 1 with probability Phi(-ln 1.2 / (0.05 sqrt 2)) = 0.5%): decided within the 12
    rounds in every one of 200 runs, and at the first look (6 rounds, all six ratios above 1)
    in all but the few runs with a ratio below 1 among the first six (3% expected)."""
    import numpy as np

    rng = np.random.default_rng(12)
    t = np.exp(0.05 * rng.standard_normal((200, 2, LOOKS[1] + 1)))
    t[:, 0] *= 1.2
    run = _runner(monkeypatch, t)
    at_first = 0
    for a, b in zip(t[:, 0].tolist(), t[:, 1].tolist()):
        out = run(a, b)
        assert decided({k: out[k]["samples"] for k in "ab"}, looks=LOOKS)
        assert out["a"]["looks"] == list(LOOKS)
        at_first += len(out["a"]["samples"]) == LOOKS[0]
    assert at_first >= 0.9 * 200


def test_decided_needs_every_pair_on_one_side_of_one():
    six = [1.0] * 6
    assert decided({"a": six, "b": [2.0] * 6, "c": [3.0] * 6})
    assert not decided({"a": [1.0] * 5, "b": [2.0] * 5})  # 5 rounds: no 95% interval yet
    assert not decided({"a": six, "b": [2.0] * 5 + [0.5]})  # one round the other way: [min, max] straddles 1
    assert not decided({"a": six, "b": [2.0] * 6, "c": [2.0] * 6})  # b and c tie
    assert decided({"a": six, "b": [2.0] * 6, "c": [2.0] * 6}, against="a")  # a against each: decided
    # from 9 rounds on one outlier is outside the interval: decided
    assert decided({"a": [1.0] * 9, "b": [2.0] * 8 + [0.5]})


def test_rounds_stop_once_decided_and_run_on_while_open(monkeypatch):
    """Two calls of clearly different times stop at min_rounds; two that trade places run to
    rounds; every key keeps one sample per round either way. The clock is replaced by each
    call's own made-up time, so nothing here depends on what the machine measures."""
    import benchmarks.measure.paired as paired

    monkeypatch.setattr(paired, "_loop_time", lambda fn, loops, device: fn())
    out = paired_rounds({"a": lambda: 0.002, "b": lambda: 0.004}, 12, min_rounds=6)
    assert out["a"]["round"] == out["b"]["round"] == list(range(6))
    times = iter([0.002, 0.003, 0.001] * 50)  # a's times straddle b's: the pair never decides
    out = paired_rounds({"a": lambda: next(times), "b": lambda: 0.0025}, 8, min_rounds=6)
    assert len(out["a"]["samples"]) == len(out["b"]["samples"]) == 8
    # the first call against each other: b and c tie, which no claim asks about
    out = paired_rounds({"a": lambda: 0.002, "b": lambda: 0.004, "c": lambda: 0.004}, 12, min_rounds=6)
    assert len(out["c"]["samples"]) == 6
    # ``decides``: only the pairs a claim reads; a and b trade places, which none reads
    straddle = iter([0.002, 0.003, 0.001] * 50)
    calls = {"a": lambda: next(straddle), "b": lambda: 0.0025, "c": lambda: 0.01}
    assert len(paired_rounds(calls, 12, min_rounds=6, decides=[("a", "c"), ("a", "gone")])["b"]["samples"]) == 6
    straddle = iter([0.002, 0.003, 0.001] * 50)
    assert len(paired_rounds(calls, 12, min_rounds=6, decides=[("a", "b")])["c"]["samples"]) == 12
    assert decided({"a": [1.0] * 6, "b": [1.0] * 6}, pairs=[])  # nothing to wait on
    assert not decided({"a": [1.0] * 6, "b": [1.0] * 6, "c": [2.0] * 6}, pairs=[("a", "b")])
    with pytest.raises(ValueError, match="min_rounds"):
        paired_rounds({"a": lambda: 0.002}, 4, min_rounds=6)


def test_a_call_leaves_the_rounds_once_its_comparisons_are_decided(monkeypatch):
    """With ``leave`` (one launch), a call in no open pair stops after min_rounds while the
    open pair runs on; a ``hold`` pair runs to ``rounds`` though decided; sample j of every
    call is from round j (the rotation over the calls still timed), so the first n samples
    of any two calls pair. Made-up times, as above."""
    import benchmarks.measure.paired as paired

    order = []

    def clock(fn, loops, device):
        order.append(fn.__name__)
        return fn()

    monkeypatch.setattr(paired, "_loop_time", clock)
    straddle = iter([0.002, 0.003, 0.001] * 50)

    def a():
        return next(straddle)

    def b():
        return 0.0025

    def c():
        return 0.01

    def d():
        return 0.02

    out = paired_rounds({"a": a, "b": b, "c": c, "d": d}, 12, min_rounds=6, decides=[("a", "b"), ("a", "c")],
                        leave=True)
    assert [len(out[k]["samples"]) for k in "abcd"] == [12, 12, 6, 6]  # (a, b) never decides; (a, c) at 6
    assert out["c"]["round"] == list(range(6)) and out["a"]["round"] == list(range(12))
    rounds_after_six = order[4 * 6 + 4:]  # the calibration calls, then 6 rounds of 4
    assert set(rounds_after_six) == {"a", "b"}
    out = paired_rounds({"a": a, "b": b, "c": c, "d": d}, 12, min_rounds=6, decides=[("a", "c")],
                        hold=[("c", "d")], leave=True)
    assert [len(out[k]["samples"]) for k in "abcd"] == [6, 6, 12, 12]
    out = paired_rounds({"a": a, "b": b, "c": c}, 12, min_rounds=6, decides=[("a", "c")], leave=False)
    assert {len(out[k]["samples"]) for k in "abc"} == {6}  # without leave: every call, every round


def test_rounds_refuse_zero():
    with pytest.raises(ValueError, match=r"rounds\(=0\)"):
        paired_rounds({"a": lambda: None}, 0)


@pytest.mark.integration
def test_launches_in_fresh_processes_concatenate_rounds_with_their_launch():
    """Two fresh interpreters, 3 rounds each: 6 samples per method, launch 0 then 1, rounds 0..5,
    one group id shared by the methods and new for every measurement."""
    from benchmarks.experiments import fig3
    from benchmarks.measure.timing import threads
    from analysis.verdicts import paired

    config = next(c for c in fig3.points("tiny") if c["mode"] == "batched")
    group = fig3.group(config)
    with threads(1):
        first = launched(fig3.GROUP, [group], rounds=3, launches=2)[0]
        second = launched(fig3.GROUP, [group], rounds=3, launches=1)[0]
    assert set(first) == set(config["compared"])
    for t in first.values():
        assert t["launch"] == [0, 0, 0, 1, 1, 1] and t["round"] == list(range(6)) and len(t["samples"]) == 6
        assert t["launches"] == 2 and len(t["loops"]) == 2 and t["compared"] == config["compared"]
    assert len({t["group"] for t in first.values()}) == 1
    assert {t["group"] for t in first.values()} != {t["group"] for t in second.values()}
    rows = lambda ts: [{"timing.group": t["group"], "timing.samples": t["samples"]} for t in ts.values()]  # noqa: E731
    assert paired(rows(first)) and paired(rows(second)[:1])
    assert not paired(rows(first)[:1] + rows(second)[1:])  # two measurements: never paired
    assert not paired(rows(first), rows(second))  # equal ids within each, but 6 against 3 rounds
    # launch 0 run here on prepared calls (first=), launch 1 fresh: concatenated in that order
    here = paired_rounds(fig3.group_calls(group), 3, launch=0)
    with threads(1):
        both = launched(fig3.GROUP, [group], rounds=3, launches=2, first=here)[0]
    for k, t in both.items():
        assert t["launch"] == [0, 0, 0, 1, 1, 1] and list(t["samples"][:3]) == here[k]["samples"] and t["launches"] == 2
    with pytest.raises(ValueError, match="one group"):
        launched(fig3.GROUP, [group, group], rounds=3, launches=2, first=here)
    # launch 0 built and run here (here=True), launch 1 fresh: the same fields, one fresh interpreter
    import benchmarks.measure.paired as paired_module

    fresh = []
    real = paired_module._fresh
    try:
        paired_module._fresh = lambda *a, **k: fresh.append(a[5]) or real(*a, **k)
        with threads(1):
            mixed = launched(fig3.GROUP, [group], rounds=3, launches=2, here=True)[0]
    finally:
        paired_module._fresh = real
    assert fresh == [1]  # only launch 1 started an interpreter
    for t in mixed.values():
        assert t["launch"] == [0, 0, 0, 1, 1, 1] and t["round"] == list(range(6)) and t["launches"] == 2
    assert len({t["group"] for t in mixed.values()}) == 1


@pytest.mark.slow  # measures fig3, clients and table4 groups; the report test below reads the shared tiny results
def test_every_compared_point_shares_its_groups_rounds():
    """fig3, clients and table4 at tiny size: the results of one point's methods have the same group id,
    the same number of samples (rounds x launches) and their launch and round indices."""
    from benchmarks.experiments import clients, fig3, table4
    from benchmarks.measure.timing import threads

    with threads(1):
        for module, pick in ((fig3, lambda c: (c["sweep"], c["d"], c["r"], c["mode"]) == ("r", 64, 8, "batched")),
                             (clients, lambda c: (c["d"], c["D"], c["K"]) == (32, 32, 4)),
                             (table4, lambda c: True)):
            configs = [c for c in module.points("tiny") if pick(c)]
            assert len(configs) == len(configs[0]["compared"]) >= 2
            module.prepare_points(configs)
            got = [module.measure(c)["timing"] for c in configs]
            n = configs[0]["rounds"] * configs[0]["launches"]
            assert n >= 6  # the fewest rounds with a 95% sign interval
            assert len({t["group"] for t in got}) == 1
            for t in got:
                assert len(t["samples"]) == n and t["round"] == list(range(n)) and len(t["launch"]) == n


@pytest.mark.integration
def test_tables123_rows_are_paired_over_fresh_launches_and_carry_the_machine():
    pytest.importorskip("pandas")
    from analysis.sections.tables123 import tables123_rows
    from analysis.verdicts import paired
    from benchmarks.experiments import tables123
    from benchmarks.measure.timing import threads
    import pandas as pd

    with threads(1):  # two fresh launches, each building the preset and timing its Weighted samples
        rec = tables123.run_preset("roberta-base", quick=True, rounds=3, launches=2,
                                   methods=["fedit", "fraq:tau=0.95"], log=lambda s: None)
    lat = [r["latency"] for r in rec["rows"]]
    assert len({t["group"] for t in lat}) == 1 and all(t["round"] == list(range(6)) for t in lat)
    assert all(t["launch"] == [0, 0, 0, 1, 1, 1] for t in lat)
    rows = tables123_rows(pd.DataFrame([dict(rec, loadavg=0.2, steal=0.0, threads=1)]))
    assert paired(rows) and set(rows["loadavg"]) == {0.2} and set(rows["steal"]) == {0.0}


@pytest.mark.integration
def test_a_report_from_tiny_results_judges_the_ratios_round_by_round(tmp_path, tiny_results):
    """The recorded tiny results of fig3 and table4 (``tiny_results``), their records set to
    an idle machine's load: the report's timing verdicts on fig3 and Table 4 are paired over
    the rounds (6 at tiny size)."""
    pytest.importorskip("pandas")
    pytest.importorskip("seaborn")
    import json

    import matplotlib

    matplotlib.use("Agg")
    from analysis.reproduce import build
    from conftest import tiny_copy

    tiny_copy(tiny_results, tmp_path / "results", ("table4", "fig3"))
    for f in (tmp_path / "results").rglob("*.json"):
        rec = json.loads(f.read_text())
        rec.update(loadavg=0.1, steal=0.0)
        f.write_text(json.dumps(rec))
    text = build(tmp_path).read_text()
    fig3 = next(x for x in text.splitlines() if "FRAQ is the fastest method across both sweeps" in x)
    assert "paired over 6 rounds" in fig3
    t4 = [x for x in text.splitlines() if "faster than fixed" in x or "faster than coordinate SVD" in x]
    assert len(t4) == 2 and all("paired over 6 rounds" in x for x in t4)


@pytest.mark.integration
def test_a_busy_machine_withholds_the_tables123_verdicts(tmp_path, monkeypatch):
    pytest.importorskip("pandas")
    import fraq._machine
    from analysis.reproduce import build_report
    from benchmarks import run

    monkeypatch.setattr("os.getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(fraq._machine, "steal_share", lambda: 0.0)
    monkeypatch.setattr("benchmarks.experiments.tables123.points",
                        lambda size: [dict(table="tables123", preset="roberta-base", quick=True, seed=0,
                                           methods=["florist:tau=0.9", "fraq:tau=0.95"], rounds=6, launches=1,
                                           part="shared", layers=None)])
    run.run(tmp_path / "results", ("tables123",), size="tiny", progress=False)
    built = build_report(tmp_path)
    text = built.report.read_text()
    line = next(x for x in text.splitlines() if "faster than FLoRIST" in x)
    assert "withheld: machine busy" in line and "load average" not in line  # the reason is said once, below
    busy = [x for x in text.split("## Not measured or skipped")[1].splitlines() if "machine was busy" in x]
    assert len(busy) == 1 and "load average 9.00" in busy[0] and "'roberta-base: FLoRIST / FRAQ measured'" in busy[0]
    assert "machine busy: " in built.summary()


def test_a_size_that_times_some_methods_kernels_keeps_each_point_in_its_group():
    """``roof_methods`` (the runner's default size: FRAQ's) marks which batched points carry
    the kernel roofs; the mark is the method's own, so every method of a point still shares
    one group (one paired timing), and a size without it marks nothing."""
    import json

    from benchmarks.experiments import fig3

    reduced = fig3.points("reduced")
    batched = [c for c in reduced if c["mode"] == "batched"]
    assert {c["method"] for c in batched if c["roofs"]} == {"fraq"}
    assert len({json.dumps(fig3.group(c), sort_keys=True) for c in reduced}) == len(
        {(c["sweep"], c["d"], c["r"], c["mode"]) for c in reduced})
    assert fig3.cost(next(c for c in batched if c["roofs"])) > fig3.cost(dict(next(c for c in batched if c["roofs"]),
                                                                             roofs=False))
    assert not any("roofs" in c for c in fig3.points("tiny"))


def test_the_clients_rounds_wait_on_the_comparisons_its_claims_read():
    """FRAQ against the dense path and each kernel variant against its dense path; FRAQ
    against its other backends (nearly as fast, no claim) is not waited on."""
    from benchmarks.experiments import clients

    assert clients.decides(["fraq", "florist", "flexlora", "flexlora:kernel=fraq", "fraq:backend=cholesky"]) == [
        ["fraq", "flexlora"], ["flexlora", "flexlora:kernel=fraq"]]
    assert clients.decides(["fraq", "florist", "flexlora:kernel=fraq"]) == []  # no dense path at this K
    for size in ("reduced", "paper"):
        sized = clients.points(size)
        assert all(c["decides"] == clients.decides(c["compared"]) for c in sized)
        # past r = d FRAQ and the dense path every round (a held pair, in one launch): the claim
        # there takes the rounds all its points have; the other methods leave when their own are decided
        assert all(c["launches"] == 1 for c in sized)
        assert all(c["min_rounds"] <= c["rounds"] for c in sized)
        assert any(c["min_rounds"] < c["rounds"] for c in sized)
        assert all((c.get("hold") == [["fraq", "flexlora"]]) == (c["r"] >= c["d"] and "flexlora" in c["compared"])
                   for c in sized)
    assert not any("decides" in c for c in clients.points("tiny"))  # a size without min_rounds runs every round
    from benchmarks.experiments import fig3

    assert all(c["decides"] == fig3.decides(c["compared"]) for c in fig3.points("reduced"))
    assert fig3.decides(["fraq", "florist", "flexlora:kernel=fraq", "qr-svd", "rsvd"]) == []  # d past FlexLoRA's limit


@pytest.mark.parametrize("n", range(1, 10))
def test_balanced_order_puts_every_call_after_every_other_equally_often(n):
    """Each round's order is a permutation, and over a period (n rounds, 2 n for an odd n)
    every ordered pair of distinct calls is adjacent equally often (once, or twice for an
    odd n): what runs just before a call is spread over the others alike."""
    from collections import Counter

    from benchmarks.measure.timing import balanced_order

    period = n if n % 2 == 0 else 2 * n
    rows = [balanced_order(n, j) for j in range(period)]
    assert all(sorted(r) == list(range(n)) for r in rows)
    follows = Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    assert len(follows) == n * (n - 1) and set(follows.values()) <= {1 if n % 2 == 0 else 2}
    assert balanced_order(n, period + 3) == balanced_order(n, 3)


def test_paired_rounds_time_in_the_balanced_order(monkeypatch):
    """The rounds run their calls in :func:`balanced_order`'s order, so over 4 rounds of 4
    calls each call is timed once right after each other call within a round."""
    import benchmarks.measure.paired as paired
    from benchmarks.measure.timing import balanced_order

    order = []

    def clock(fn, loops, device):
        order.append(fn.__name__)
        return 0.01

    monkeypatch.setattr(paired, "_loop_time", clock)
    calls = {}
    for name in "abcd":
        def fn():
            return None
        fn.__name__ = name
        calls[name] = fn
    paired_rounds(calls, 4)
    rounds = [order[4 + 4 * j: 8 + 4 * j] for j in range(4)]  # after the 4 calibration calls
    assert rounds == [["abcd"[i] for i in balanced_order(4, j)] for j in range(4)]
    within = {(r[i], r[i + 1]) for r in rounds for i in range(3)}
    assert len(within) == 12
