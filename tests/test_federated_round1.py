"""Round 1 trained once per group of methods whose clients train it identically
(:mod:`fraq.federated.round1`): a run with the reuse is the run without it, bit for bit,
so no accuracy, table or verdict can change; methods whose round 1 differs train their own.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.model import TINY_MODEL  # noqa: E402
from fraq.federated.round_loop import run_method  # noqa: E402
from fraq.federated.task import Task  # noqa: E402

METHODS = ["flora", "fedex-lora", "fedit", "lora-a2", "flexlora", "florg", "florist", "fraq:tau=0.80",
           "fraq:tau=0.95"]


def tiny_config(**over) -> dict:
    """The 2-layer random BERT (no download) on a small generated corpus, 3 clients."""
    base = {"dataset": {"name": "intents", "train_per_intent": 10, "test_per_intent": 3},
            "federated.clients": 3, "federated.rounds": 2, "federated.head_rounds": 1, "federated.eval_every": 1,
            "train.steps": 3, "train.batch_size": 8, "train.lr": 0.01, "train.head_lr": 0.01,
            "model.name": TINY_MODEL, "model.max_length": 48, "model.layers_to_transform": [1],
            "model.cache_prefix": True, "partition.min_size": 5, "seeds": None, "variants": {"homogeneous": {}}}
    return load_config("quick", {**base, **over})


def _run(share: bool, methods):
    task = Task(tiny_config(**{"federated.rounds": 2}), log=lambda *a: None)
    task.share_round1 = share
    out = {m: run_method(task, m, log=lambda *a: None) for m in methods}
    return task, out


def _same_numbers(alone, shared, methods):
    for m in methods:
        a, b = alone[m]["rounds"], shared[m]["rounds"]
        assert len(a) == len(b) == 2
        for ra, rb in zip(a, b):
            for key in ("accuracy", "train_loss", "downlink_params", "ranks", "rank_mean"):
                assert ra[key] == rb[key], (m, ra["round"], key)


def test_the_reuse_changes_no_number():
    """Three methods (two that share round 1, one that trains B alone): the numbers are those
    of a run that trains round 1 for each, and round 1 trained twice."""
    methods = ["flora", "florist", "lora-a2"]
    (task_alone, alone), (task, shared) = _run(False, methods), _run(True, methods)
    _same_numbers(alone, shared, methods)
    assert task_alone.round1 == {} and len(task.round1) == 2
    assert [shared[m]["rounds"][0]["train_shared"] for m in methods] == [False, True, False]


@pytest.mark.slow
def test_every_table1_method_round1_trained_three_times_same_numbers():
    (_, alone), (task, shared) = _run(False, METHODS), _run(True, METHODS)
    _same_numbers(alone, shared, METHODS)
    # FLoRA, FedEx-LoRA, FedIT, FlexLoRA, FLoRIST and FRAQ's two taus start alike; LoRA-A² trains B
    # alone in round 1 and FLoRG its own layer: three trainings for nine methods
    assert len(task.round1) == 3
    reused = [m for m in METHODS if shared[m]["rounds"][0]["train_shared"]]
    assert reused == ["fedex-lora", "fedit", "flexlora", "florist", "fraq:tau=0.80", "fraq:tau=0.95"]
    assert not any(shared[m]["rounds"][1]["train_shared"] for m in METHODS)  # round 2 differs per method


def test_another_start_is_another_signature():
    """A changed input (here the head a round starts from) is not reused: the digest sees it."""
    from fraq.federated.round1 import signature
    from fraq.federated.round_loop import MethodSetup

    task = Task(tiny_config(), log=lambda *a: None)
    method = MethodSetup.make("flora", task.config)
    state = method.initial_state(task)
    key = signature(task, method, state, "AB", True)
    assert key == signature(task, method, state, "AB", True)
    head = {k: v.clone() for k, v in state.head.items()}
    head["bias"][0] += torch.finfo(head["bias"].dtype).eps
    other = type(state)(state.round, state.weights, head, state.starts)
    assert signature(task, method, other, "AB", True) != key
    assert signature(task, method, state, "B", True) != key


def test_evaluating_fewer_rounds_changes_no_final_accuracy():
    """The embedded default evaluates every other round: the last round's accuracy, which the
    table and the verdicts read, is the one an every-round evaluation gives."""
    every = run_method(Task(tiny_config(**{"federated.rounds": 2}), log=lambda *a: None), "fraq:tau=0.95",
                       log=lambda *a: None)
    other = run_method(Task(tiny_config(**{"federated.rounds": 2, "federated.eval_every": 2}), log=lambda *a: None),
                       "fraq:tau=0.95", log=lambda *a: None)
    assert every["rounds"][0]["accuracy"] is not None and other["rounds"][0]["accuracy"] is None
    assert other["rounds"][1]["accuracy"] == every["rounds"][1]["accuracy"]
