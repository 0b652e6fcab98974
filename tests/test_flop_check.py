"""Tables 1-3's FLOP-model check of the at-its-best rows (:mod:`analysis.flop_check`): measured time /
FRAQ's over the routine-true model's prediction, within or outside the project's 1.5x target, against
FRAQ at the row's own threshold where FRAQ ran at it; no verdict word, nothing on a GPU."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from analysis.flop_check import TARGET, flop_check_lines
from analysis.sections.tables123 import tables123_rows, verdict_lines

ROUNDS = 12


def _records(peers: list[tuple], device: str = "cpu", seed: int = 0) -> pd.DataFrame:
    """RoBERTa-base rows: FRAQ at tau = 0.80 (8 ms, 1 GFLOP) and 0.95 (10 ms, 1.2 GFLOP) drifting
    together between rounds, and each peer ``(spec, name, options, time ratio over FRAQ (tau=0.95),
    flops_full)``, paired round by round in one group."""
    rng = np.random.default_rng(seed)
    drift = rng.uniform(0.7, 1.4, ROUNDS)
    base = {0.8: 0.008, 0.95: 0.010}

    def row(spec, name, options, samples, flops):
        label = spec.replace(":", " (").replace(",", ", ") + (")" if ":" in spec else "")
        return {"method": label, "spec": spec, "name": name, "options": options, "downlink_pct": 1.0,
                "latency": {"samples": list(samples), "median": float(np.median(samples)), "group": "g1"},
                "flops_table5": None, "flops_full": flops}

    rows = [row(f"fraq:tau={t}", "fraq", {"tau": t}, s * drift * rng.uniform(0.99, 1.01, ROUNDS), 1e9 * s / 0.008)
            for t, s in base.items()]
    for spec, name, options, ratio, flops in peers:
        ref = base.get(options.get("tau"), base[0.95])
        rows.append(row(spec, name, options, ref * ratio * drift * rng.uniform(0.99, 1.01, ROUNDS), flops))
    return pd.DataFrame([{"preset": "roberta-base", "rows": rows, "loadavg": 0.1, "steal": 0.0, "threads": 1,
                          "device": device}])


def _lines(df: pd.DataFrame) -> list[str]:
    rows = tables123_rows(df)
    return flop_check_lines(rows[rows["preset"] == "roberta-base"])


def _value(line: str, what: str) -> float:
    return float(re.search(rf"{what} ([0-9.]+)", line).group(1))


@pytest.mark.parametrize("ratio, word", [(1.2 * 1.4, "within"), (1.2 * 1.6, "outside"), (1.2 / 1.6, "outside"),
                                         (1.2 / 1.4, "within")])
def test_measured_over_predicted_against_the_target(ratio, word):
    """A peer 1.2x FRAQ's FLOPs (tau = 0.95) timed at ``ratio`` x FRAQ: measured / predicted is
    ratio / 1.2 to the 1% per-round jitter, said within or outside 1.5x either way."""
    line, = (s for s in _lines(_records([("flexlora:kernel=rsvd", "flexlora", {"kernel": "rsvd"}, ratio, 1.2 * 1.25e9)]))
             if s.startswith("  - "))
    q = _value(line, "measured / predicted")
    assert q == pytest.approx(ratio / 1.2, rel=0.03), line
    assert _value(line, "predicts") == pytest.approx(1.2, rel=1e-3), line
    assert line.endswith(f"{word} {TARGET:g}x."), line
    assert "**agrees**" not in line and "**disagrees**" not in line and "GPU" not in line and "GH200" not in line


def test_a_row_at_a_threshold_fraq_ran_at_compares_with_that_fraq_row():
    """FLoRIST at tau = 0.80 against FRAQ (tau=0.80) (1 GFLOP), at 0.90 against FRAQ (tau=0.95): each
    prediction from its own FLOPs over that row's."""
    peers = [("florist:tau=0.8,kernel=qr", "florist", {"tau": 0.8, "kernel": "qr"}, 1.1, 1.1e9),
             ("florist:tau=0.9,kernel=qr", "florist", {"tau": 0.9, "kernel": "qr"}, 1.3, 1.3 * 1.25e9)]
    head, *lines = _lines(_records(peers))
    at80 = next(s for s in lines if "tau=0.8, kernel=qr" in s)
    at90 = next(s for s in lines if "tau=0.9, kernel=qr" in s)
    assert "/ FRAQ (tau=0.8):" in at80 and _value(at80, "predicts") == pytest.approx(1.1), at80
    assert "/ FRAQ (tau=0.95):" in at90 and _value(at90, "predicts") == pytest.approx(1.3), at90
    assert "within for 2 of 2 rows" in head and "not a paper claim" in head, head


def test_published_rows_and_rows_without_a_count_are_not_checked_here():
    peers = [("florist:tau=0.9", "florist", {"tau": 0.9}, 2.0, 2.5e9),  # as published: the claim's own line
             ("florg:kernel=gram", "florg", {"kernel": "gram"}, 0.5, None)]
    head, *lines = _lines(_records(peers))
    assert lines == [] or all("FLoRG" not in s for s in lines)
    assert not any("FLoRIST" in s for s in lines), lines
    assert "No FLOP count in these results: FLoRG (kernel=gram)" in head, head


def test_nothing_on_a_gpu_and_the_lines_stand_apart_from_the_gpu_claim():
    peers = [("florist:tau=0.95,kernel=qr", "florist", {"tau": 0.95, "kernel": "qr"}, 1.3, 1.2 * 1.25e9)]
    assert _lines(_records(peers, device="cuda:0")) == []
    claim = [s for s in verdict_lines(_records(peers), "roberta-base") if s.startswith("- Paper: FRAQ requires")]
    assert all("within" not in s and "1.5x" not in s for s in claim), claim


def test_too_few_rounds_is_descriptive_and_still_a_number():
    global ROUNDS
    keep, ROUNDS = ROUNDS, 4
    try:
        line = _lines(_records([("fedsvd:kernel=fraq", "fedsvd", {"kernel": "fraq"}, 0.5, 0.5 * 1.25e9)]))[1]
    finally:
        ROUNDS = keep
    assert "too few" in line or "descriptive" in line or "median of 4" in line, line
    assert _value(line, "measured / predicted") == pytest.approx(1.0, rel=0.03), line
