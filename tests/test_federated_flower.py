"""The Flower app: strategy units with mock replies (hand-derived results), the run config
(``apps/flower/pyproject.toml``) and its mapping onto the harness's configuration, and a
2-client simulation that must reproduce the in-process harness's round.

Needs flwr (the ``fl`` extra); the simulation also needs Flower's Ray backend
(``flwr[simulation]``) and is skipped without it. The ``slow`` tests run ``flwr run``
against a SuperLink on this machine (simulation and deployment runtimes) and check that
no process is left behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")
pytest.importorskip("peft")

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict  # noqa: E402

from fraq.aggregators import ClientUpdate, Factors, Layout  # noqa: E402
from fraq.federated.checkpoint import RoundState  # noqa: E402
from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.flower.run_config import DEFAULTS, from_run_config, parse_overrides  # noqa: E402
from fraq.federated.flower.strategy import LoraStrategy, decode_downlink, decode_layout, encode_update  # noqa: E402
from fraq.federated.model import TINY_MODEL  # noqa: E402
from fraq.federated.round_loop import MethodSetup, run_round  # noqa: E402
from fraq.federated.task import Task  # noqa: E402
from fraq.methods import MethodSpec  # noqa: E402

EPS64 = torch.finfo(torch.float64).eps
APP_DIR = Path(__file__).resolve().parents[1] / "apps" / "flower"
HAS_RAY = importlib.util.find_spec("ray") is not None


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


def layout_q(r: int) -> Layout:
    """The upload layout of one module "q" (4 x 3) at rank r: B^T (r, 4) then A (r, 3)."""
    return Layout.build(("q",), [(("q",), 4, 3, r)])


def reply(k: int, B: torch.Tensor, A: torch.Tensor, scale: float, n: int, head=None) -> Message:
    u = ClientUpdate({"q": (B, A)}, scale=scale, weight=float(n))
    return Message(content=encode_update(u, head, k, loss=1.0, layout=layout_q(B.shape[1])),
                   message_type=MessageType.TRAIN, dst_node_id=0)


def make_strategy(spec: str, W0: torch.Tensor, head_rounds: int = 0, rank: int | list[int] = 2):
    m = MethodSetup.make(spec, cfg2(**{"federated.ranks": rank if isinstance(rank, list) else [rank]}))
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


@pytest.mark.parametrize("spec", ["flora", "fraq:tau=1.0"])
def test_strategy_mixed_ranks_stack_and_send_each_client_its_own_rank(spec):
    """Clients of ranks 1 and 2 (alpha = 2 r, scale 2): FLoRA stacks to rank 3, FRAQ with
    tau = 1 keeps every direction; both merge W0 + sum_k a_k s_k B_k A_k."""
    W0 = torch.randn(4, 3, dtype=torch.float64)
    st = make_strategy(spec, W0, rank=[1, 2])
    (B0, A0), (B1, A1) = factors(6, r=1), factors(7, r=2)
    st.aggregate_train(1, [reply(0, B0, A0, 2.0, 10), reply(1, B1, A1, 2.0, 30)])
    want = W0 + 0.25 * 2.0 * B0 @ A0 + 0.75 * 2.0 * B1 @ A1
    torch.testing.assert_close(st.state.weights["q"], want, rtol=0, atol=100 * EPS64)
    assert st.records[0]["ranks"]["q"] <= 3
    msgs = list(st.configure_train(2, ArrayRecord(), ConfigRecord(), grid=None))
    assert [(m.content["config"]["rank"], m.content["config"]["alpha"]) for m in msgs] == [(1, 2.0), (2, 4.0)]
    for msg in msgs:
        merges, starts = decode_downlink(msg.content["arrays"].to_torch_state_dict(), msg.content["config"])
        got = W0 + sum(f.scale * f.B @ f.A for f in merges["q"])
        torch.testing.assert_close(got, want, rtol=0, atol=100 * EPS64)


def test_a_reply_carries_one_flat_adapter_in_the_layout_the_server_sends():
    """Each train message's config carries its client's layout; a reply packed in it is one
    flat array, B^T then A, that unpacks to the client's factors exactly."""
    st = make_strategy("flora", torch.zeros(4, 3, dtype=torch.float64), rank=[1, 2])
    msgs = list(st.configure_train(1, ArrayRecord(), ConfigRecord(), grid=None))
    for k, msg in enumerate(msgs):
        r = k + 1
        lay = decode_layout(msg.content["config"])
        assert lay == st.upload_layouts[k] == layout_q(r) and lay.numel == r * (4 + 3)
        B, A = factors(30 + k, r=r)
        content = encode_update(ClientUpdate({"q": (B, A)}, scale=2.0, weight=5.0), None, k, 1.0, lay)
        flat = content["arrays"].to_torch_state_dict()["adapter"]
        assert set(content["arrays"].to_torch_state_dict()) == {"adapter"} and flat.shape == (lay.numel,)
        assert torch.equal(flat[:4 * r], B.mT.reshape(-1)) and torch.equal(flat[4 * r:], A.reshape(-1))
        back = lay.unpack(flat).factors["q"]
        assert torch.equal(back[0], B) and torch.equal(back[1], A)


def test_a_reply_of_the_wrong_length_is_refused_naming_its_client():
    """Client 1 (rank 2) packs at rank 1: 7 entries where its layout has 14; nothing is aggregated."""
    W0 = torch.zeros(4, 3, dtype=torch.float64)
    st = make_strategy("fraq:tau=1.0", W0, rank=[1, 2])
    B0, A0 = factors(40, r=1)
    wrong = Message(content=encode_update(ClientUpdate({"q": (B0, A0)}, scale=2.0, weight=3.0), None, 1, 1.0,
                                          layout_q(1)), message_type=MessageType.TRAIN, dst_node_id=0)
    with pytest.raises(ValueError, match=r"round 1, node \d+, client 1: adapter has shape \(7,\), expected \(14,\)"):
        st.aggregate_train(1, [reply(0, B0, A0, 2.0, 10), wrong])
    assert st.records == [] and torch.equal(st.state.weights["q"], W0)
    with pytest.raises(ValueError, match=r"no 'upload-layout'"):
        decode_layout(ConfigRecord({"client": 0}))


# ---- the run config: apps/flower/pyproject.toml -> fraq.federated.config ----

def test_app_pyproject_validates_and_its_components_load():
    """flwr's own checks (``flwr run`` calls them): the App's pyproject, its components, its FAB."""
    import io
    import zipfile

    from flwr.cli.build import build_fab_from_disk
    from flwr.cli.config_utils import load_and_validate
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.supercore.object_ref import load_app

    path = list(sys.path)
    try:
        config, warnings = load_and_validate(APP_DIR / "pyproject.toml", check_module=True)
        app = config["tool"]["flwr"]["app"]
        assert warnings == [] and app["config"] == DEFAULTS
        assert isinstance(load_app(app["components"]["serverapp"], ValueError, APP_DIR), ServerApp)
        assert isinstance(load_app(app["components"]["clientapp"], ValueError, APP_DIR), ClientApp)
    finally:
        sys.path[:] = path
    fab = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(APP_DIR)))
    assert fab.namelist() == ["pyproject.toml", ".info/CONTENT"]  # the FAB bundles no code


def test_run_config_maps_kebab_keys_onto_the_harness():
    rc = {**DEFAULTS, "num-server-rounds": 3, "clients": 4, "local-steps": 7, "batch-size": 8, "lora-rank": 4,
          "seed": 0, "eval-every": 2, "threads": 1, "method": "flora",
          "overrides": "train.lr=1e-3 dataset.train_per_intent=20 federated.alphas=[4] model.pooling=first"}
    cfg, method, out = from_run_config(rc)
    assert method == MethodSpec("flora") and cfg.methods == (method,) and out == DEFAULTS["results-dir"]
    f, t = cfg.federated, cfg.train
    assert (f.rounds, f.clients, f.ranks, f.eval_every, f.alphas) == (3, 4, [4], 2, [4])
    assert (t.steps, t.batch_size, t.lr, cfg.seed, cfg.threads) == (7, 8, 1e-3, 0, 1)
    assert cfg.dataset == {"name": "intents", "train_per_intent": 20} and cfg.model.pooling == "first"
    quick = load_config("quick")
    keep, _, _ = from_run_config({**DEFAULTS, **{k: -1 for k in ("num-server-rounds", "clients", "local-steps")},
                                  "overrides": ""})
    assert (keep.federated.rounds, keep.federated.clients, keep.train.steps) == \
        (quick.federated.rounds, quick.federated.clients, quick.train.steps)


@pytest.mark.parametrize("over, match", [
    ({"clients": 0}, r"'clients' \(federated.clients\): federated.clients\(=0\)"),
    ({"clients": -2}, r"'clients'\(=-2\) must be an int"),
    ({"local-steps": 2.5}, r"'local-steps'\(=2.5\) must be an int"),
    ({"seed": True}, r"'seed'\(=True\) must be an int"),
    ({"method": "nope:tau=1"}, r"'method'\(='nope:tau=1'\): 'nope' is not one of"),
    ({"method": ""}, r"'method'\(=''\) must not be empty"),
    ({"setting": "no/such.json"}, r"'setting'\(='no/such.json'\)"),
    ({"overrides": "train.lr"}, r"'overrides'\(='train.lr'\): item 'train.lr' must be dotted.key=value"),
    ({"overrides": "train.nope=1"}, r"'overrides' \(train.nope\): unknown config key 'train.nope'"),
    ({"overrides": "train.lr=-1"}, r"'overrides' \(train.lr\): train.lr\(=-1\) must be a finite positive number"),
    ({"overrides": "train.steps=3"}, r"'overrides' sets 'train.steps', which run config 'local-steps'\(=5\)"),
    ({"results-dir": 3}, r"'results-dir'\(=3\) must be a string"),
    ({"method": "fraq:tau=2"}, r"'method'\(='fraq:tau=2'\): tau\(=2.0\) must be in \(0, 1\]"),
    ({"method": "fraq:tau=abc"}, r"'method'\(='fraq:tau=abc'\): tau\(='abc'\) must be a real number"),
    ({"method": "florist:rank=3"}, r"'method'\(='florist:rank=3'\): aggregator 'florist' does not take"),
    ({"method": "fedit", "overrides": "federated.ranks=[2,4]"}, r"'method'\(='fedit'\): fedit needs one rank"),
    ({"overrides": "train.lr=Infinity"}, r"train.lr\(=inf\) must be a finite positive number"),
    ({"overrides": "model.device=gpu7"}, r"model.device\(='gpu7'\)"),
])
def test_run_config_errors_name_the_key_and_value(over, match):
    with pytest.raises(ValueError, match=match):
        from_run_config({**DEFAULTS, **over})


def test_run_config_refuses_unknown_and_missing_keys():
    with pytest.raises(ValueError, match=r"unknown run config key\(s\) \['num_server_rounds'\]"):
        from_run_config({**DEFAULTS, "num_server_rounds": 3})
    with pytest.raises(ValueError, match=r"lacks \['overrides'\]"):
        from_run_config({k: v for k, v in DEFAULTS.items() if k != "overrides"})


def test_parse_overrides_json_values_else_strings():
    assert parse_overrides("a.b=1e-3 c.d=[4,8] e.f=null g.h=first i.j=true") == \
        {"a.b": 1e-3, "c.d": [4, 8], "e.f": None, "g.h": "first", "i.j": True}
    assert parse_overrides("  ") == {}
    with pytest.raises(ValueError, match="sets 'a.b' twice"):
        parse_overrides("a.b=1 a.b=2")


@pytest.mark.parametrize("node_config, match", [
    ({}, r"needs partition-id and num-partitions: start it with --node-config"),
    ({"partition-id": 0, "num-partitions": 3}, r"num-partitions\(=3\) differs from the run's clients\(=2\)"),
    ({"partition-id": 2, "num-partitions": 2}, r"partition-id\(=2\) must be in 0..1"),
])
def test_client_partition_checks_node_config(node_config, match):
    from flwr.app import Context

    from fraq.federated.flower.client_app import _partition

    ctx = Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match=match):
        _partition(ctx, 2)
    ok = Context(run_id=1, node_id=1, node_config={"partition-id": 1, "num-partitions": 2}, state=RecordDict(),
                 run_config={})
    assert _partition(ok, 2) == 1


needs_ray = pytest.mark.skipif(not HAS_RAY, reason='Flower simulation needs its Ray backend: '
                               'pip install "flwr[simulation]==1.41.*"')


@pytest.mark.integration
@needs_ray
@pytest.mark.parametrize("spec", ["fraq:tau=0.95"])
def test_simulation_equals_in_process_round(spec, tmp_path):
    from fraq.federated.flower.server_app import run_simulation
    from fraq.federated.results import summarize

    cfg = cfg2()
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    sink = run_simulation(cfg, spec, flwr_home=str(tmp_path / "flwr"), results_dir=str(tmp_path / "out"))
    task = Task(cfg, log=lambda *a: None)
    m = MethodSetup.make(spec, cfg)
    s1, rec, _ = run_round(task, m, m.initial_state(task), evaluate=True)
    fl = sink["strategy"].state
    for n, W in s1.weights.items():
        torch.testing.assert_close(fl.weights[n], W, rtol=1e-5, atol=1e-6)
    for k in ("weight", "bias"):
        torch.testing.assert_close(fl.head[k], s1.head[k], rtol=1e-5, atol=1e-6)
    assert sink["strategy"].records[0]["ranks"] == rec["ranks"]
    assert sink["accuracy"][1] == pytest.approx(rec["accuracy"], abs=1.0 / len(task.test_labels) + 1e-12)
    written = json.loads((tmp_path / "out" / m.label / "result.json").read_text())
    assert written["num_rounds"] == 1 and [r["round"] for r in written["rounds"]] == [1]
    assert written["rounds"][0]["accuracy"] == sink["accuracy"][1]
    assert written["rounds"][0]["downlink_pct_flora"] == pytest.approx(rec["downlink_pct_flora"])
    assert summarize(written)["rounds"] == 1


def _processes_under(root: Path) -> list:
    """Processes whose working directory or command line lies under ``root``."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        try:
            if p.pid != os.getpid() and (str(root) in (p.info["cwd"] or "") or
                                         any(str(root) in part for part in p.info["cmdline"] or [])):
                found.append(p)
        except psutil.Error:
            pass
    return found


@pytest.fixture
def no_processes_left(tmp_path):
    """Whatever the test does, nothing it started under tmp_path survives it (the test fails if something did)."""
    yield tmp_path
    left = _processes_under(tmp_path)
    for p in left:
        p.kill()
    assert not left, f"processes left running: {[' '.join(p.cmdline()) for p in left]}"


@pytest.mark.slow
@pytest.mark.parametrize("deployment", [pytest.param(False, id="simulation", marks=needs_ray),
                                        pytest.param(True, id="deployment")])
def test_flwr_run_with_local_superlink_equals_in_process_round(deployment, no_processes_left):
    """``flwr run apps/flower`` against a SuperLink on a free port (plus 2 SuperNodes in the
    deployment runtime): the ServerApp's result.json has the in-process round's numbers."""
    from fraq.federated.flower.local import run_local

    rc = {**DEFAULTS, "num-server-rounds": 1, "local-steps": 2, "batch-size": 8,
          "overrides": "dataset.train_per_intent=8 dataset.test_per_intent=2 partition.min_size=5"}
    run_config = ("num-server-rounds=1 local-steps=2 batch-size=8 "
                  'overrides="dataset.train_per_intent=8 dataset.test_per_intent=2 partition.min_size=5"')
    res = run_local(no_processes_left / "run", run_config=run_config, clients=2, deployment=deployment,
                    timeout=400, echo=lambda s: None)
    cfg, spec, _ = from_run_config(rc)
    task = Task(cfg, log=lambda *a: None)
    m = MethodSetup.make(spec, cfg)
    _, rec, _ = run_round(task, m, m.initial_state(task), evaluate=True)
    got = res["rounds"][0]
    assert res["runtime"] == "flower" and got["ranks"] == rec["ranks"]
    assert got["train_loss"] == pytest.approx(rec["train_loss"], rel=1e-5)
    assert got["downlink_pct_flora"] == pytest.approx(rec["downlink_pct_flora"])
    assert got["accuracy"] == pytest.approx(rec["accuracy"], abs=1.0 / len(task.test_labels) + 1e-12)


def test_strategy_and_harness_build_the_same_round_record():
    """The same uploads give the same per-round record in the Flower strategy and the in-process round."""
    cfg = cfg2(**{"methods": ["fraq:tau=0.9"]})
    task = Task(cfg, log=lambda *a: None)
    m = MethodSetup.make("fraq:tau=0.9", cfg)
    s0 = m.initial_state(task)
    _, rec, updates = run_round(task, m, s0, evaluate=False, keep_uploads=True)
    st = LoraStrategy(m, s0, task.backbone.targets, {101: 0, 202: 1}, head_rounds=0)
    replies = [Message(content=encode_update(u, None, k, loss=1.0, layout=st.upload_layouts[k]),
                       message_type=MessageType.TRAIN, dst_node_id=0) for k, u in enumerate(updates)]
    st.aggregate_train(1, replies)
    got = st.records[0]
    assert set(got) == set(rec)
    for key in ("round", "accuracy", "downlink_params", "downlink_params_mean", "downlink_pct_flora", "ranks",
                "rank_mean", "reinitialize", "info", "certificate"):
        assert got[key] == rec[key], key
    # FRAQ at tau=0.9 cuts: the round's worst module certificate is a resolved error, not rounding
    assert not rec["certificate"]["certificate_rounding_level"]
    assert 0 < rec["certificate"]["certificate_error"] <= rec["certificate"]["certificate_bound"] < 1


def test_a_flower_run_parses_its_method_once(method_parses):
    """The run config's method is parsed once, by RunConfig; the ServerApp, the ClientApp, the
    method set-up and a round of the strategy carry the spec and never read its text a second time."""
    from fraq.federated.flower.client_app import make_client_app
    from fraq.federated.flower.server_app import make_server_app

    rc = {**DEFAULTS, "num-server-rounds": 1, "clients": 2, "local-steps": 2, "batch-size": 8, "lora-rank": 2,
          "method": "fraq:tau=0.9", "overrides": "dataset.train_per_intent=8 dataset.test_per_intent=2 "
          f"model.name={TINY_MODEL} model.max_length=48 model.layers_to_transform=[1] partition.min_size=5"}
    cfg, method, _ = from_run_config(rc)
    assert method_parses == ["fraq:tau=0.9"] and cfg.methods == (method,)
    make_server_app(cfg, method), make_client_app(cfg, method)
    task = Task(cfg, log=lambda *a: None)
    m = MethodSetup.make(method, cfg)
    s0 = m.initial_state(task)
    _, _, updates = run_round(task, m, s0, evaluate=False, keep_uploads=True)
    st = LoraStrategy(m, s0, task.backbone.targets, {101: 0, 202: 1}, head_rounds=0)
    st.aggregate_train(1, [Message(content=encode_update(u, None, k, loss=1.0, layout=st.upload_layouts[k]),
                                   message_type=MessageType.TRAIN, dst_node_id=0) for k, u in enumerate(updates)])
    assert len(st.records) == 1 and method_parses == ["fraq:tau=0.9"]


def test_strategy_reads_what_clients_train_from_the_aggregator_class():
    """An aggregator declaring alternating_freeze gets B / A rounds from the strategy (no isinstance check)."""
    import dataclasses

    from fraq.aggregators import FLoRA

    class Alternating(FLoRA):
        alternating_freeze = True

    st = make_strategy("flora", torch.zeros(4, 3, dtype=torch.float64))
    st.method = dataclasses.replace(st.method, agg=Alternating())
    trains = [list(st.configure_train(t, ArrayRecord(), ConfigRecord(), grid=None))[0].content["config"]["train"]
              for t in (1, 2)]
    assert trains == ["B", "A"]


def test_flower_modules_import_no_private_names():
    """strategy.py, server_app.py, ... use only public names of the modules they import."""
    import ast

    for path in sorted((Path(__file__).resolve().parents[1] / "fraq" / "federated" / "flower").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fraq"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def _no_process(*args, **kwargs):
    raise AssertionError("a process was started before the run config was checked")


@pytest.mark.parametrize("run_config, clients, match", [
    ("method='fraq:tau=2'", 2, r"'method'\(='fraq:tau=2'\): tau\(=2.0\)"),
    ("num-server-rounds=0", 2, r"'num-server-rounds' \(federated.rounds\)"),
    ("nope=1", 2, r"unknown run config key\(s\) \['nope'\]"),
    ("method=fraq:tau=2", 2, r"--run-config\(='method=fraq:tau=2'\): The provided configuration string"),
    ("", 3, r"clients\(=3\) SuperNodes must equal the run config's clients \(=2\)"),
])
def test_local_launcher_checks_the_run_config_before_starting_anything(run_config, clients, match, tmp_path,
                                                                        monkeypatch):
    import subprocess

    from fraq.federated.flower.local import run_local

    monkeypatch.setattr(subprocess, "Popen", _no_process)
    with pytest.raises(ValueError, match=match):
        run_local(tmp_path / "out", run_config=run_config, clients=clients, echo=lambda s: None)
    assert not (tmp_path / "out").exists()


def test_local_launcher_cli_prints_the_error(tmp_path, monkeypatch, capsys):
    import subprocess

    from fraq.federated.flower.local import main as local_main

    monkeypatch.setattr(subprocess, "Popen", _no_process)
    assert local_main(["--run-config", "method='fraq:tau=2'", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "tau(=2.0) must be in (0, 1]" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fault", ["superlink fails", "no new result"])
def test_local_launcher_keeps_an_earlier_result_until_a_new_one_replaces_it(fault, tmp_path, monkeypatch):
    """The launcher deleted ``<label>/result.json`` before starting: a failed run lost the earlier result."""
    import subprocess

    import fraq.federated.flower.local as local

    out = tmp_path / "out"
    earlier = out / "fraq-tau0.95" / "result.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text('{"method": "fraq:tau=0.95", "rounds": []}')
    real_popen = subprocess.Popen

    def stand_in(cmd, **kwargs):  # the SuperLink sleeps; flwr run exits 0 without a ServerApp
        return real_popen(["sleep", "30"] if cmd[0] == "flower-superlink" else [sys.executable, "-c", "pass"],
                          **kwargs)

    monkeypatch.setattr(subprocess, "Popen", stand_in)
    if fault == "superlink fails":
        def unhealthy(port, proc, log_path, timeout):
            raise RuntimeError(f"flower-superlink exited; see {log_path}")
        monkeypatch.setattr(local, "_wait_healthy", unhealthy)
        match = "flower-superlink exited"
    else:
        monkeypatch.setattr(local, "_wait_healthy", lambda *a, **k: None)
        match = r"wrote no new .*result.json \(the earlier one is kept\)"
    with pytest.raises(RuntimeError, match=match):
        local.run_local(out, echo=lambda s: None)
    assert earlier.read_text() == '{"method": "fraq:tau=0.95", "rounds": []}'


# --- every reply checked: one line naming the round, the client and the module or tensor ----------

def _edited(k: int, *, arrays=None, metrics=None, head=None, drop=()) -> Message:
    """Client k's valid reply (head trained) with its tensors / metrics edited."""
    B, A = factors(10 + k)
    msg = reply(k, B, A, 2.0, 10 + k, head if head is not None else {"weight": torch.ones(2, 3),
                                                                       "bias": torch.ones(2)})
    tensors = msg.content["arrays"].to_torch_state_dict()
    met = dict(msg.content["metrics"])
    for key in drop:
        tensors.pop(key, None)
        met.pop(key, None)
    tensors.update(arrays or {})
    met.update(metrics or {})
    from flwr.app import MetricRecord

    content = RecordDict({"arrays": ArrayRecord(torch_state_dict=tensors), "metrics": MetricRecord(met)})
    return Message(content=content, message_type=MessageType.TRAIN, dst_node_id=0)


NAN = float("nan")
FAULTS = {
    "NaN head": (dict(arrays={"head.weight": torch.full((2, 3), NAN)}), r"client 1: head.weight holds NaN"),
    "head shape": (dict(arrays={"head.bias": torch.ones(3)}), r"client 1: head.bias has shape \(3,\), expected \(2,\)"),
    "head keys": (dict(arrays={"head.extra": torch.ones(2)}), r"client 1: head tensors \['bias', 'extra', 'weight'\]"),
    "client out of range": (dict(metrics={"client": 5}), r"round 1, node \d+: the reply names client 5, not one of 0..1"),
    "negative client": (dict(metrics={"client": -1}), r"names client -1, not one of 0..1"),
    "no adapter": (dict(drop=("adapter",)), r"client 1: the reply has no 'adapter' array"),
    "adapter length": (dict(arrays={"adapter": torch.ones(13, dtype=torch.float64)}),
                       r"client 1: adapter has shape \(13,\), expected \(14,\) \(client 1's layout\)"),
    "adapter dims": (dict(arrays={"adapter": torch.ones(2, 7, dtype=torch.float64)}),
                     r"client 1: adapter has shape \(2, 7\), expected \(14,\)"),
    "NaN in B": (dict(arrays={"adapter": torch.full((14,), NAN, dtype=torch.float64)}),
                 r"node \d+: client 1, module 'q', B contains a non-finite value nan"),
    "NaN in A": (dict(arrays={"adapter": torch.cat([torch.ones(8), torch.full((6,), NAN)]).double()}),
                 r"node \d+: client 1, module 'q', A contains a non-finite value nan"),
    "adapter dtype": (dict(arrays={"adapter": torch.ones(14, dtype=torch.float32)}),
                      r"node \d+: client 1's flat upload has dtype torch.float32, expected torch.float64"),
    "integer adapter": (dict(arrays={"adapter": torch.ones(14, dtype=torch.int64)}),
                        r"client 1: adapter has dtype torch.int64"),
    "stray tensor": (dict(arrays={"k.lora_A.weight": torch.ones(2, 3)}), r"client 1: the upload holds \['k.lora_A"),
    "no weight": (dict(drop=("num-examples",)), r"client 1: the reply has no metric 'num-examples'"),
    "NaN loss": (dict(metrics={"loss": NAN}), r"client 1: metric 'loss'\(=nan\) must be a finite number"),
    "zero scale": (dict(metrics={"scale": 0.0}), r"client 1: metric 'scale'\(=0.0\) must be a finite positive"),
    "no head": (dict(drop=("head.weight", "head.bias")), r"client 1: the head trains this round but the reply has"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_strategy_checks_every_reply_naming_client_and_module(fault):
    edit, match = FAULTS[fault]
    W0 = torch.zeros(4, 3, dtype=torch.float64)
    st = make_strategy("flora", W0, head_rounds=1)
    before = {k: v.clone() for k, v in st.state.head.items()}
    with pytest.raises(ValueError, match=match):
        st.aggregate_train(1, [_edited(0), _edited(1, **edit)])
    assert st.records == [] and all(torch.equal(st.state.head[k], v) for k, v in before.items())
    assert torch.equal(st.state.weights["q"], W0)


def test_strategy_refuses_a_reply_for_another_nodes_client():
    st = make_strategy("flora", torch.zeros(4, 3, dtype=torch.float64), head_rounds=1)
    st.node_clients = {0: 1, 202: 0}  # the mock replies come from node 0, which trains client 1
    with pytest.raises(ValueError, match=r"node 0: the reply names client 0, but that node trains client 1"):
        st.aggregate_train(1, [_edited(0), _edited(1)])


def test_strategy_valid_replies_still_average_heads_exactly():
    st = make_strategy("flora", torch.zeros(4, 3, dtype=torch.float64), head_rounds=1)
    h0 = {"weight": torch.full((2, 3), 1.0), "bias": torch.full((2,), 3.0)}
    h1 = {"weight": torch.full((2, 3), 5.0), "bias": torch.full((2,), 7.0)}
    st.aggregate_train(1, [_edited(0, head=h0), _edited(1, head=h1)])  # weights 10 and 11
    torch.testing.assert_close(st.state.head["weight"].double(), torch.full((2, 3), (10 * 1.0 + 11 * 5.0) / 21,
                                                                              dtype=torch.float64))


def test_strategy_caps_a_fixed_rank_as_fraq_aggregate_does():
    """fraq:rank=32 over two rank-2 clients of a 4 x 3 module keeps min(32, 4, 4, 3) = 3: exact."""
    W0 = torch.zeros(4, 3, dtype=torch.float64)
    st = make_strategy("fraq:rank=32", W0, rank=2)
    (B0, A0), (B1, A1) = factors(20), factors(21)
    st.aggregate_train(1, [reply(0, B0, A0, 2.0, 10), reply(1, B1, A1, 2.0, 30)])
    assert st.records[0]["ranks"]["q"] == 3
    want = 0.25 * 2.0 * B0 @ A0 + 0.75 * 2.0 * B1 @ A1
    torch.testing.assert_close(st.state.weights["q"], want, rtol=0, atol=100 * EPS64 * float(want.abs().max()))
