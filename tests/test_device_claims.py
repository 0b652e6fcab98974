"""The paper's speed-ups judged by what the device can test: a GPU's wall-clock ratio only on
a GPU; on a CPU the measured ratio and the FLOP models' predictions, printed with no verdict."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.notes import NotMeasured
from analysis.sections.tables123 import verdict_lines


def _rows(ratio: float, device: str, model_ratio: float = 78.0, rounds: int = 12, seed: int = 0) -> pd.DataFrame:
    """RoBERTa-base rows: FRAQ at ~10 ms drifting between rounds, FlexLoRA ``ratio`` times it,
    paired round by round, with FLOP counts whose ratio is ``model_ratio``."""
    rng = np.random.default_rng(seed)
    drift = rng.uniform(0.7, 1.4, rounds)
    fraq = 0.010 * drift * rng.uniform(0.98, 1.02, rounds)
    flex = fraq * ratio * rng.uniform(0.97, 1.03, rounds)

    def row(method, name, samples, flops, options=None):
        return {"method": method, "name": name, "options": options or {}, "downlink_pct": 1.0,
                "latency": {"samples": list(samples), "median": float(np.median(samples)), "group": "g1"},
                "flops_table5": flops, "flops_full": flops * 1.1}

    rows = [row("flexlora", "flexlora", flex, 1e9 * model_ratio),
            row("fraq (tau=0.95)", "fraq", fraq, 1e9, {"tau": 0.95})]
    return pd.DataFrame([{"preset": "roberta-base", "rows": rows, "loadavg": 0.1, "steal": 0.0, "threads": 1,
                          "device": device}])


def _line(df: pd.DataFrame) -> str:
    return next(s for s in verdict_lines(df, "roberta-base") if s.startswith("- Paper: FRAQ requires"))


def _check(df: pd.DataFrame) -> str:
    """The FLOP-model check: a line of its own under the claim's."""
    lines = verdict_lines(df, "roberta-base")
    claim = next(i for i, s in enumerate(lines) if s.startswith("- Paper: FRAQ requires"))
    assert lines[claim + 1].startswith("  - FLOP-model check, FlexLoRA / FRAQ"), lines
    return lines[claim + 1]


def test_on_a_cpu_the_gpu_ratio_is_not_tested_and_the_flop_models_are_numbers_not_verdicts():
    line, check = _line(_rows(70.0, "cpu")), _check(_rows(70.0, "cpu"))
    assert "**not tested here** (a CPU run)" in line and "measured here FlexLoRA / FRAQ 70" in line, line
    assert "FLOP-model" not in line and "predicts" not in line, line  # never beside the GPU claim
    assert "(not a claim, no verdict)" in check and "predicts 78x (measured / predicted 0.9" in check, check
    for text in (line, check):
        assert "**agrees**" not in text and "**disagrees**" not in text and "above 190" not in text, text


def test_a_cpu_ratio_far_from_the_models_is_still_no_verdict():
    check = _check(_rows(78.0 * 6, "cpu"))  # six times the model: a number, never a verdict from a window
    assert "measured / predicted 6.0" in check and "**disagrees**" not in check, check


def test_on_a_gpu_no_flop_model_check_is_printed():
    lines = verdict_lines(_rows(250.0, "cuda:0"), "roberta-base")
    assert not any("FLOP-model" in s or "predicts" in s for s in lines), lines


@pytest.mark.parametrize("ratio, word, where", [(250.0, "agrees", "within"), (60.0, "disagrees", "below"),
                                               (6000.0, "disagrees", "above")])
def test_on_a_gpu_the_papers_wall_clock_ratio_is_judged_against_its_range(ratio, word, where):
    """The paper's "190-2,300x" is a range: a ratio inside it agrees, one below or above it
    says which, and one above is never called in agreement (as 41x against "8-15x" was)."""
    line = _line(_rows(ratio, "cuda:0"))
    assert f"**{word}**" in line and "within 190-2300x" in line and "not judged" not in line, line
    assert f"{where} the paper's range" in line, line


def test_against_range_says_where_the_interval_lies():
    from analysis.verdicts import Verdict, against_range

    def v(lo, hi, word="inconclusive"):
        return Verdict(word, (lo + hi) / 2, lo, hi, method="paired", rounds=12)

    assert against_range(v(40.0, 43.0), 8.0, 15.0) == "above the paper's range"
    assert against_range(v(4.0, 6.0), 8.0, 15.0) == "below the paper's range"
    assert against_range(v(9.0, 12.0), 8.0, 15.0) == "within the paper's range"
    assert against_range(v(12.0, 17.0), 8.0, 15.0) == "straddles an end of the paper's range"
    few = Verdict("descriptive", 41.0, method="paired", rounds=4)
    assert against_range(few, 8.0, 15.0) == "the value above the paper's range"
    assert against_range(Verdict("no verdict", missing=("x",)), 8.0, 15.0) == ""


def test_the_claims_and_their_thresholds_are_the_papers_file(monkeypatch):
    """The quoted claim and the ratio a GPU tests come from ``analysis/paper.json``
    (``speedups``): no number typed in the code."""
    import analysis.sections.tables123 as section
    from analysis.loaders import paper

    stored = paper()
    assert stored["speedups"]["roberta-base"]["over_fraq_min"] == {"florist": 8.0, "flexlora": 190.0}
    changed = {**stored, "speedups": {"roberta-base": {"claim": "FRAQ requires a test claim",
                                                       "over_fraq_min": {"flexlora": 300.0},
                                                       "quoted": {"flexlora": "some 310x"}}}}
    monkeypatch.setattr(section, "paper", lambda: changed)
    line = _line(_rows(250.0, "cuda:0"))
    assert "FRAQ requires a test claim" in line and "above 300" in line and "**disagrees**" in line, line
    assert "the paper: some 310x" in line
    assert "FlexLoRA: the paper's some 310x is a GH200 wall-clock ratio" in _line(_rows(250.0, "cpu"))


def test_each_ratio_is_quoted_in_the_papers_words():
    """The ratio a CPU shows and does not judge is the paper's own: Table 3's "around 12x" (FLoRIST)
    and "more than 900x" (FlexLoRA), each in the quoted claim, not the lower end a GPU tests
    (10x: 12 less the sixth a rounded "around" admits)."""
    from analysis.loaders import paper

    for preset, s in paper()["speedups"].items():
        if preset.startswith("_"):
            continue
        assert set(s["quoted"]) == set(s["over_fraq_min"]), preset
        assert all(q in s["claim"] for q in s["quoted"].values()), preset
    assert paper()["speedups"]["llama-3.2-3b-hetero"]["quoted"]["florist"] == "around 12x"
    rows = _rows(70.0, "cpu")
    rows["preset"] = "llama-3.2-3b-hetero"
    with pytest.warns(NotMeasured, match="FLoRIST"):  # these rows have no FLoRIST: that verdict is not measured
        lines = verdict_lines(rows, "llama-3.2-3b-hetero")
    line = next(s for s in lines if s.startswith("- Paper: both FRAQ variants"))
    assert "around 12x faster than FLoRIST" in line  # the claim quoted
    assert "FlexLoRA: the paper's more than 900x is a GH200 wall-clock ratio" in line, line
    assert "the paper's 900x" not in line and "the paper's 10x" not in line
