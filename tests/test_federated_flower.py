"""The Flower app: strategy units with mock replies (hand-derived results), and a 2-client
simulation that must reproduce the in-process harness's round.

Needs flwr (the ``fl`` extra); the simulation also needs Flower's Ray backend
(``flwr[simulation]``) and is skipped without it.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

pytest.importorskip("flwr")
pytest.importorskip("peft")

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict  # noqa: E402

from fraq.aggregators import ClientUpdate, Factors  # noqa: E402
from fraq.federated.checkpoint import RoundState  # noqa: E402
from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.flower.strategy import LoraStrategy, decode_downlink, encode_update  # noqa: E402
from fraq.federated.model import TINY_MODEL  # noqa: E402
from fraq.federated.server import Method, Task, run_round  # noqa: E402

EPS64 = torch.finfo(torch.float64).eps


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    """Messages are created inside a run in flwr 1.41; the runtime sets this identity."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


def cfg2(**over) -> dict:
    base = {"dataset": {"name": "intents", "train_per_intent": 8, "test_per_intent": 2},
            "federated.clients": 2, "federated.rounds": 1, "federated.head_rounds": 1, "federated.eval_every": 1,
            "train.steps": 2, "train.batch_size": 8, "model.name": TINY_MODEL, "model.max_length": 48,
            "model.layers_to_transform": [1], "model.cache_prefix": True, "partition.min_size": 5, "threads": 1}
    base.update(over)
    return load_config("quick", base)


def reply(k: int, B: torch.Tensor, A: torch.Tensor, scale: float, n: int, head=None) -> Message:
    u = ClientUpdate({"q": (B, A)}, scale=scale, weight=float(n))
    return Message(content=encode_update(u, head, k, loss=1.0), message_type=MessageType.TRAIN, dst_node_id=0)


def make_strategy(spec: str, W0: torch.Tensor, head_rounds: int = 0, rank: int = 2):
    m = Method.make(spec, cfg2(**{"federated.ranks": [rank]}))
    state = RoundState(0, {"q": W0.clone()}, {"weight": torch.zeros(2, 3), "bias": torch.zeros(2)}, [None, None])
    return LoraStrategy(m, state, {"q": (4, 3)}, {101: 0, 202: 1}, head_rounds=head_rounds)


def factors(seed: int, r: int = 2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, r, generator=g, dtype=torch.float64), torch.randn(r, 3, generator=g, dtype=torch.float64)


def test_strategy_flora_merges_exact_average_and_sends_it():
    W0 = torch.randn(4, 3, dtype=torch.float64)
    st = make_strategy("flora", W0)
    (B0, A0), (B1, A1) = factors(0), factors(1)
    arrays, metrics = st.aggregate_train(1, [reply(1, B1, A1, 2.0, 30), reply(0, B0, A0, 2.0, 10)])
    want = W0 + 0.25 * 2.0 * B0 @ A0 + 0.75 * 2.0 * B1 @ A1  # a = 10/40, 30/40
    torch.testing.assert_close(st.state.weights["q"], want, rtol=0, atol=50 * EPS64)
    assert st.state.starts == [None, None] and metrics["downlink-pct-flora"] == pytest.approx(100.0)
    msgs = list(st.configure_train(2, arrays, ConfigRecord(), grid=None))
    assert [m.metadata.dst_node_id for m in msgs] == [101, 202]
    tensors = msgs[1].content["arrays"].to_torch_state_dict()
    merges, starts = decode_downlink(tensors, msgs[1].content["config"])
    assert starts == {} and len(merges["q"]) == 1
    f = merges["q"][0]
    torch.testing.assert_close(W0 + f.scale * f.B @ f.A, want, rtol=0, atol=50 * EPS64)
    assert msgs[1].content["config"]["client"] == 1


def test_strategy_fedit_averages_factors_and_head():
    W0 = torch.randn(4, 3, dtype=torch.float64)
    st = make_strategy("fedit", W0, head_rounds=1)
    (B0, A0), (B1, A1) = factors(2), factors(3)
    h0 = {"weight": torch.ones(2, 3), "bias": torch.zeros(2)}
    h1 = {"weight": 3 * torch.ones(2, 3), "bias": torch.ones(2)}
    st.aggregate_train(1, [reply(0, B0, A0, 2.0, 20, h0), reply(1, B1, A1, 2.0, 20, h1)])
    assert torch.equal(st.state.weights["q"], W0)  # FedIT merges nothing
    start = st.state.starts[1]["q"]
    torch.testing.assert_close(start.B, 0.5 * (B0 + B1), rtol=0, atol=10 * EPS64)
    torch.testing.assert_close(start.A, 0.5 * (A0 + A1), rtol=0, atol=10 * EPS64)
    assert start.scale == 2.0
    torch.testing.assert_close(st.state.head["weight"], 2 * torch.ones(2, 3))
    msgs = list(st.configure_train(2, ArrayRecord(), ConfigRecord(), grid=None))
    merges, starts = decode_downlink(msgs[0].content["arrays"].to_torch_state_dict(), msgs[0].content["config"])
    assert merges == {} and torch.equal(starts["q"].B, start.B)


def test_strategy_fraq_sends_rank_p_adapter():
    W0 = torch.zeros(4, 3, dtype=torch.float64)
    st = make_strategy("fraq:tau=1.0", W0, rank=1)
    (B0, A0) = factors(4, r=1)
    # two clients with the same rank-1 update: the exact average has rank 1
    st.aggregate_train(1, [reply(0, B0, A0, 2.0, 5), reply(1, B0, A0, 2.0, 15)])
    torch.testing.assert_close(st.state.weights["q"], 2.0 * B0 @ A0, rtol=0, atol=100 * EPS64)
    assert st.records[0]["ranks"]["q"] == 1
    assert st.records[0]["downlink_pct_flora"] == pytest.approx(50.0)  # rank 1 of the rank-2 stack


def test_strategy_refuses_missing_or_duplicate_clients():
    st = make_strategy("flora", torch.zeros(4, 3, dtype=torch.float64))
    B, A = factors(5)
    with pytest.raises(RuntimeError, match="1 of 2 clients"):
        st.aggregate_train(1, [reply(0, B, A, 2.0, 5)])
    with pytest.raises(RuntimeError, match="two replies"):
        st.aggregate_train(1, [reply(0, B, A, 2.0, 5), reply(0, B, A, 2.0, 5)])
    with pytest.raises(ValueError, match="node_clients"):
        LoraStrategy(st.method, st.state, {"q": (4, 3)}, {1: 0, 2: 0})


def test_decode_roundtrip_with_florg_merge():
    A = torch.randn(2, 3)
    from fraq.federated.flower.strategy import _encode_factors

    arrays, cfg = {}, {}
    _encode_factors("merge.0.enc.q", Factors(None, A, -2.0), arrays, cfg)
    _encode_factors("merge.1.enc.q", Factors(torch.ones(4, 2), A, 1.0), arrays, cfg)
    _encode_factors("start.enc.q", Factors(torch.ones(4, 2), A, 0.5), arrays, cfg)
    merges, starts = decode_downlink(arrays, cfg)
    assert [f.scale for f in merges["enc.q"]] == [-2.0, 1.0] and merges["enc.q"][0].B is None
    assert starts["enc.q"].scale == 0.5


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason='Flower simulation needs its Ray backend: pip install "flwr[simulation]==1.41.*"')
@pytest.mark.parametrize("spec", ["fraq:tau=0.95"])
def test_simulation_equals_in_process_round(spec, tmp_path):
    from fraq.federated.flower.server_app import run_simulation

    cfg = cfg2()
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    sink = run_simulation(cfg, spec, flwr_home=str(tmp_path / "flwr"))
    task = Task(cfg, log=lambda *a: None)
    m = Method.make(spec, cfg)
    s1, rec, _ = run_round(task, m, m.initial_state(task), evaluate=True)
    fl = sink["strategy"].state
    for n, W in s1.weights.items():
        torch.testing.assert_close(fl.weights[n], W, rtol=1e-5, atol=1e-6)
    for k in ("weight", "bias"):
        torch.testing.assert_close(fl.head[k], s1.head[k], rtol=1e-5, atol=1e-6)
    assert sink["strategy"].records[0]["ranks"] == rec["ranks"]
    assert sink["accuracy"][1] == pytest.approx(rec["accuracy"], abs=1.0 / len(task.test_labels) + 1e-12)
