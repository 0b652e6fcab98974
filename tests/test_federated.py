"""The federated harness on a tiny BERT built here (no download): math of one round per method,
resume == uninterrupted, partitions, data loading, results files, overwrite protection.

Needs the ``fl`` extra (transformers, peft, safetensors); skipped without it.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("safetensors")

from fraq.aggregators import Factors, FlorgState, LoraA2State, get_aggregator  # noqa: E402
from fraq.aggregators.florg import florg_delta  # noqa: E402
from fraq.federated.adapters import load_client_adapters, save_client_adapters  # noqa: E402
from fraq.federated.checkpoint import RoundState, load_checkpoint, save_checkpoint  # noqa: E402
from fraq.federated.cli import main  # noqa: E402
from fraq.federated.client import LocalJob, TrainSettings, load_start, local_update  # noqa: E402
from fraq.federated.config import Config, load_config, method_label, parse_method  # noqa: E402
from fraq.federated.dataset import load_dataset  # noqa: E402
from fraq.federated.experiment import run_experiment  # noqa: E402
from fraq.federated.intents import DOMAINS, generate_intents  # noqa: E402
from fraq.federated.model import TINY_MODEL, Backbone  # noqa: E402
from fraq.federated.partition import partition, partition_summary  # noqa: E402
from fraq.federated.round_loop import ClientPlan, MethodSetup, run_round  # noqa: E402
from fraq.federated.state import eval_weights  # noqa: E402
from fraq.federated.task import Task  # noqa: E402

EPS32 = torch.finfo(torch.float32).eps


def tiny_backbone(*, layers=(1,), cache=True) -> Backbone:
    """The 2-layer random BERT of TINY_MODEL (no download) with LoRA on ``layers``."""
    return Backbone(TINY_MODEL, target_modules=["query", "key", "value"],
                    layers_to_transform=None if layers is None else list(layers), max_length=48, cache_prefix=cache)


def tiny_config(**over) -> Config:
    base = {"dataset": {"name": "intents", "train_per_intent": 10, "test_per_intent": 3},
            "federated.clients": 3, "federated.rounds": 2, "federated.head_rounds": 1, "federated.eval_every": 1,
            "train.steps": 3, "train.batch_size": 8, "train.lr": 0.01, "train.head_lr": 0.01,
            "model.name": TINY_MODEL, "model.max_length": 48, "model.layers_to_transform": [1],
            "model.cache_prefix": True, "partition.min_size": 5, "seeds": None, "variants": {"homogeneous": {}}}
    base.update(over)
    return load_config("quick", base)


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(tiny_config(), log=lambda *a: None)


def one_round(task: Task, spec: str, cfg: dict | None = None):
    """Round 1 of ``spec`` on ``task``: (method, state before, state after, uploads)."""
    method = MethodSetup.make(spec, cfg or task.config)
    s0 = method.initial_state(task)
    s1, rec, updates = run_round(task, method, s0, evaluate=False, keep_uploads=True)
    return method, s0, s1, updates, rec


def exact_average(updates) -> dict[str, torch.Tensor]:
    w = torch.tensor([u.weight for u in updates], dtype=torch.float64)
    a = w / w.sum()
    return {n: sum(a[k] * u.scale_of(n) * (u.factors[n][0].double() @ u.factors[n][1].double())
                   for k, u in enumerate(updates)) for n in updates[0].factors}


def delta(task, state, method) -> dict[str, torch.Tensor]:
    ev = eval_weights(state, method.plan.ranks, task.client_layer(method.agg))
    return {n: ev[n].double() - task.pretrained[n].double() for n in ev}


def close(a: torch.Tensor, b: torch.Tensor, factor: float = 100.0) -> bool:
    """|a - b| within ``factor`` eps32 of the larger norm (float32 weights, float64 merges)."""
    scale = max(float(torch.linalg.matrix_norm(b)), float(torch.linalg.matrix_norm(a)), 1.0)
    return float(torch.linalg.matrix_norm(a - b)) <= factor * EPS32 * scale


# ---------------------------------------------------------------------------------- math per method
def test_fraq_tau1_equals_flora_after_merge(task):
    _, _, s_flora, up_flora, _ = one_round(task, "flora")
    _, _, s_fraq, up_fraq, rec = one_round(task, "fraq:tau=1.0")
    for n in up_flora[0].factors:  # same seeds: the same uploads
        assert torch.equal(up_flora[0].factors[n][0], up_fraq[0].factors[n][0])
    exact = exact_average(up_flora)
    for n, W0 in task.pretrained.items():
        d_flora = s_flora.weights[n].double() - W0.double()
        d_fraq = s_fraq.weights[n].double() - W0.double()
        assert close(d_flora, exact[n])
        # tau = 1 keeps every direction above the Gram's noise floor s eps lambda_1
        # (fraq.recompress): what it drops has sigma_i <= sqrt(s eps) sigma_1, so
        # ||dropped||_F <= s sqrt(eps) sigma_1, plus float32 rounding of W.
        S = torch.linalg.svdvals(exact[n])
        s_ = sum(up_fraq[k].factors[n][0].shape[1] for k in range(len(up_fraq)))
        bound = s_ * EPS32 ** 0.5 * float(S[0]) + 100 * EPS32 * float(W0.abs().max())
        assert float(torch.linalg.matrix_norm(d_fraq - d_flora)) <= bound
        assert rec["ranks"][n] <= s_
    assert all(s is None for s in s_fraq.starts) and all(s is None for s in s_flora.starts)  # reinitialize


def test_fedex_lora_merged_model_is_exact_average(task):
    method, s0, s1, updates, _ = one_round(task, "fedex-lora")
    exact = exact_average(updates)
    d = delta(task, s1, method)
    for n in exact:
        assert close(d[n], exact[n])
        # W carries the residual; the start adapter is FedIT's average at scale s
        f = s1.starts[0][n]
        avgB = sum(u.weight * u.factors[n][0] for u in updates) / sum(u.weight for u in updates)
        torch.testing.assert_close(f.B, avgB, rtol=0, atol=10 * EPS32 * float(avgB.abs().max() + 1))
    # FedIT keeps W and sends the averaged factors: not the exact average
    m2, _, s_it, up_it, _ = one_round(task, "fedit")
    d_it = delta(task, s_it, m2)
    for n, W in s_it.weights.items():
        assert torch.equal(W, task.pretrained[n])
    a = torch.tensor([u.weight for u in up_it], dtype=torch.float64)
    a = a / a.sum()
    n0 = next(iter(d_it))
    s = up_it[0].scale_of(n0)
    Bg = sum(a[k] * u.factors[n0][0].double() for k, u in enumerate(up_it))
    Ag = sum(a[k] * u.factors[n0][1].double() for k, u in enumerate(up_it))
    assert close(d_it[n0], s * Bg @ Ag)


def test_flexlora_gives_best_rank_r_of_exact_average(task):
    method, _, s1, updates, _ = one_round(task, "flexlora")
    exact = exact_average(updates)
    d = delta(task, s1, method)
    r = method.plan.ranks[0]
    for n, M in exact.items():
        U, S, Vh = torch.linalg.svd(M)
        best = (U[:, :r] * S[:r]) @ Vh[:r]
        assert close(d[n], best, factor=1e3)
        assert torch.equal(s1.weights[n], task.pretrained[n])


def test_florist_tau1_is_exact_and_warm_starts(task):
    method, _, s1, updates, _ = one_round(task, "florist:tau=1.0")
    exact = exact_average(updates)
    d = delta(task, s1, method)
    for n in exact:
        assert close(d[n], exact[n], factor=1e3)
    assert s1.starts[0] is not None


def test_lora_a2_trains_one_factor_per_round(task):
    method, s0, s1, updates, _ = one_round(task, "lora-a2")
    assert isinstance(s1.agg_state, LoraA2State) and s1.agg_state.trains == "A"
    for n in task.backbone.targets:
        A0 = s0.starts[0][n].A
        for u in updates:  # round 1 trains B only: every client keeps the shared A
            assert torch.equal(u.factors[n][1], A0)
        assert torch.equal(s1.starts[0][n].A, A0)
    s2, _, up2 = run_round(task, method, s1, evaluate=False, keep_uploads=True)
    for n in task.backbone.targets:  # round 2 trains A only
        for u in up2:
            assert torch.equal(u.factors[n][0], s1.starts[0][n].B)


def test_florg_starts_at_pretrained_model_and_averages_grams(task):
    method, s0, s1, updates, _ = one_round(task, "florg")
    assert isinstance(s1.agg_state, FlorgState)
    proj = task.client_layer(method.agg).projections
    d0 = delta(task, s0, method)  # the offset base plus the initial adapter is the pretrained model
    for n, D in d0.items():
        assert float(D.abs().max()) <= 100 * EPS32 * float(task.pretrained[n].abs().max())
    a = torch.tensor([u.weight for u in updates], dtype=torch.float64)
    a = a / a.sum()
    d1 = delta(task, s1, method)
    r = method.plan.ranks[0]
    for n in task.backbone.targets:
        Q = sum(a[k] * u.factors[n][1].double().mT @ u.factors[n][1].double() for k, u in enumerate(updates))
        lam, V = torch.linalg.eigh(Q)
        Qr = (V[:, -r:] * lam[-r:]) @ V[:, -r:].mT
        L, R = proj[n]
        s = updates[0].scale_of(n)
        want = d0[n] + s * L.double() @ Qr @ R.double() - florg_delta(
            L.double(), s0.starts[0][n].A.double(), R.double(), s)
        assert close(d1[n], want, factor=1e3)


def test_heterogeneous_ranks_plan():
    ranks, alphas = [4, 16, 32], [8.0, 32.0, 64.0]
    assert ClientPlan.make(get_aggregator("fedit"), ranks, alphas).skip
    assert ClientPlan.make(get_aggregator("flora"), ranks, alphas).skip is None
    a2 = ClientPlan.make(get_aggregator("lora-a2"), ranks, alphas)
    assert a2.ranks == [32] * 3 and a2.upload_ranks == ranks and a2.skip is None


def test_heterogeneous_round_downlinks(task):
    cfg = tiny_config(**{"federated.ranks": [2, 4, 8]})
    m_flora, _, _, _, rec_flora = one_round(task, "flora", cfg)
    assert rec_flora["downlink_pct_flora"] == pytest.approx(100.0)
    _, _, s1, _, rec = one_round(task, "fraq:tau=0.9", cfg)
    assert rec["downlink_pct_flora"] < 100.0
    _, _, s_fx, _, rec_fx = one_round(task, "flexlora", cfg)
    assert [f[next(iter(f))].rank for f in s_fx.starts] == [2, 4, 8]


def test_load_start_scales_truncates_and_pads():
    B, A = torch.randn(6, 4, dtype=torch.float64).float(), torch.randn(4, 5).float()
    f = Factors(B, A, 1.0)
    Bs, As = load_start(f, 6, 5, 4, 0.5, seed=1)
    torch.testing.assert_close(0.5 * Bs @ As, B @ A)
    Bt, At = load_start(f, 6, 5, 2, 1.0, seed=1)
    assert Bt.shape == (6, 2) and torch.equal(At, A[:2])
    Bp, Ap = load_start(f, 6, 5, 7, 1.0, seed=1)
    assert Bp.shape == (6, 7) and torch.equal(Bp[:, 4:], torch.zeros(6, 3)) and Ap[4:].abs().sum() > 0
    torch.testing.assert_close(Bp @ Ap, B @ A)


def test_local_update_leaves_backbone_unchanged(task):
    bb = task.backbone
    before = {k: v.clone() for k, v in bb.model.state_dict().items()}
    names = [n for n, _ in bb.model.named_modules()]
    head = task.new_head()
    res = local_update(bb, head, *task.clients[0], LocalJob(0, 1, 4, 8.0), TrainSettings(steps=2, batch_size=4))
    assert [n for n, _ in bb.model.named_modules()] == names
    for k, v in bb.model.state_dict().items():
        assert torch.equal(v, before[k])
    assert res.update.factors[next(iter(bb.targets))][0].abs().sum() > 0  # B moved off zero


def test_prefix_cache_is_exact():
    cached, full = tiny_backbone(cache=True), tiny_backbone(cache=False)
    texts = ["book a flight to paris tomorrow", "turn off the kitchen lights", "what's the weather"]
    xc, xf = cached.encode(texts), full.encode(texts)
    cached.prefix_cached()
    idx = torch.arange(3)
    with torch.no_grad():
        fc = cached.features(cached.model, xc.batch(idx, cached.device))
        ff = full.features(full.model, xf.batch(idx, full.device))
    torch.testing.assert_close(fc, ff, rtol=0, atol=100 * EPS32)


# ---------------------------------------------------------------------------------- resume, files
def _kill_after(round_no):
    def log(msg):
        if f"round {round_no}/" in str(msg):
            raise KeyboardInterrupt

    return log


def records(out: Path) -> dict[str, dict]:
    """key -> result record of every result file of the run in ``out``."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "results" / "federated").glob("*.json"))}


@pytest.mark.integration
def test_resume_equals_uninterrupted(tmp_path):
    cfg = tiny_config(**{"methods": ["lora-a2", "fraq:tau=0.9"], "federated.rounds": 3, "seeds": [1, 2],
                         "federated.save_adapters_round": 3})
    files_a = run_experiment(cfg, tmp_path / "a", progress=False, log=lambda *a: None)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "b", progress=False, log=_kill_after(2))
    assert (tmp_path / "b" / "checkpoints" / "homogeneous-lora-a2-seed1.pt").exists()
    files_b = run_experiment(cfg, tmp_path / "b", resume=True, progress=False, log=lambda *a: None)
    assert [f.name for f in files_a] == [f.name for f in files_b] == [
        "homogeneous-lora-a2-seed1.json", "homogeneous-fraq-tau0.9-seed1.json",
        "homogeneous-lora-a2-seed2.json", "homogeneous-fraq-tau0.9-seed2.json"]
    ra, rb = records(tmp_path / "a"), records(tmp_path / "b")
    assert ra.keys() == rb.keys()
    for key in ra:
        assert ra[key]["config"] == rb[key]["config"] and ra[key]["config"]["seed"] == int(key[-1])
        for x, y in zip(ra[key]["result"]["rounds"], rb[key]["result"]["rounds"], strict=True):
            for field in ("accuracy", "train_loss", "downlink_params", "ranks", "rank_mean"):
                assert x[field] == y[field], (key, x["round"], field)
            assert x["accuracy"] is not None  # evaluated every round
    for key in ra:
        fa = load_client_adapters(tmp_path / "a" / "adapters" / f"{key}_round3.safetensors")
        fb = load_client_adapters(tmp_path / "b" / "adapters" / f"{key}_round3.safetensors")
        for ua, ub in zip(fa.updates, fb.updates):
            for n in ua.factors:
                assert torch.equal(ua.factors[n][1], ub.factors[n][1])
    assert not list((tmp_path / "b" / "checkpoints").iterdir())
    seeds = {k: r["result"]["rounds"][0]["train_loss"] for k, r in ra.items() if "lora-a2" in k}
    assert seeds["homogeneous-lora-a2-seed1"] != seeds["homogeneous-lora-a2-seed2"]  # the seed draws the run


def test_smoke_run_files_and_overwrite_protection(tmp_path):
    cfg = tiny_config(**{"methods": ["fedit", "fraq"], "federated.rounds": 1, "federated.clients": 2})
    out = tmp_path / "run"
    run_experiment(cfg, out, progress=False, log=lambda *a: None)
    recs = records(out)
    assert list(recs) == ["homogeneous-fedit-seed42", "homogeneous-fraq-seed42"]
    for key, rec in recs.items():  # the project's one result format
        assert {"experiment", "key", "config", "result", "machine", "versions", "git_sha", "device", "dtype",
                "threads", "loadavg", "created"} <= set(rec) and rec["experiment"] == "federated" and rec["key"] == key
        assert rec["config"]["variant"] == "homogeneous" and rec["config"]["seed"] == 42
        assert rec["versions"]["transformers"] and rec["versions"]["peft"]
    assert recs["homogeneous-fedit-seed42"]["result"]["rounds"][0]["downlink_pct_flora"] == 50.0
    assert 0 <= recs["homogeneous-fraq-seed42"]["result"]["rounds"][0]["accuracy"] <= 1
    assert not list((out / "checkpoints").iterdir())
    stamp = (out / "results" / "federated" / "homogeneous-fedit-seed42.json").read_text()
    with pytest.raises(FileExistsError, match="--resume"):
        run_experiment(cfg, out, progress=False, log=lambda *a: None)
    with pytest.raises(FileExistsError):
        run_experiment(cfg, out, progress=False, log=lambda *a: None, ask=lambda q: False)
    assert (out / "results" / "federated" / "homogeneous-fedit-seed42.json").read_text() == stamp  # untouched
    asked = []
    run_experiment(cfg, out, progress=False, log=lambda *a: None,
                   ask=lambda q: asked.append(q) or True)
    assert asked and "Overwrite" in asked[0]
    other = tiny_config(**{"methods": ["fedit", "fraq"], "federated.rounds": 1, "federated.clients": 2,
                           "train.lr": 0.02})
    with pytest.raises(ValueError, match="another configuration"):
        run_experiment(other, out, resume=True, progress=False, log=lambda *a: None)


def test_skipped_method_is_a_result(tmp_path):
    cfg = tiny_config(**{"methods": ["fedit", "flora"], "federated.rounds": 1,
                         "variants": {"uniform": {}, "mixed": {"federated.ranks": [2, 4, 2]}}})
    run_experiment(cfg, tmp_path, progress=False, log=lambda *a: None)
    recs = records(tmp_path)
    assert sorted(recs) == ["mixed-fedit-seed42", "mixed-flora-seed42", "uniform-fedit-seed42",
                            "uniform-flora-seed42"]
    assert "rank" in recs["mixed-fedit-seed42"]["result"]["skipped"]
    assert recs["mixed-flora-seed42"]["config"]["federated"]["ranks"] == [2, 4, 2]
    assert recs["mixed-flora-seed42"]["result"]["ranks"] == [2, 4, 2] and not recs["uniform-fedit-seed42"][
        "result"]["skipped"]


def test_a_method_is_parsed_once_where_the_config_is_loaded(tmp_path, method_parses, monkeypatch):
    """One harness run in process, two variants, two seeds, two methods: each method's text is
    parsed once, by load_config; the variants' checks, the points, the runs, their checkpoints
    and result files carry the spec and never read its text a second time, and the run checks each
    method once (with the setting), not once more per variant."""
    from fraq.federated.experiment import points

    import fraq.federated.config as config

    checks, real = [], config.method_aggregator
    monkeypatch.setattr(config, "method_aggregator", lambda spec, *a, **k: checks.append(spec) or real(spec, *a, **k))
    texts = method_parses
    methods = ["fedit", "fraq:tau=0.9"]
    cfg = tiny_config(**{"methods": methods, "federated.rounds": 1, "federated.clients": 2, "seeds": [1, 2],
                         "variants": {"homogeneous": {}, "mixed": {"federated.ranks": [2, 4]}}})
    assert texts == methods and [str(m) for m in cfg.methods] == methods
    assert checks == list(cfg.methods)
    texts.clear()
    files = run_experiment(cfg, tmp_path, progress=False, log=lambda *a: None)
    assert len(files) == len(points(cfg)) == 8 and texts == []
    assert checks == list(cfg.methods)  # checked with the setting, once: not per variant, nor by the run
    assert {json.loads(f.read_text())["config"]["method"] for f in files} == set(methods)


def test_variants_and_seeds_are_checked_before_any_work():
    for over, match in [({"seeds": [1, 1]}, "seeds"), ({"seeds": []}, "seeds"), ({"seeds": [-1]}, "seeds"),
                        ({"variants": {}}, "variants"), ({"variants": {"a b": {}}}, "variants"),
                        ({"variants": {"x": {"seed": 3}}}, "variants.x")]:
        with pytest.raises(ValueError, match=match):
            load_config("quick", over)
    from fraq.federated.config import runs

    with pytest.raises(ValueError, match=r"variants\.bad: .*federated\.ranks"):
        runs(load_config("quick", {"variants": {"bad": {"federated.ranks": [0]}}}))


def test_checkpoint_roundtrip(tmp_path):
    A = torch.randn(2, 3)
    st = RoundState(2, {"q": torch.randn(3, 3)}, {"weight": torch.randn(4, 3)},
                    [{"q": Factors(None, A, 2.0)}, None], FlorgState({"q": A}), [{"round": 1, "accuracy": None}])
    save_checkpoint(tmp_path / "c.pt", st, {"method": "florg"})
    back = load_checkpoint(tmp_path / "c.pt", {"method": "florg"})
    assert back.round == 2 and torch.equal(back.starts[0]["q"].A, A) and back.starts[1] is None
    assert torch.equal(back.agg_state.adapters["q"], A) and back.records == st.records
    with pytest.raises(ValueError, match="different run"):
        load_checkpoint(tmp_path / "c.pt", {"method": "fraq"})


def test_adapters_roundtrip(tmp_path, task):
    _, _, _, updates, _ = one_round(task, "flora", tiny_config(**{"federated.ranks": [2, 4, 2]}))
    path = save_client_adapters(tmp_path / "r1.safetensors", updates, {"method": "flora", "round": 1})
    back = load_client_adapters(path)
    assert back.meta == {"method": "flora", "round": 1} and back.modules == list(updates[0].factors)
    for u, v in zip(updates, back.updates):
        assert u.weight == v.weight and u.scale == v.scale
        for n in u.factors:
            assert torch.equal(u.factors[n][0], v.factors[n][0]) and torch.equal(u.factors[n][1], v.factors[n][1])
    # the loaded uploads aggregate exactly like the originals, and stack per module shape
    r1 = get_aggregator("fraq", tau=0.9).aggregate(updates)
    r2 = get_aggregator("fraq", tau=0.9).aggregate(back.updates)
    assert r1.ranks == r2.ranks
    (Bs, As, names), = back.stacks().values()
    assert len(Bs) == 3 and Bs[1].shape == (len(names), 32, 4) and As[1].shape == (len(names), 4, 32)
    with pytest.raises(ValueError, match="format"):
        bad = tmp_path / "bad.safetensors"
        from safetensors.torch import save_file

        save_file({"x": torch.zeros(1)}, str(bad))
        load_client_adapters(bad)


# ---------------------------------------------------------------------------------- data
def test_corpus_is_deterministic_and_disjoint():
    tr, te, names = generate_intents(7, 20, 5)
    tr2, te2, _ = generate_intents(7, 20, 5)
    assert tr == tr2 and te == te2
    assert len(names) == 48 == len(set(names)) and len(DOMAINS) == 12
    assert len(tr) == 48 * 20 and len(te) == 48 * 5
    assert not {t for t, _, _ in tr} & {t for t, _, _ in te}
    assert generate_intents(8, 20, 5)[0] != tr
    with pytest.raises(ValueError, match="train_per_intent"):
        generate_intents(0, 0, 5)


@pytest.mark.parametrize("alpha", [0.02, 0.1, 1.0])
def test_dirichlet_partition_properties(alpha):
    labels = np.repeat(np.arange(20), 50)
    parts = partition(labels, 10, alpha=alpha, min_size=10, seed=3)
    allidx = np.concatenate(parts)
    assert np.array_equal(np.sort(allidx), np.arange(labels.size))  # every example exactly once
    assert min(p.size for p in parts) >= 10
    again = partition(labels, 10, alpha=alpha, min_size=10, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_dirichlet_skew_grows_as_alpha_shrinks():
    labels = np.repeat(np.arange(20), 50)

    def labels_per_client(alpha):
        return np.mean([[np.unique(labels[p]).size for p in partition(labels, 10, alpha=alpha, min_size=5, seed=s)]
                        for s in range(5)])

    assert labels_per_client(0.02) < labels_per_client(0.1) < labels_per_client(10.0)
    assert labels_per_client(10.0) > 18
    # no client collects a stray example of every label (rounding must not favour the last one)
    for s in range(5):
        held = [np.unique(labels[p]).size for p in partition(labels, 10, alpha=0.02, min_size=5, seed=s)]
        assert max(held) < 20


def test_pathological_and_iid_partitions():
    tasks = ["t%d" % (i % 4) for i in range(40)]
    labels = np.arange(40) % 8
    parts = partition(labels, 4, scheme="pathological", tasks=tasks)
    for p in parts:
        assert len({tasks[i] for i in p}) == 1
    two = partition(labels, 2, scheme="pathological", tasks=tasks)
    assert sorted(len({tasks[i] for i in p}) for p in two) == [2, 2]
    with pytest.raises(ValueError, match="one task per client"):
        partition(labels, 5, scheme="pathological", tasks=tasks)
    iid = partition(labels, 3, scheme="iid")
    assert sorted(p.size for p in iid) == [13, 13, 14]
    summary = partition_summary(parts, labels, [f"l{i}" for i in range(8)])
    assert summary.count("client") == 4 and "examples" in summary


@pytest.mark.parametrize("kwargs, match", [
    ({"clients": 0}, "clients"), ({"alpha": 0.0}, "alpha"), ({"scheme": "x"}, "scheme"),
    ({"min_size": 500}, "min_size"), ({"scheme": "pathological"}, "task")])
def test_partition_rejects_bad_arguments(kwargs, match):
    labels = np.arange(100) % 10
    args = {"clients": 5, **kwargs}
    with pytest.raises(ValueError, match=match):
        partition(labels, args.pop("clients"), **args)


def test_local_dataset_directory(tmp_path):
    with open(tmp_path / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "intent", "task"])
        w.writerows([["hi there", "greet", "a"], ["bye now", "leave", "b"], ["hello", "greet", "a"]])
    with open(tmp_path / "test.jsonl", "w") as f:
        f.write(json.dumps({"text": "goodbye", "intent": "leave", "task": "b"}) + "\n")
    data = load_dataset({"path": str(tmp_path), "label_column": "intent"})
    assert data.label_names == ["greet", "leave"] and data.train_labels.tolist() == [0, 1, 0]
    assert data.test_texts == ["goodbye"] and data.test_labels.tolist() == [1] and data.train_tasks == ["a", "b", "a"]
    with pytest.raises(ValueError, match="label_column"):
        load_dataset({"path": str(tmp_path)})
    with pytest.raises(FileNotFoundError):
        load_dataset({"path": str(tmp_path / "nope")})


def test_saved_hf_dataset_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": ["a b", "c d"], "label": [1, 0]}),
        "test": datasets.Dataset.from_dict({"text": ["e"], "label": [1]})})
    dd.save_to_disk(str(tmp_path / "ds"))
    data = load_dataset({"path": str(tmp_path / "ds")})
    assert data.train_labels.tolist() == [1, 0] and data.num_labels == 2


# ---------------------------------------------------------------------------------- config, CLI
def test_config_settings_and_errors():
    for setting in ("quick", "roberta", "llama"):
        cfg = load_config(setting)
        assert cfg.federated.rounds >= 1
    assert load_config("llama").partition.scheme == "pathological"
    with pytest.raises(ValueError, match=r"train\.lr\(=-1\)"):
        load_config("quick", {"train.lr": -1})
    with pytest.raises(ValueError, match="unknown config key"):
        load_config("quick", {"train.nope": 1})
    with pytest.raises(ValueError, match="not one of"):
        load_config("quick", {"methods": ["fedavg"]})
    with pytest.raises(ValueError, match="config"):
        load_config("nosuch")
    with pytest.raises(ValueError, match="federated.ranks"):
        load_config("quick", {"federated.ranks": [8] * 11})
    ranks, alphas = load_config("quick", {"federated.ranks": [4, 16, 32, 64]}).federated.client_ranks()
    assert ranks == [4, 16, 32, 64, 4, 16, 32, 64, 4, 16] and alphas[:4] == [8.0, 32.0, 64.0, 128.0]
    assert parse_method("fraq:tau=0.80,backend=householder") == ("fraq", {"tau": 0.8, "backend": "householder"})
    assert method_label("fraq:tau=0.80") == "fraq-tau0.80"


def test_cli_refuses_bad_flags(capsys):
    assert main(["--rounds", "0", "--no-progress"]) == 2
    assert "federated.rounds(=0)" in capsys.readouterr().err


def test_saved_adapters_feed_the_fidelity_benchmark(tmp_path, monkeypatch):
    """FRAQ_ADAPTERS points the benchmarks' Fig. 4 cases (benchmarks.cases.fidelity_modules) at real saved
    client adapters."""
    import fraq
    from benchmarks.cases import fidelity_modules
    from benchmarks.experiments import fig4_rank

    from fraq.aggregators.payload import ClientUpdate
    from fraq.federated.adapters import save_client_adapters
    from fraq.reference import dense_aggregate
    from fraq.synthetic import lora_clients

    ranks = [4, 4, 4]
    Bq, Aq = lora_clients(24, 16, ranks, seed=3)
    Bv, Av = lora_clients(8, 16, ranks, seed=4)
    updates = [ClientUpdate(factors={"q": (Bq[k], Aq[k]), "v": (Bv[k], Av[k])}, scale=2.0, weight=1.0 + k)
               for k in range(3)]
    path = save_client_adapters(tmp_path / "round.safetensors", updates)
    monkeypatch.setenv("FRAQ_ADAPTERS", str(path))
    modules = fidelity_modules()
    assert sorted(min(m, n) for *_, m, n in modules) == [8, 16]
    original = {16: (Bq, Aq), 8: (Bv, Av)}  # d = min(m, n) of q (24 x 16) and v (8 x 16)
    for _, Bs, As, m, n in modules:
        d = min(m, n)
        B, A = fraq.stack(Bs, As)
        ref = dense_aggregate(*original[d], [1.0, 2.0, 3.0], [2.0] * 3)
        tol = 64 * torch.finfo(torch.float32).eps * float(torch.linalg.matrix_norm(ref))
        assert float(torch.linalg.matrix_norm(B.double() @ A.double() - ref)) <= tol
        row = fig4_rank.measure(dict(preset="llama-3.2-3b", size_layers=None, group=f"{m}x{n}", method="fraq", p=4))
        assert max(r - o for r, o in zip(row["relative_error"], row["optimal_error"])) <= 1e-5


# ---------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("spec, match", [
    ("fraq:tau=abc", r"method\(='fraq:tau=abc'\): tau\(='abc'\) must be a real number"),
    ("fraq:tau=2", r"method\(='fraq:tau=2'\): tau\(=2.0\) must be in \(0, 1\]"),
    ("florist:tau=NaN", r"method\(='florist:tau=NaN'\): tau\(=nan\)"),
    ("fraq:backend=nope", r"method\(='fraq:backend=nope'\): backend\(='nope'\)"),
    ("fedit:tau=0.9", r"method\(='fedit:tau=0.9'\): aggregator 'fedit' does not take option tau; it takes no options"),
    ("flexlora:max_dense_bytes=0", r"max_dense_bytes\(=0\)"),
])
def test_every_method_option_is_checked_at_validation(spec, match):
    with pytest.raises(ValueError, match=match):
        load_config("quick", {"methods": ["fedit", spec]})


@pytest.mark.parametrize("key, value", [
    ("train.lr", float("inf")), ("train.lr", float("nan")), ("train.head_lr", float("inf")),
    ("train.weight_decay", float("inf")), ("partition.alpha", float("inf")), ("federated.alphas", [float("inf")]),
    ("model.layers_pattern", 5), ("dataset.train_per_intent", 0),
])
def test_non_finite_and_out_of_range_values_are_refused(key, value):
    with pytest.raises(ValueError, match=rf"{key}\(="):
        load_config("quick", {key: value})


@pytest.mark.parametrize("device, match", [
    ("gpu7", r"model.device\(='gpu7'\) must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"),
    ("cuda:99", r"model.device\(='cuda:99'\): this machine has"),
    ("meta", r"model.device\(='meta'\) must be"),
])
def test_unknown_or_absent_device_is_refused(device, match):
    with pytest.raises(ValueError, match=match):
        load_config("quick", {"model.device": device})


def test_unknown_dataset_name_is_refused_before_loading():
    with pytest.raises(ValueError, match=r"dataset.name\(='nosuchdataset'\) is not 'intents'"):
        load_config("quick", {"dataset": {"name": "nosuchdataset"}})
    with pytest.raises(ValueError, match=r"dataset has unknown keys \['nmae'\]"):
        load_config("quick", {"dataset": {"nmae": "intents"}})
    # a legacy hub id without owner is taken when hub_id says so explicitly
    assert load_config("quick", {"dataset": {"name": "imdb", "hub_id": "imdb"}}).dataset["hub_id"] == "imdb"


def test_unreachable_hub_dataset_gives_an_error_naming_it(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'owner/nope' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match=r"dataset.name\(='owner/nope'\): the Hugging Face hub data set 'owner/nope'"):
        load_dataset({"name": "owner/nope"})


@pytest.mark.parametrize("argv, match", [
    (["--methods", "fedit", "fraq:tau=abc"], r"method\(='fraq:tau=abc'\): tau\(='abc'\)"),
    (["--set", "train.lr=Infinity"], r"train.lr\(=inf\) must be a finite positive number"),
    (["--set", "train.lr=NaN"], r"train.lr\(=nan\)"),
    (["--set", "model.device=gpu7"], r"model.device\(='gpu7'\)"),
    (["--dataset", "nosuchdataset"], r"dataset.name\(='nosuchdataset'\)"),
])
def test_cli_refuses_bad_input_before_any_work(argv, match, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(match, err), err
    assert not out.exists()


@pytest.mark.parametrize("argv", [["--clients", "2", "--rounds", "1"], ["--set", "federated.clients=3"],
                                  ["--clients", "1"]])
def test_cli_clients_fits_the_variants_the_user_did_not_give(argv, tmp_path, capsys, monkeypatch):
    from fraq.federated import cli
    from fraq.federated.experiment import points

    seen = {}
    monkeypatch.setattr(cli, "run_experiment", lambda cfg, out, **k: seen.setdefault("points", points(cfg)))
    assert main([*argv, "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    K = seen["points"][0].config.federated.clients
    hetero = {tuple(p.config.federated.ranks) for p in seen["points"] if p.variant == "heterogeneous"}
    assert hetero == {tuple([4, 16, 32, 64][:1] if K == 1 else [4, 64] if K == 2 else [4, 32, 64])}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "variants.heterogeneous" in err and "cut to" in err and f"(={K})" in err, err


def test_a_variant_with_more_ranks_than_clients_names_the_flags_that_fix_it():
    from fraq.federated.config import runs

    with pytest.raises(ValueError, match=r"variants\.heterogeneous: .*--clients 4.*--variants homogeneous"):
        runs(load_config("quick", {"federated.clients": 2}))


def _no_loading(*args, **kwargs):
    raise AssertionError("the model and the data were loaded before the input was checked")


def _record(t: int) -> dict:
    return {"round": t, "accuracy": 0.5, "train_loss": 1.0, "train_seconds": 1.0, "agg_ms": 1.0,
            "downlink_params": [10], "downlink_params_mean": 10.0, "downlink_pct_flora": 50.0, "ranks": {"q": 1},
            "rank_mean": 1.0}


RESULT = "results/federated/homogeneous-fedit-seed42.json"
CHECKPOINT = "checkpoints/homogeneous-fraq-seed42.pt"


def _resume_dir(tmp_path, cfg) -> Path:
    """An output directory as an interrupted run of ``cfg`` (fedit finished, fraq checkpointed) leaves it."""
    from fraq._results import write_result
    from fraq.federated.experiment import points

    out = tmp_path / "run"
    fedit, fraq_ = points(cfg)
    write_result(out / "results", "federated", fedit.key, fedit.record(), {"method": "fedit", "rounds": [_record(1)]})
    st = RoundState(1, {"q": torch.zeros(2, 2)}, {"weight": torch.zeros(2, 2)}, [None, None], None, [_record(1)])
    save_checkpoint(out / CHECKPOINT, st, {"method": "fraq", "config": fraq_.config.to_record()})
    return out


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _edit_result(out, change):
    rec = json.loads((out / RESULT).read_text())
    change(rec)
    (out / RESULT).write_text(json.dumps(rec))


@pytest.mark.parametrize("damage, name", [
    (lambda out: _truncate(out / RESULT), RESULT),
    (lambda out: (out / RESULT).write_text("[1, 2]"), RESULT),
    (lambda out: _edit_result(out, lambda r: r["config"].update(seed=7)), RESULT),
    (lambda out: _edit_result(out, lambda r: r["result"].update(rounds=[{}])), RESULT),
    (lambda out: _edit_result(out, lambda r: r.pop("result")), RESULT),
    (lambda out: _truncate(out / CHECKPOINT), CHECKPOINT),
    (lambda out: (out / CHECKPOINT).write_bytes(b"\x80\x04garbage"), CHECKPOINT),
    (lambda out: torch.save([1, 2], out / CHECKPOINT), CHECKPOINT),
    (lambda out: torch.save({"meta": 1}, out / CHECKPOINT), CHECKPOINT),
])
def test_resume_names_a_damaged_file_before_loading_model_and_data(damage, name, tmp_path, monkeypatch):
    cfg = tiny_config(**{"methods": ["fedit", "fraq"], "federated.clients": 2})
    out = _resume_dir(tmp_path, cfg)
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    with pytest.raises(AssertionError, match="loaded"):  # intact: the files pass, then the model would load
        run_experiment(cfg, out, resume=True, progress=False, log=lambda *a: None)
    damage(out)
    with pytest.raises(ValueError, match=re.escape(str(out / name))):
        run_experiment(cfg, out, resume=True, progress=False, log=lambda *a: None)


def test_cli_resume_with_a_damaged_checkpoint_prints_its_path(tmp_path, capsys, monkeypatch):
    over = ["--methods", "fedit", "fraq", "--clients", "2", "--seeds", "42", "--variants", "homogeneous",
            "--set", "model.name=" + TINY_MODEL]
    cfg = load_config("quick", {"methods": ["fedit", "fraq"], "federated.clients": 2, "model.name": TINY_MODEL,
                                "seeds": [42], "variants": {"homogeneous": {}}})
    out = _resume_dir(tmp_path, cfg)
    _truncate(out / CHECKPOINT)
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    assert main([*over, "--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(out / CHECKPOINT) in err and "Traceback" not in err


def test_ctrl_c_says_what_is_kept_and_the_command_that_resumes(tmp_path, capsys, monkeypatch):
    over = ["--methods", "fedit", "fraq", "--clients", "2", "--seeds", "42", "--variants", "homogeneous",
            "--set", "model.name=" + TINY_MODEL]
    cfg = load_config("quick", {"methods": ["fedit", "fraq"], "federated.clients": 2, "model.name": TINY_MODEL,
                                "seeds": [42], "variants": {"homogeneous": {}}})
    out = _resume_dir(tmp_path, cfg)

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("fraq.federated.task.Task", ctrl_c)
    assert main([*over, "--out", str(out), "--resume", "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "1 of 2 points finished" in err and str(out / CHECKPOINT) in err
    resume = err.split("resume with: ")[1].strip()
    assert resume.startswith("python -m fraq.federated ") and resume.endswith("--resume")
    assert resume.count("--resume") == 1 and f"--out {out}" in resume
    empty = tmp_path / "empty"
    assert main([*over, "--out", str(empty), "--no-progress"]) == 130
    assert "nothing of this run was written" in capsys.readouterr().err


def test_progress_into_a_file_is_plain_lines(tmp_path, capsys):
    cfg = tiny_config(**{"methods": ["fedit"], "federated.clients": 2})
    run_experiment(cfg, tmp_path / "run", progress=True)
    captured = capsys.readouterr()
    for text in (captured.err, captured.out):
        assert "\r" not in text and "\x1b[" not in text, repr(text[:500])
    assert "2/2 rounds" in captured.err


@pytest.mark.parametrize("progress", [False, True])
def test_transformers_bars_are_off_with_no_progress_or_outside_a_terminal(progress, tmp_path, monkeypatch):
    from transformers.utils import logging as hf_logging

    seen = []

    def load(*a, **k):
        seen.append(hf_logging.is_progress_bar_enabled())
        raise KeyboardInterrupt

    hf_logging.enable_progress_bar()
    monkeypatch.setattr("fraq.federated.task.Task", load)
    with pytest.raises(KeyboardInterrupt):  # stderr is captured here: not a terminal
        run_experiment(tiny_config(**{"methods": ["fedit"]}), tmp_path / "run", progress=progress)
    assert seen == [False] and hf_logging.is_progress_bar_enabled()


def test_flower_logs_are_plain_outside_a_terminal():
    import io
    import logging

    pytest.importorskip("flwr")
    from flwr.supercore.logger import ConsoleHandler

    from fraq.federated.flower.console import colour_at_a_terminal_only

    assert colour_at_a_terminal_only(io.StringIO()) is False
    handlers = [h for h in logging.getLogger("flwr").handlers if isinstance(h, ConsoleHandler)]
    assert handlers and not any(h.colored for h in handlers)
    record = logging.LogRecord("flwr", logging.INFO, __file__, 1, "a round", None, None)
    assert "\x1b[" not in handlers[0].format(record)


def test_overwrite_keeps_earlier_results_until_model_and_data_load(tmp_path, monkeypatch):
    cfg = tiny_config(**{"methods": ["fedit", "fraq"], "federated.clients": 2})
    out = _resume_dir(tmp_path, cfg)
    before = (out / RESULT).read_text()
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    with pytest.raises(AssertionError):
        run_experiment(cfg, out, overwrite=True, progress=False, log=lambda *a: None)
    assert (out / RESULT).read_text() == before and (out / CHECKPOINT).exists()


def test_result_files_are_replaced_whole(tmp_path, monkeypatch):
    """A failure while writing a result leaves the earlier file as it was, and no temporary file."""
    import fraq._results as fmt

    path = fmt.write_result(tmp_path, "federated", "k", {"a": 1}, {"rounds": []})
    before = path.read_text()

    def failing(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(fmt.json, "dumps", failing)
    with pytest.raises(OSError, match="disk full"):
        fmt.write_result(tmp_path, "federated", "k", {"a": 2}, {"rounds": []})
    assert path.read_text() == before
    assert [p.name for p in path.parent.iterdir()] == ["k.json"]


def test_checkpoint_is_replaced_whole(tmp_path, monkeypatch):
    import fraq.federated.checkpoint as checkpoint

    st = RoundState(1, {"q": torch.ones(2, 2)}, {"weight": torch.zeros(2, 2)}, [None], None, [{"round": 1}])
    save_checkpoint(tmp_path / "c.pt", st, {"method": "fedit"})
    real_save = torch.save

    def failing_save(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", failing_save)
    st2 = RoundState(2, {"q": torch.zeros(2, 2)}, st.head, [None], None, [{"round": 1}, {"round": 2}])
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "c.pt", st2, {"method": "fedit"})
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "c.pt", {"method": "fedit"}).round == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def test_client_plan_reads_the_aggregator_class_not_its_type():
    """A method's peculiarities are attributes: any aggregator declaring rank budgets gets LoRA-A^2's plan."""
    from fraq.aggregators import FLoRA

    class Budgeted(FLoRA):
        rank_budgets = True

    plan = ClientPlan.make(Budgeted(), [2, 4, 2], [4.0, 8.0, 4.0])
    assert plan.ranks == [4, 4, 4] and plan.upload_ranks == [2, 4, 2] and plan.skip is None
    plain = ClientPlan.make(FLoRA(), [2, 4, 2], [4.0, 8.0, 4.0])
    assert plain.ranks == [2, 4, 2] and plain.upload_ranks == [None] * 3


@pytest.mark.parametrize("key, value", [("model", 3), ("train", None), ("partition", "iid")])
def test_a_section_set_to_a_non_object_is_refused(key, value):
    with pytest.raises(ValueError, match=rf"config key '{key}'\(={value!r}\) is a section"):
        load_config("quick", {key: value})
    assert load_config("quick", {"partition": {"scheme": "iid"}}).partition.alpha == 0.1  # merged, not replaced


# ------------------------------------------------------------------ inputs and files we did not write
@pytest.mark.parametrize("name, text", [(RESULT, "{}"), (RESULT, "my notes"), (CHECKPOINT, "bytes")])
def test_a_file_we_did_not_write_is_never_replaced_unasked(name, text, tmp_path, monkeypatch):
    """A file under a name the run writes is replaced only with --overwrite or a yes."""
    cfg = tiny_config(**{"methods": ["fedit", "fraq"], "federated.clients": 2})
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_text(text)
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    with pytest.raises(FileExistsError, match=rf"holds files this run writes.*{re.escape(name)}.*--overwrite"):
        run_experiment(cfg, tmp_path, progress=False, log=lambda *a: None)
    asked = []
    with pytest.raises(FileExistsError):
        run_experiment(cfg, tmp_path, progress=False, log=lambda *a: None, ask=lambda q: asked.append(q) or False)
    assert name in asked[0] and (tmp_path / name).read_text() == text
    with pytest.raises(AssertionError, match="loaded"):  # with --overwrite it goes on to load the model
        run_experiment(cfg, tmp_path, overwrite=True, progress=False, log=lambda *a: None)


def test_an_input_is_never_written_even_with_overwrite(tmp_path, monkeypatch, capsys):
    """A ``--config`` file at a path the run writes, or in a directory it writes to, is refused."""
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    out = tmp_path / "run"
    setting = out / RESULT
    inside = out / "checkpoints" / "setting.json"
    for path in (setting, inside):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"methods": ["fedit"], "seeds": [42], "variants": {"homogeneous": {}},
                                    "federated": {"clients": 2}, "model": {"name": TINY_MODEL, "max_length": 48}}))
    before = setting.read_text()
    for path, says in ((setting, f"this run writes {str(setting)!r}, which is the --config input"),
                       (inside, f"the --config input {str(inside)!r} lies in {str(inside.parent)!r}")):
        for flags in ([], ["--overwrite"]):
            assert main(["--config", str(path), "--out", str(out), "--no-progress", *flags]) == 2
            err = capsys.readouterr().err
            assert says in err, err
            assert "Traceback" not in err and path.read_text() == before
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    for out in (data, data / "results"):
        cfg = tiny_config(**{"methods": ["fedit"], "federated.clients": 2, "dataset": {"path": str(data)}})
        with pytest.raises(ValueError, match=rf"--out\(='{re.escape(str(out))}'\) is inside the dataset.path "
                                             rf"directory '{re.escape(str(data))}'"):
            run_experiment(cfg, out, overwrite=True, progress=False, log=lambda *a: None)
    assert [p.name for p in data.iterdir()] == ["train"]


@pytest.mark.integration
def test_smoke_setting_to_report(tmp_path):
    """The smoke setting (both variants, two seeds, the compared methods) on the tiny model, then the
    analysis' report from its result files: the table with intervals; the report says it is a
    smoke run and gives no verdict (its accuracies mean nothing), its figure no band; the
    verdicts computed from the same files find one per claim."""
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    from analysis.reproduce import build

    cfg = load_config("smoke", {"model.name": TINY_MODEL, "model.layers_to_transform": [1], "model.max_length": 48,
                                "federated.rounds": 1})
    files = run_experiment(cfg, tmp_path, progress=False, log=lambda *a: None)
    assert len(files) == 2 * 2 * len(cfg.methods) and all(f.exists() for f in files)
    import matplotlib

    from analysis.sections import federated
    from analysis.resultset import load

    drawn = []
    figure = federated.figure
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(federated, "figure", lambda *a, **k: drawn.append(figure(*a, **k)) or drawn[-1])
        report = build(tmp_path).read_text()
    assert report.startswith("# FRAQ smoke run: no verdicts") and federated.SMOKE in report
    assert not re.search(r"\*\*(agrees|disagrees|inconclusive)\*\*", report), report
    assert "band" not in report and not any(isinstance(c, matplotlib.collections.PolyCollection)
                                            for ax in drawn[0].axes for c in ax.collections)
    runs = federated.runs(load(tmp_path / "results")["federated"])
    for v in ("homogeneous", "heterogeneous"):
        section = report.split(f"### {v} ranks")[1].split("###")[0]
        assert re.search(r"\| FRAQ \(τ=0\.95\) \| (\*\*|<u>)?\d+\.\d\d(\*\*|</u>)? \[-?\d+\.\d\d, \d+\.\d\d\] \|",
                         section), section
        lines = "\n".join(federated.verdict_lines(runs, v))
        verdicts = re.findall(r"ours \*\*(agrees|disagrees|inconclusive)\*\*", lines)
        assert len(verdicts) == (4 if v == "homogeneous" else 3), v  # FedEx-LoRA skipped with mixed ranks
    assert "skipped: fedex-lora needs one rank" in report and (tmp_path / "figures" / "federated_accuracy.png").exists()


@pytest.mark.parametrize("argv, variants", [
    (["--ranks", "8"], {"homogeneous": (8,)}),
    (["--set", "federated.ranks=[4,8]"], {"homogeneous": (4, 8)}),
    (["--ranks", "8", "--variants", "heterogeneous"], {"heterogeneous": (8,)}),
    (["--ranks", "4,16", "--clients", "2", "--variants", "homogeneous", "heterogeneous"],
     {"homogeneous": (4, 16), "heterogeneous": (4, 16)}),
])
def test_cli_ranks_apply_to_the_variants(argv, variants, tmp_path, capsys, monkeypatch):
    """The user's ranks are the ranks every point runs with; a variant that only set its own
    ranks is left out (it would run the homogeneous one again), one line saying so."""
    from fraq.federated import cli
    from fraq.federated.experiment import points

    seen = {}
    monkeypatch.setattr(cli, "run_experiment", lambda cfg, out, **k: seen.setdefault("points", points(cfg)))
    assert main([*argv, "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    got = {p.variant: tuple(p.config.federated.ranks) for p in seen["points"]}
    assert got == variants
    err = capsys.readouterr().err
    if "heterogeneous" in variants:
        assert "variants.heterogeneous: federated.ranks [4, 16, 32, 64] replaced by" in err, err
    else:
        assert err.count("\n") == 1 and "variants.heterogeneous: left out" in err and "--variants heterogeneous" in err
