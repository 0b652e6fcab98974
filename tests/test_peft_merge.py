"""peft's own merge as baseline methods (benchmarks.peft_merge) against peft and the float64 optimum.

Tiny random BERT (12 modules: 32 x 32, 37 x 32, 32 x 37), 3 clients of ranks 4, 8, 2 with
different alphas and data sizes. Needs the ``fl`` extra (peft, transformers); skipped without it.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("transformers")

from benchmarks.peft_merge import AdapterMerge, build_clients, fraq_ranks, module_fidelity  # noqa: E402

EPS = torch.finfo(torch.float32).eps
TOL = 16 * EPS
"""Relative-error slack: float32 factors (the clients' and the merged ones) against float64 references."""


@pytest.fixture(scope="module")
def clients():
    return build_clients("tiny-bert")


@pytest.fixture(scope="module")
def stacks(clients):
    return clients.stacks()


def test_peft_svd_method_is_peft_own_merge(clients):
    """The method's adapter is what a user's own add_weighted_adapter call gives on the same
    adapters with weights n_k / sum n (built again from the same seed: a separate PeftModel)."""
    adapter = AdapterMerge("peft-svd", rank=4)(clients)
    other = build_clients("tiny-bert")
    total = sum(other.data_sizes)
    other.model.add_weighted_adapter(other.adapters, [n / total for n in other.data_sizes], "own",
                                     combination_type="svd", svd_rank=4)
    assert other.model.peft_config["own"].r == clients.model.peft_config[adapter].r == 4
    for name, layer in clients.layers.items():
        ours, theirs = layer.get_delta_weight(adapter), other.layers[name].get_delta_weight("own")
        torch.testing.assert_close(ours, theirs, rtol=0, atol=4 * EPS * theirs.abs().max().item())


def test_fraq_no_worse_than_peft_svd_at_equal_rank(clients, stacks):
    """Both at the float64 optimum (peft's only if its weights are normalized), FRAQ never worse."""
    peft = module_fidelity(stacks, clients.merged(AdapterMerge("peft-svd", rank=4)(clients)))
    ours = module_fidelity(stacks, clients.merged(AdapterMerge("fraq", rank=4)(clients)))
    assert peft["rank"] == ours["rank"] == [4] * len(stacks)
    assert max(peft["excess"]) <= TOL
    for e_fraq, e_peft in zip(ours["relative_error"], peft["relative_error"]):
        assert e_fraq <= e_peft + TOL


def test_peft_cat_is_the_exact_stack(clients, stacks):
    fid = module_fidelity(stacks, clients.merged(AdapterMerge("peft-cat")(clients)))
    assert fid["rank"] == [4 + 8 + 2] * len(stacks)
    assert max(fid["relative_error"]) <= TOL


def test_peft_svd_through_rank_pattern_takes_fraq_ranks(clients, stacks):
    ranks = fraq_ranks(clients, 0.95)
    assert len(set(ranks.values())) > 1  # the case exercises per-module ranks
    adapter = AdapterMerge("peft-svd", ranks=ranks)(clients)
    cfg = clients.model.peft_config[adapter]
    assert cfg.rank_pattern and cfg.alpha_pattern == cfg.rank_pattern
    fid = module_fidelity(stacks, clients.merged(adapter))
    assert fid["rank"] == [ranks[m] for m in stacks]
    assert max(fid["excess"]) <= TOL
    tau = module_fidelity(stacks, clients.merged(AdapterMerge("fraq", tau=0.95)(clients)))
    assert tau["rank"] == fid["rank"] and tau["params"] == fid["params"]


@pytest.mark.parametrize("name, preset", [("roberta", "roberta-base"), ("llama", "llama-3.2-3b")])
def test_random_models_have_the_paper_shapes(name, preset):
    """Built on the meta device (no memory): every adapted module has a preset group's (m, n)."""
    import transformers

    from benchmarks import peft_merge
    from fraq.presets import get_preset

    config = getattr(peft_merge, f"{name}_config")(2)
    cls = transformers.RobertaModel if name == "roberta" else transformers.LlamaModel
    with torch.device("meta"):
        model = cls(config)
    targets = peft_merge.MODELS[preset].targets
    shapes = {n.rsplit(".", 1)[-1]: tuple(mod.weight.shape) for n, mod in model.named_modules()
              if isinstance(mod, torch.nn.Linear) and n.rsplit(".", 1)[-1] in targets}
    assert shapes == {g.name: (g.m, g.n) for g in get_preset(preset).groups}


@pytest.mark.integration
def test_runner_and_report_section(tmp_path):
    """``benchmarks.run peft --size tiny`` writes one result; the analysis draws its table,
    figure and ratio lines from that file alone."""
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    from analysis import loaders, peft_merge as report
    from benchmarks.run import run

    run(tmp_path / "results", ("peft",), size="tiny", progress=False)
    df = loaders.load_results(tmp_path / "results" / "peft")
    assert len(df) == 1
    rows = report.rows(df)
    assert set(rows["method"]) == {"peft-cat", "peft-svd", "peft-svd-thin", "fraq"} and len(rows) == 6
    assert (rows["n"] == 2).all()
    assert rows["excess_max"].max() <= TOL
    table = report.table(df)
    assert len(table) == 6
    lines = report.ratio_lines(df)  # 2 rounds at the tiny size: descriptive, no interval (MIN_ROUNDS)
    assert len(lines) == 3 and "at its best" in lines[0] and "at its best" not in lines[1] and all("median of 2 paired rounds; descriptive: n < 6, no interval" in x and "95%" not in x
                                   for x in lines), lines
    report.figure(df)


@pytest.mark.integration
def test_a_slow_merge_timed_by_its_first_call_says_so(tmp_path):
    """``slow_repeats`` = 0 (the paper size's LLaMA layer): peft's svd merge is timed by its
    first call alone, that call's time is its one sample, and the table says so."""
    pytest.importorskip("pandas")
    from analysis import loaders, peft_merge as report
    from benchmarks.experiments import peft_compare
    from benchmarks.results import write_result

    config = dict(peft_compare.points("tiny")[0], slow_repeats=0)
    write_result(tmp_path, "peft", peft_compare.key(config), dict(config, size="tiny"),
                 peft_compare.measure(config))
    rows = report.rows(loaders.load_results(tmp_path / "peft"))
    slow = rows["method"].str.startswith("peft-svd")  # as published and at its best
    svd, rest = rows[slow], rows[~slow]
    assert len(svd) == 3 and (svd["n"] == 1).all() and (rest["n"] == config["repeats"]).all()
    assert all(s == [f] for s, f in zip(svd["samples_s"], svd["first_call_s"]))
    assert (svd["first_call_sample"] == True).all()  # noqa: E712 (a column of objects)
    table = report.table(loaders.load_results(tmp_path / "peft"))
    times = table["Time ms, median [min, max]"]
    assert times.str.contains(r"\(n=1: the first call\)").sum() == 3
    assert not times[~times.str.contains("n=1")].str.contains("first call").any()


@pytest.mark.integration
@pytest.mark.parametrize("damage", [  # each measures and reports a peft point: one in the default run
    lambda r: r["result"]["rows"][1].update(median_s="fast"),
    pytest.param(lambda r: r["result"]["rows"][0].update(samples_s=[]), marks=pytest.mark.slow),
    pytest.param(lambda r: r["result"].update(rows={"fraq": 1}), marks=pytest.mark.slow)])
def test_a_damaged_peft_result_is_named_and_skipped(tmp_path, damage):
    """A hand-damaged row of the peft comparison: the report skips the file, naming it, instead
    of a traceback."""
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    import json
    import warnings

    from analysis.resultset import load
    from benchmarks.run import run

    run(tmp_path / "results", ("peft", "fig1"), size="tiny", progress=False)
    f = next((tmp_path / "results" / "peft").glob("*.json"))
    rec = json.loads(f.read_text())
    damage(rec)
    f.write_text(json.dumps(rec))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = load(tmp_path / "results")
    assert res["peft"].empty
    assert any(str(f) in str(w.message) and "malformed peft result" in str(w.message) for w in seen)
