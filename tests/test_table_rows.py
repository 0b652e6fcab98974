"""Tables 1-3's rows (:mod:`benchmarks.experiments.table_rows`): one spec names one row, its
label tells distinct option values apart, and no row is offered that its method cannot build."""

from __future__ import annotations

import pytest

from benchmarks.experiments.table_rows import TableRow, row_label, table_rows
from fraq.aggregators import AGGREGATORS
from fraq.presets import get_preset


@pytest.mark.parametrize("text", ["lora-a2:round=1.0", "lora-a2:round=true", "lora-a2:round=2.0",
                                  "lora-a2:round=3", "lora-a2"])
def test_a_round_is_an_integer_round(text):
    with pytest.raises(ValueError, match=r"round\(="):
        TableRow.parse(text)


def test_the_rounds_parse():
    assert [TableRow.parse(f"lora-a2:round={r}").options["round"] for r in (1, 2)] == [1, 2]


@pytest.mark.parametrize("a,b", [(0.951, 0.95), (0.8, 0.8000001), (0.85, 0.849)])
def test_distinct_option_values_have_distinct_labels(a, b):
    la, lb = TableRow.parse(f"fraq:tau={a}").label, TableRow.parse(f"fraq:tau={b}").label
    assert la != lb, (la, lb)


def test_the_paper_labels_keep_two_decimals():
    assert row_label("fraq", {"tau": 0.8}) == "fraq (tau=0.80)"
    assert row_label("fraq", {"tau": 0.95}) == "fraq (tau=0.95)"
    assert row_label("fraq", {"tau": 0.951}) == "fraq (tau=0.951)"


def test_no_kernel_row_for_a_method_whose_constructor_has_no_kernel(monkeypatch):
    """An outside method declaring ``kernel_variants`` without a ``kernel`` option: no
    ``kernel=`` row is offered (building it would fail)."""
    base = AGGREGATORS["fedit"]
    cls = type("NoKernel", (base,), {"name": "no-kernel", "kernel_variants": ("fraq",), "paper_order": None,
                                      "display_name": "NoKernel"})
    monkeypatch.setitem(AGGREGATORS, "no-kernel", cls)
    rows = [str(r) for r in table_rows(get_preset("roberta-base"))]
    assert "no-kernel" in rows and not any(r.startswith("no-kernel:") for r in rows)
    assert "flexlora:kernel=fraq" in rows  # a method that takes one keeps its rows
