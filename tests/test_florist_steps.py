"""The ``florist_steps`` experiment: its points at every size, the same rank and product from
every row of the walk from FLoRIST to FRAQ, and the report section drawn from the tiny run."""

from __future__ import annotations

import pytest
import torch

from benchmarks.experiments import florist_steps
from benchmarks.sizes import SIZES

TRUNC_FACTOR = 64
"""Rows' products against the float64 best rank-p, in units of eps32 sigma_1 / (sigma_p -
sigma_{p+1}) (a backward-stable truncation's subspace error, Wedin), as tests/test_aggregators.py."""


@pytest.mark.parametrize("size", sorted(SIZES))
def test_points_are_every_row_of_each_preset_in_order(size):
    pts = florist_steps.points(size)
    presets = SIZES[size]["florist_steps"]["presets"]
    assert [p["preset"] for p in pts] == [name for name in presets for _ in florist_steps.STEPS]
    for name in presets:
        mine = [p for p in pts if p["preset"] == name]
        assert [p["row"] for p in mine] == [s.key for s in florist_steps.STEPS]
        assert len({str(florist_steps.group(p)) for p in mine}) == 1  # one paired group per preset
        assert all(p["tau"] == 0.90 and p["rounds"] >= 6 and p["launches"] == 1 for p in mine)
    keys = [florist_steps.key(p) for p in pts]
    assert len(set(keys)) == len(keys)
    assert all(florist_steps.cost(p) > 0 for p in pts)


def test_reduced_is_roberta_whole_and_two_llama_layers_paper_is_whole():
    reduced = {p["preset"]: p["layers"] for p in florist_steps.points("reduced")}
    assert reduced == {"roberta-base": None, "llama-3.2-3b": 2}
    assert {p["layers"] for p in florist_steps.points("paper")} == {None}
    assert florist_steps.points("gpu") == florist_steps.points("paper")


def test_rows_in_order_with_the_steps_options():
    from fraq.aggregators import FLoRIST, Fraq

    aggs = {s.key: florist_steps.aggregator(s) for s in florist_steps.STEPS}
    assert [s.key for s in florist_steps.STEPS] == ["published", "batched", "qr", "fraq-stepwise", "fraq"]
    assert [s.batched for s in florist_steps.STEPS] == [False, True, True, True, True]
    assert all(isinstance(aggs[k], FLoRIST) and aggs[k].tau == 0.90 for k in ("published", "batched", "qr"))
    assert [aggs[k].kernel for k in ("published", "batched", "qr")] == ["svd", "svd", "qr"]
    assert all(isinstance(aggs[k], Fraq) for k in ("fraq-stepwise", "fraq"))
    assert aggs["fraq-stepwise"].pipeline == "stepwise" and aggs["fraq"].pipeline == "auto"


@pytest.mark.parametrize("preset", ["roberta-base", "llama-3.2-3b"])
def test_every_row_gives_the_same_rank_and_the_best_rank_p_product(preset):
    """On the preset at reduced sides (its clients and ranks, one layer): every row cuts every
    module at the same rank, and each product is the float64 best rank-p approximation of the
    exact aggregate to float32 rounding, so the rows are within that of each other."""
    from benchmarks.cases import build_model
    from benchmarks.measure.overhead import counted_preset
    from fraq.reference import dense_aggregate

    model = build_model(counted_preset(preset), layers=1)
    ups = model.updates()
    results = {s.key: florist_steps.aggregator(s).aggregate(ups, batched=s.batched) for s in florist_steps.STEPS}
    eps = torch.finfo(torch.float32).eps
    for name in model.shapes:
        ranks = {k: int(r.ranks[name]) for k, r in results.items()}
        assert len(set(ranks.values())) == 1, (name, ranks)
        p = ranks["fraq"]
        Bs, As = model.factors[name]
        exact = dense_aggregate(Bs, As, model.weights, model.preset.scales)
        U, S, Vh = torch.linalg.svd(exact)
        best = (U[:, :p] * S[:p]) @ Vh[:p]
        tol = TRUNC_FACTOR * eps * float(S[0] / (S[p - 1] - S[p]))
        for k, r in results.items():
            got = r.downlinks[0][name].delta().double()
            err = float(torch.linalg.matrix_norm(got - best) / torch.linalg.matrix_norm(exact))
            assert err <= tol, (name, k, err, tol)


def test_a_measured_point_records_what_the_section_reads():
    c = next(p for p in florist_steps.points("tiny") if p["preset"] == "roberta-base" and p["row"] == "fraq")
    got = florist_steps.measure(c)
    assert len(got["timing"]["samples"]) == c["rounds"] and got["timing"]["compared"] == c["compared"]
    assert got["modules"] == 3 and len(got["ranks"]) == 3
    assert got["flops_counted"] > 0 and got["flops_analytic"] > 0 and got["ops"] > 0
    assert set(got["cuda_configuration"]) == {"host_reads", "ops", "options"}
    assert got["cuda_configuration"]["options"]["pipeline"] == "static"


def test_the_section_draws_a_table_per_preset_and_the_steps(tiny_results, tmp_path):
    from conftest import tiny_copy

    from analysis.resultset import load
    from analysis.sections import florist_steps as section

    tiny_copy(tiny_results, tmp_path / "results", ("florist_steps",))
    res = load(tmp_path / "results")
    parts = section.draw(res)
    assert parts[0].title.startswith("From FLoRIST to FRAQ")
    assert [p.title.split(":")[0] for p in parts[1:]] == ["RoBERTa-base", "LLaMA-3.2-3B"]
    for p in parts[1:]:
        assert sum(line.startswith("|") for line in p.body.splitlines()) == 7  # header, rule, the five rows
        for label in section.LABELS.values():
            assert label in p.body
        assert "engineering: batching" in p.body and "algorithm: two QRs in place of two SVDs" in p.body
        assert "The whole gap" in p.body and "Ours **" in p.body
        assert "faster" in p.body or "slower" in p.body
