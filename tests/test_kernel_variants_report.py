"""The report's lines on the kernel variants (analysis.kernel_variants), from hand-made rows with a
hand-derived verdict: the dense path's time over the kernel's, paired round by round, and the
outputs' agreement, exact."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from analysis.kernel_variants import FIDELITY, dense_of, sweep_lines, table_lines  # noqa: E402


@pytest.mark.parametrize("name, dense", [("flexlora:kernel=fraq", "flexlora"), ("fedmomentum:tau=0.9,kernel=fraq",
                                                                              "fedmomentum:tau=0.9"),
                                         ("flexlora", None), ("flexlora:kernel=dense", None), ("fraq:tau=0.9", None)])
def test_dense_of_names_the_dense_path(name, dense):
    assert dense_of(name) == dense


def _timing(ms, group="g1"):
    return {"timing.samples": [x / 1e3 for x in ms], "timing.group": group, "loadavg": 0.2, "threads": 1, "steal": 0.0}


def _sweep_row(method, name, d, ms, excess_plain, quad=1e-7, group="g1"):
    return {"method": method, "method_name": name, "sweep": "d", "d": d, "r": 16, "mode": "batched",
            "excess_plain": excess_plain, "excess": quad, **_timing(ms, group)}


def test_sweep_lines_judge_the_smallest_speed_up_round_by_round_and_both_fidelities():
    """Two points, six paired rounds: dense 100 ms against 2 ms at d = 64 (50x) and 40 against 8 ms at
    d = 32 (5x in every round): the smallest ratio 5x, above 1 in every round: agrees, [5, 5]."""
    rows = []
    for d, dense_ms, kern_ms, group in ((64, 100.0, 2.0, "a"), (32, 40.0, 8.0, "b")):
        rows.append(_sweep_row("flexlora", "FlexLoRA", d, [dense_ms] * 6, 1e-12, group=group))
        rows.append(_sweep_row("flexlora:kernel=fraq", "FlexLoRA (kernel=fraq)", d, [kern_ms] * 6, 2e-12, group=group))
    rows.append(_sweep_row("fraq", "FRAQ", 64, [1.0] * 6, 1e-13, group="a"))
    (line,) = sweep_lines(pd.DataFrame(rows), ["sweep", "d", "r", "mode"], "Fig. 3 sweeps")
    assert line.startswith("- FlexLoRA (kernel=fraq) against FlexLoRA (Fig. 3 sweeps): Ours **agrees**")
    assert "5x at the least (exact)" in line, line  # every round's ratio the same: a one-point interval
    assert "median speed-ups 5x to 50x" in line
    assert f"both within {FIDELITY:g} of the float64 optimum" in line and "**agrees** (exact)" in line
    assert "FlexLoRA (kernel=fraq) 2.0e-12, FlexLoRA 1.0e-12" in line


def test_sweep_lines_say_when_the_dense_path_never_ran_beside_it():
    rows = [_sweep_row("flexlora:kernel=fraq", "FlexLoRA (kernel=fraq)", 3072, [5.0] * 6, 1e-12)]
    assert sweep_lines(pd.DataFrame(rows), ["sweep", "d", "r", "mode"], "Fig. 3 sweeps") == [
        "- FlexLoRA (kernel=fraq): no point of the Fig. 3 sweeps where flexlora was measured too."]


def _table_row(method, ms, *, kernel=None, agreement=None, skipped=None, group="t1"):
    spec = method.replace(" (", ":").rstrip(")")  # a label's spec: "flexlora (kernel=fraq)" -> "flexlora:kernel=fraq"
    return {"preset": "roberta-base", "method": method, "spec": spec, "name": method.split(" ")[0], "kernel": kernel,
            "agreement": agreement, "skipped": skipped, "display_name": None, "samples": [x / 1e3 for x in ms],
            **_timing(ms, group)}


AGREE = {"compared": 36, "modules": 36, "ratio_max": 0.25, "error_difference_max": 1e-9, "bound_min": 4e-9,
         "product_difference_max": 3e-7, "reference": "flexlora", "modules_compared_on": "every module"}


def test_table_lines_paired_speed_up_and_exact_agreement():
    """Dense 3000 ms, kernel 60 ms in each of six rounds: 50x, agrees; agreement ratio 0.25 <= 1: agrees.
    A ratio above 1 disagrees; a skipped agreement has no verdict and says why."""
    rows = pd.DataFrame([_table_row("flexlora", [3000.0] * 6),
                         _table_row("flexlora (kernel=fraq)", [60.0] * 6, kernel="fraq", agreement=AGREE),
                         _table_row("fraq (tau=0.95)", [50.0] * 6)])
    (line,) = table_lines(rows)
    assert line.startswith("- flexlora (kernel=fraq) against flexlora: Ours **agrees**")
    assert "50x faster (exact)" in line and "(medians 3000 ms and 60 ms: 50x)" in line
    assert "Outputs: Ours **agrees**" in line and "0.25 of that bound, over 36 distinct" in line
    bad = pd.DataFrame([_table_row("flexlora", [3000.0] * 6),
                        _table_row("flexlora (kernel=fraq)", [60.0] * 6, kernel="fraq",
                                   agreement=dict(AGREE, ratio_max=3.0))])
    assert "Outputs: Ours **disagrees**" in table_lines(bad)[0]
    with pytest.warns(UserWarning, match="not measured"):
        skipped = table_lines(pd.DataFrame([
            _table_row("flexlora", [], skipped="measured at --size paper only: slow"),
            _table_row("flexlora (kernel=fraq)", [60.0] * 6, kernel="fraq",
                       agreement={"reference": "flexlora", "skipped": "the dense path is not measured at this size"})]))
    assert skipped[0].count("**no verdict**") == 2 and "measured at --size paper only" in skipped[0]
    assert "the dense path is not measured at this size" in skipped[0]


def test_table_lines_a_kernel_row_without_a_dense_row_compares_outputs_alone():
    """A kernel row whose dense path is no row of the table (a like-for-like row such as
    FLoRIST at FRAQ's threshold) gets no 'not measured' time verdict, only the outputs'."""
    rows = pd.DataFrame([_table_row("flexlora (tau=0.95, kernel=fraq)", [60.0] * 6, kernel="fraq",
                                    agreement=AGREE)])
    rows["spec"] = ["flexlora:tau=0.95,kernel=fraq"]
    (line,) = table_lines(rows)
    assert "not a row of this table, so not timed here" in line and "not measured" not in line
    assert "outputs: Ours **agrees**" in line
