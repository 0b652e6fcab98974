"""The paper's speed-ups judged by what the device can test: a GPU's wall-clock ratio only on
a GPU; on a CPU the measured ratio against the FLOP models' (analysis.sections.tables123.MODEL_BAND)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.sections.tables123 import MODEL_BAND, verdict_lines


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


def test_on_a_cpu_the_gpu_ratio_is_shown_not_judged_and_the_flop_models_are():
    line = _line(_rows(70.0, "cpu"))
    assert "GPU claim: not judged on a CPU" in line
    assert line.count("**agrees**") >= 2, line  # 70x against 78x and 86x: both models within the band
    assert "above 190" not in line


def test_a_cpu_ratio_far_from_the_models_disagrees():
    lo, hi = MODEL_BAND
    line = _line(_rows(78.0 * hi * 3, "cpu"))
    assert "**disagrees**" in line, line


@pytest.mark.parametrize("ratio, word", [(250.0, "agrees"), (60.0, "disagrees")])
def test_on_a_gpu_the_papers_wall_clock_ratio_is_judged(ratio, word):
    line = _line(_rows(ratio, "cuda:0"))
    assert f"**{word}**" in line and "above 190" in line and "not judged" not in line


def test_the_claims_and_their_thresholds_are_the_papers_file(monkeypatch):
    """The quoted claim and the ratio a GPU tests come from ``analysis/paper.json``
    (``speedups``), and the CPU's band is its ``cpu_model_band``: no number typed in the code."""
    import analysis.sections.tables123 as section
    from analysis.loaders import paper

    stored = paper()
    assert MODEL_BAND == (stored["cpu_model_band"]["low"], stored["cpu_model_band"]["high"])
    assert stored["speedups"]["roberta-base"]["over_fraq_min"] == {"florist": 8.0, "flexlora": 190.0}
    changed = {**stored, "speedups": {"roberta-base": {"claim": "FRAQ requires a test claim",
                                                       "over_fraq_min": {"flexlora": 300.0}}}}
    monkeypatch.setattr(section, "paper", lambda: changed)
    line = _line(_rows(250.0, "cuda:0"))
    assert "FRAQ requires a test claim" in line and "above 300" in line and "**disagrees**" in line, line
