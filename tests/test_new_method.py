"""A method defined here, outside the package, runs everywhere once registered.

``StackedStart`` is a small stateful method with a client layer of its own: the exact
weighted stack (Eq. 7) is every client's warm start, its state counts rounds and keeps
the last A, and its clients train a plain ``nn.Module`` LoRA instead of peft's. Adding
it touches nothing in the package: the harness (``run_method``), the Flower strategy,
``fraq aggregate`` and the checkpoint round trip all ask the class, never its name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("safetensors")

from fraq.aggregators import (  # noqa: E402
    AGGREGATORS,
    WARM_START,
    Aggregator,
    AggregatorState,
    ClientLayer,
    Downlink,
    Factors,
    register_aggregator,
)
from fraq.federated.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.model import TINY_MODEL  # noqa: E402
from fraq.federated.round_loop import MethodSetup, run_method, run_round  # noqa: E402
from fraq.federated.state import eval_weights  # noqa: E402
from fraq.federated.task import Task  # noqa: E402

EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps
ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ the new method
@dataclass(frozen=True)
class StackState(AggregatorState):
    aggregator = "stacked-start"
    rounds: int
    last: Mapping[str, torch.Tensor]

    def to_record(self) -> dict:
        return {"rounds": self.rounds, "last": dict(self.last)}

    @classmethod
    def from_record(cls, record: dict) -> StackState:
        return cls(int(record["rounds"]), dict(record["last"]))


class PlainLoraLinear(nn.Module):
    """y = base(x) + s (x A^T) B^T, with B and A trainable: LoRA without peft."""

    def __init__(self, base: nn.Module, B: torch.Tensor, A: torch.Tensor, scale: float):
        super().__init__()
        self.base_layer = base
        self.B = nn.Parameter(B.to(base.weight.dtype).clone())
        self.A = nn.Parameter(A.to(base.weight.dtype).clone())
        self.scale = float(scale)

    def forward(self, x):
        return self.base_layer(x) + self.scale * ((x @ self.A.mT) @ self.B.mT)


class PlainLayer(ClientLayer):
    peft_lora = False
    built = 0  # modules swapped in, counted across instances

    def module(self, name, base, start, scale):
        type(self).built += 1
        return PlainLoraLinear(base, start.B * (start.scale / scale), start.A, scale)

    def upload(self, module):
        return module.B.detach().float().cpu().clone(), module.A.detach().float().cpu().clone()


class StackedStart(Aggregator):
    """Every client warm-starts from the exact weighted stack; nothing is merged."""

    name = "stacked-start"
    client_init = WARM_START
    checks_finite = False  # Group.stacked does
    state_type = StackState

    def client_layer(self, targets, seeds):
        return PlainLayer(targets, seeds)

    def _check_state(self, state, specs):
        return state

    def _group(self, group, state):
        Bst, Ast = group.stacked()
        r = sum(group.spec.ranks)
        return {spec.name: (Downlink(sent=(B, A), start=Factors(B, A, 1.0)), r)
                for spec, B, A in zip(group.specs, group.split(Bst), group.split(Ast))}

    def _finish(self, specs, downlinks, state):
        n = 1 if state is None else state.rounds + 1
        return StackState(n, {s.name: downlinks[0][s.name].start.A for s in specs}), {"rounds": n}


class ResidualOnly(StackedStart):
    name = "residual-only"
    state_type = None
    not_an_adapter = "its update is a residual for the base weights"
    no_delta = "it has no dense form either"

    def _finish(self, specs, downlinks, state):
        return None, {}


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    for cls in (StackedStart, ResidualOnly):
        monkeypatch.setitem(AGGREGATORS, cls.name, cls)  # removed again after each test
        register_aggregator(cls)


def test_a_taken_name_is_refused_naming_both_classes():
    class Impostor(StackedStart):
        name = "fraq"
        state_type = None

    before = dict(AGGREGATORS)
    with pytest.raises(ValueError, match=r"aggregator name 'fraq' is taken by fraq\.aggregators\.fraq\.Fraq; give "
                                         r".*Impostor another `name`"):
        register_aggregator(Impostor)
    assert AGGREGATORS == before  # nothing replaced
    assert register_aggregator(StackedStart) is StackedStart and AGGREGATORS == before  # the same class: no change


def tiny_config(**over) -> dict:
    base = {"dataset": {"name": "intents", "train_per_intent": 8, "test_per_intent": 2},
            "federated.clients": 2, "federated.rounds": 2, "federated.head_rounds": 1, "federated.eval_every": 1,
            "federated.ranks": [2], "train.steps": 2, "train.batch_size": 8, "train.lr": 0.01,
            "model.name": TINY_MODEL, "model.max_length": 48, "model.layers_to_transform": [1],
            "model.cache_prefix": True, "partition.min_size": 5, "threads": 1}
    base.update(over)
    return load_config("quick", base)


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(tiny_config(), log=lambda *a: None)


def _exact(updates) -> dict[str, torch.Tensor]:
    a = torch.tensor([u.weight for u in updates], dtype=torch.float64)
    a = a / a.sum()
    return {n: sum(a[k] * u.scale_of(n) * (u.factors[n][0].double() @ u.factors[n][1].double())
                   for k, u in enumerate(updates)) for n in updates[0].factors}


def _strip(records):
    return [{k: v for k, v in r.items() if k not in ("agg_ms", "train_seconds")} for r in records]


# ------------------------------------------------------------------------------ the harness
def test_harness_runs_the_new_method_with_its_own_layer(task, tmp_path):
    built = PlainLayer.built
    method = MethodSetup.make("stacked-start", task.config)
    s0 = method.initial_state(task)
    s1, rec, updates = run_round(task, method, s0, evaluate=False, keep_uploads=True)
    assert PlainLayer.built - built == 2 * len(task.backbone.targets)  # its layer, not peft's, trained
    assert isinstance(s1.agg_state, StackState) and s1.agg_state.rounds == 1 and rec["info"] == {"rounds": 1}
    layer = task.client_layer(method.agg)
    ev = eval_weights(s1, method.plan.ranks, layer)
    for n, want in _exact(updates).items():  # nothing merged; the start is the exact aggregate
        assert torch.equal(s1.weights[n], task.pretrained[n])
        got = ev[n].double() - task.pretrained[n].double()
        assert float((got - want).abs().max()) <= 100 * EPS32 * max(float(want.abs().max()), 1.0)
    out = run_method(task, "stacked-start", checkpoint=tmp_path / "c.pt", log=lambda *a: None)
    assert out["skipped"] is None and [r["round"] for r in out["rounds"]] == [1, 2]
    assert out["rounds"][1]["info"] == {"rounds": 2} and out["rounds"][1]["accuracy"] is not None
    assert out["method"] == "stacked-start" and (tmp_path / "c.pt").exists()  # the caller removes it


def test_checkpoint_round_trip_resumes_exactly(task, tmp_path):
    method = MethodSetup.make("stacked-start", task.config)
    s1, r1, _ = run_round(task, method, method.initial_state(task), evaluate=False)
    s1.records.append(r1)
    meta = {"method": "stacked-start"}
    save_checkpoint(tmp_path / "c.pt", s1, meta)
    back = load_checkpoint(tmp_path / "c.pt", meta)
    assert isinstance(back.agg_state, StackState) and back.agg_state.rounds == 1
    assert all(torch.equal(back.agg_state.last[n], s1.agg_state.last[n]) for n in s1.agg_state.last)
    s2, r2, _ = run_round(task, method, s1, evaluate=True)
    t2, q2, _ = run_round(task, method, back, evaluate=True)
    assert _strip([r2]) == _strip([q2]) and t2.agg_state.rounds == 2
    assert all(torch.equal(s2.starts[0][n].A, t2.starts[0][n].A) for n in task.backbone.targets)


# ------------------------------------------------------------------------------ the Flower strategy
def test_flower_strategy_runs_the_new_method(monkeypatch):
    pytest.importorskip("flwr")
    from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType
    from flwr.supercore.task_identity import TaskIdentity

    from fraq.aggregators import ClientUpdate
    from fraq.federated.flower.strategy import LoraStrategy, decode_downlink, encode_update
    from fraq.federated.state import RoundState

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)
    m = MethodSetup.make("stacked-start", tiny_config(**{"federated.ranks": [1, 2]}))
    W0 = torch.randn(4, 3, dtype=torch.float64)
    state = RoundState(0, {"q": W0.clone()}, {"weight": torch.zeros(2, 3), "bias": torch.zeros(2)}, [None, None])
    st = LoraStrategy(m, state, {"q": (4, 3)}, {101: 0, 202: 1}, layer=m.agg.client_layer({"q": (4, 3)}, lambda *parts: 0))
    g = torch.Generator().manual_seed(0)
    ups = [ClientUpdate({"q": (torch.randn(4, r, generator=g, dtype=torch.float64),
                               torch.randn(r, 3, generator=g, dtype=torch.float64))}, scale=2.0, weight=float(n))
           for r, n in ((1, 10), (2, 30))]
    for rnd in (1, 2):
        replies = [Message(content=encode_update(u, None, k, loss=1.0, layout=st.upload_layouts[k]), message_type=MessageType.TRAIN, dst_node_id=0)
                   for k, u in enumerate(ups)]
        st.aggregate_train(rnd, replies)
        assert st.state.agg_state.rounds == rnd and torch.equal(st.state.weights["q"], W0)
        f = st.state.starts[1]["q"]
        torch.testing.assert_close(f.scale * f.B @ f.A, _exact(ups)["q"], rtol=0, atol=100 * EPS64)
    msgs = list(st.configure_train(3, ArrayRecord(), ConfigRecord(), grid=None))
    merges, starts = decode_downlink(msgs[0].content["arrays"].to_torch_state_dict(), msgs[0].content["config"])
    assert merges == {} and torch.equal(starts["q"].A, st.state.starts[0]["q"].A)
    assert [r["info"] for r in st.records] == [{"rounds": 1}, {"rounds": 2}]


# ------------------------------------------------------------------------------ fraq aggregate
def test_fraq_aggregate_writes_and_refuses_by_the_class(tmp_path, capsys):
    from fraq.cli import main
    from fraq.peft import aggregate_adapters, example_clients, read_adapter

    dirs = [str(d) for d in example_clients(tmp_path / "ex", clients=2)]
    out = tmp_path / "merged"
    assert main(["aggregate", *dirs, "--method", "stacked-start", "--weights", "1", "3", "-o", str(out)]) == 0
    clients = [read_adapter(d) for d in dirs]
    merged = read_adapter(out)
    for n in clients[0].factors:
        want = sum(a * c.scales[n] * (c.factors[n][0].double() @ c.factors[n][1].double())
                   for a, c in zip((0.25, 0.75), clients))
        B, A = merged.factors[n]
        got = merged.scales[n] * (B.double() @ A.double())
        assert float((got - want).abs().max()) <= 100 * EPS32 * float(want.abs().max())
    assert main(["aggregate", *dirs, "--method", "residual-only", "-o", str(tmp_path / "r")]) == 2
    assert "its update is a residual for the base weights" in capsys.readouterr().err
    with pytest.raises(ValueError, match="it has no dense form either"):
        aggregate_adapters(dirs, tmp_path / "d.safetensors", method="residual-only", delta=True)


# ------------------------------------------------------------------------------ no method named
NAMES = re.compile(r"florg|Florg|lora.?a2|LoraA2|method ==|method\.name ==|isinstance\([^)]*State")


@pytest.mark.parametrize("package", ["fraq/federated", "fraq/peft"])
def test_harness_and_front_door_name_no_method(package):
    """The harness, the Flower app and the peft front door ask the class, never the name."""
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
            for p in sorted((ROOT / package).rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
            if NAMES.search(line.split("#", 1)[0])]
    assert hits == []
