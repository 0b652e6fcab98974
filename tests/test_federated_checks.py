"""The harness and the Flower App refuse, before any model or data is loaded, what would fail in a round."""

from __future__ import annotations

import pytest

pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:fan_in_fan_out:UserWarning")

from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.model import Backbone  # noqa: E402


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_clients_without_examples_are_refused_before_any_work(value):
    """min_size 0 lets a Dirichlet draw leave clients empty (13 of 40 at alpha 0.1), which then
    crash in their first batch: refused when the configuration is read."""
    with pytest.raises(ValueError, match=rf"partition.min_size\(={value!r}\) must be an int >= 1: every client"):
        load_config("quick", {"partition.min_size": value})


def test_flower_run_config_refuses_empty_clients_too():
    pytest.importorskip("flwr")
    from fraq.federated.flower.run_config import DEFAULTS, from_run_config

    with pytest.raises(ValueError, match=r"'overrides' \(partition.min_size\).*must be an int >= 1"):
        from_run_config({**DEFAULTS, "overrides": "partition.min_size=0"})


def test_backbone_refuses_modules_not_stored_out_in():
    """GPT-2's Conv1D stores its weight (in, out); the rounds add B @ A as (out, in): refused, named."""
    cfg = transformers.GPT2Config(n_embd=24, n_layer=2, n_head=2, vocab_size=40, n_positions=16)
    model = transformers.GPT2Model(cfg)
    with pytest.raises(ValueError, match=r"match 'h.0.attn.c_attn', a Conv1D: the harness's clients train LoRA on "
                                         r"nn.Linear weights, stored \(out, in\), only \(2 such module"):
        Backbone("gpt2-tiny", target_modules=["c_attn"], model=model, tokenizer=object())


# --- a fixed rank is a cap, module by module, for every caller --------------------------------

def test_fixed_rank_is_capped_per_module_and_exact():
    """fraq:rank=32 over two rank-4 clients: each module keeps min(32, 8, m, n) components,
    which is its whole aggregate (checked against a dense float64 sum), instead of failing."""
    import torch

    from fraq.aggregators import ClientUpdate, get_aggregator
    from fraq.aggregators.capping import capped_aggregate

    g = torch.Generator().manual_seed(0)
    shapes = {"q": (16, 12), "head": (3, 12)}
    ups = [ClientUpdate({m: (torch.randn(a, 4, generator=g, dtype=torch.float64),
                             torch.randn(4, b, generator=g, dtype=torch.float64)) for m, (a, b) in shapes.items()},
                        scale=s, weight=w) for s, w in ((2.0, 1.0), (0.5, 3.0))]
    agg = get_aggregator("fraq", rank=32)
    with pytest.raises(ValueError, match=r"rank\(=32\)"):
        agg.aggregate(ups)  # the aggregator alone: the cap is the callers' one rule
    res = capped_aggregate(agg, ups)
    assert res.ranks == {"q": 8, "head": 3}
    for m in shapes:
        want = sum(a * u.scale * (u.factors[m][0] @ u.factors[m][1]) for a, u in zip((0.25, 0.75), ups))
        got = sum(f.scale * (f.B @ f.A) for f in res.downlinks[0][m].merge)
        assert float((got - want).abs().max()) <= 100 * torch.finfo(torch.float64).eps * float(want.abs().max())
    assert capped_aggregate(get_aggregator("fraq", rank=2), ups).ranks == {"q": 2, "head": 2}  # below: no cap


def test_harness_round_caps_a_fixed_rank_like_fraq_aggregate():
    """The in-process harness: fraq:rank=32 with two rank-4 clients trains and keeps rank 8 per module."""
    from fraq.federated.model import TINY_MODEL
    from fraq.federated.round_loop import MethodSetup, run_round
    from fraq.federated.task import Task

    cfg = load_config("quick", {"dataset": {"name": "intents", "train_per_intent": 6, "test_per_intent": 2},
                                "federated.clients": 2, "federated.ranks": [4], "federated.rounds": 1,
                                "train.steps": 1, "train.batch_size": 8, "model.name": TINY_MODEL,
                                "model.max_length": 32, "model.layers_to_transform": [1], "partition.min_size": 3,
                                "methods": ["fraq:rank=32"]})
    task = Task(cfg, log=lambda *a: None)
    method = MethodSetup.make("fraq:rank=32", cfg)
    _, rec, _ = run_round(task, method, method.initial_state(task), evaluate=False)
    assert rec["ranks"] == {m: min(8, *shape) for m, shape in task.backbone.targets.items()}
