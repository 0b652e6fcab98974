"""The report's headline (analysis.sections.headline): at most 15 lines, each peer at its best
before its published kernel, ratios in words, and a GPU claim never judged on a CPU."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from analysis.sections import headline


def _row(method, name, ms, options=None, downlink=10.0, extrapolated=None):
    return dict(method=method, name=name, options=options or {}, downlink_pct=downlink, extrapolated=extrapolated,
                latency=dict(samples=[ms / 1e3] * 6, median=ms / 1e3))


def _tables(device: str) -> pd.DataFrame:
    rows = [_row("flora", "flora", 5.0, downlink=100.0),
            _row("flexlora", "flexlora", 3000.0, extrapolated="from 2 of 28 layers"),
            _row("flexlora (kernel=rsvd)", "flexlora", 200.0, {"kernel": "rsvd"}),
            _row("florist (tau=0.90)", "florist", 120.0, {"tau": 0.9}, downlink=27.0),
            _row("florist (tau=0.90, kernel=qr)", "florist", 40.0, {"tau": 0.9, "kernel": "qr"}, downlink=27.0),
            _row("fraq (tau=0.95)", "fraq", 50.0, {"tau": 0.95}, downlink=41.0)]
    return pd.DataFrame([dict(preset="roberta-base", rows=rows, device=device, loadavg=0.1, steal=0.0, threads=1)])


class _Res:
    def __init__(self, tables):
        self.experiments = ["tables123"]
        self._t = tables

    def __getitem__(self, name):
        return self._t if name == "tables123" else pd.DataFrame()


def test_on_a_cpu_the_gpu_claims_are_not_tested_and_the_best_kernel_comes_first():
    out = headline.lines(_Res(_tables("cpu")))
    assert out[0] == "## Headline" and len(out) <= headline.MAX_LINES
    text = "\n".join(out)
    florist = next(s for s in out if "against FLoRIST" in s)
    assert florist.index("at its best (kernel=qr) 0.8x FRAQ's time (faster)") < \
        florist.index("as published 2.4x FRAQ's time (slower)")
    assert "**not tested here**" in florist and "confirmed" not in text and "refuted" not in text
    flex = next(s for s in out if "against FlexLoRA" in s)
    assert "as published 60x FRAQ's time (slower) (extrapolated)" in flex
    assert "FLoRA 0.1x (downlink 100%)" in text  # the published rows faster than FRAQ, with their downlink
    assert not re.search(r"\d x FRAQ\b", text)


@pytest.mark.parametrize("florist_ms, word, where", [(500.0, "confirmed", "within"), (2500.0, "refuted", "above"),
                                                     (100.0, "refuted", "below")])
def test_on_a_gpu_the_published_ratio_is_set_against_the_papers_range(florist_ms, word, where):
    t = _tables("cuda:0")
    t.at[0, "rows"][3]["latency"] = dict(samples=[florist_ms / 1e3] * 6)
    line = next(s for s in headline.lines(_Res(t)) if "against FLoRIST" in s)
    assert f"**{word}** as published ({where} the paper's range)" in line


def test_no_results_no_headline():
    assert headline.lines(_Res(pd.DataFrame())) == []


def test_fig3s_word_is_its_sections_verdict():
    """agrees: confirmed; disagrees: refuted; anything else (inconclusive, descriptive, no
    verdict, nothing drawn) is not decided here: never a word from the medians alone."""
    word = headline._word
    assert word(["- Paper: FRAQ is the fastest. Ours **agrees** (tested: ...): 1.2x"]) == "**confirmed**"
    assert word(["- Paper: FRAQ is the fastest. Ours **disagrees** (tested: ...): 0.3x"]) == "**refuted**"
    assert word(["- Paper: FRAQ is the fastest. Ours **inconclusive** (tested: ...)"]) == "**not decided here**"
    assert word(["- Paper: FRAQ is the fastest. Ours **no verdict**: not measured"]) == "**not decided here**"
    assert word([]) == "**not decided here**"
