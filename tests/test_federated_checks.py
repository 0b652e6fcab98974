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
