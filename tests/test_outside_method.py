"""A method defined outside the package, named by ``FRAQ_METHODS`` or an entry point, appears
at every front door with no change to fraq, the benchmarks or the analysis.

``outside_core`` (written into a temporary directory by :func:`outside`) stacks the clients
exactly (Eq. 7), takes a QR of each stack and an SVD of the r x r core, and keeps the rank
the energy rule gives: at ``tau=1`` its merge is the exact weighted aggregate, which each
front door is checked against. It states its display name, FLOP model and downlink rule on
its class, and has the per-module entry the sweeps time (``aggregate_batch``). The
harness's tiny task and helpers are :mod:`test_new_method`'s, which covers a method
registered in process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fraq.aggregators import AGGREGATORS, ENV, ClientUpdate, get_aggregator, registry
from fraq.methods import PACKAGE_METHODS

ROOT = Path(__file__).resolve().parents[1]
EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps
NAME, DISPLAY, MODULE = "outside-core", "Outside core", "outside_core"

SOURCE = '''
"""A federated LoRA aggregator outside fraq: exact stack, QR of each stack, SVD of the core."""
import numbers

import torch

import fraq
from fraq.aggregators import REINITIALIZE, Aggregator, Downlink, Factors, register_aggregator

IMPORTS = []
IMPORTS.append(1)  # how many times this module ran


def _core(B, A, tau, rank):
    """B (*, m, R) A (*, R, n) -> rank-p factors of B A: p from the energy rule at tau, or rank."""
    QB, RB = torch.linalg.qr(B.double())
    QA, RA = torch.linalg.qr(A.double().mT)
    U, S, Vh = torch.linalg.svd(RB @ RA.mT)
    if rank is None:
        energy = torch.cumsum(S**2, -1) / (S**2).sum(-1, keepdim=True).clamp_min(torch.finfo(S.dtype).tiny)
        p = int((energy < tau * (1 - 1e-12)).sum(-1).max()) + 1
    else:
        p = rank
    p = min(p, S.shape[-1])
    Bg = (QB @ U[..., :p]) * S[..., None, :p]
    return Bg.to(B.dtype), (Vh[..., :p, :] @ QA.mT).to(B.dtype), p


class OutsideCore(Aggregator):
    """Exact stacking, a QR of each stack and the SVD of the core; clients merge it."""

    name = "outside-core"
    display_name = "Outside core"
    client_init = REINITIALIZE
    downlink_rule = "(m + n) p"
    energy_rule = True
    flop_model = staticmethod(lambda d, D, r, p, *, model: float(4 * (d + D) * min(d, r) ** 2 + 14 * min(d, r) ** 3))

    def __init__(self, *, tau=0.95, rank=None):
        if not isinstance(tau, numbers.Real) or not 0 < tau <= 1:
            raise ValueError(f"tau(={tau!r}) must be in (0, 1]")
        self.tau, self.rank = float(tau), rank

    def _group(self, group, state):
        Bst, Ast = group.stacked()
        Bg, Ag, p = _core(Bst, Ast, self.tau, self.rank)
        return {spec.name: (Downlink(sent=(B, A), merge=(Factors(B, A, 1.0),)), p)
                for spec, B, A in zip(group.specs, group.split(Bg), group.split(Ag))}

    def aggregate_batch(self, Bs, As, *, rank=None, tau=None, weights=None, scales=None):
        B, A = fraq.stack(Bs, As, weights, scales)
        if tau is None and rank is None:
            tau, rank = self.tau, self.rank
        return _core(B, A, tau, rank)


register_aggregator(OutsideCore)
'''


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """The method's module in a temporary directory on sys.path and on PYTHONPATH (for the
    processes a test starts), named by FRAQ_METHODS; the registry starts unloaded and is
    put back as it was afterwards."""
    where = tmp_path / "outside"
    where.mkdir()
    (where / f"{MODULE}.py").write_text(SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(where))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(where), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(ENV, MODULE)
    before = dict(dict.items(AGGREGATORS))  # as it is, loading nothing
    monkeypatch.setattr(registry, "_loaded", False)
    yield where
    dict.clear(AGGREGATORS)
    dict.update(AGGREGATORS, before)
    sys.modules.pop(MODULE, None)


# ------------------------------------------------------------------------------ the registry
def test_fraq_methods_registers_the_module_once_on_the_first_read(outside):
    assert MODULE not in sys.modules and NAME not in dict.keys(AGGREGATORS)  # nothing imported yet
    assert NAME in AGGREGATORS  # the first read loads it
    module = sys.modules[MODULE]
    cls = AGGREGATORS[NAME]
    assert cls.describe() == {"name": NAME, "display_name": DISPLAY, "paper_order": None,
                              "downlink_rule": "(m + n) p", "flop_model": True}
    list(AGGREGATORS), AGGREGATORS.get("fraq"), len(AGGREGATORS)  # later reads load nothing
    assert module.IMPORTS == [1] and sys.modules[MODULE] is module
    assert type(get_aggregator(NAME, tau=0.5)).__name__ == "OutsideCore"


def test_entry_point_registers_the_class(outside, monkeypatch, tmp_path):
    monkeypatch.delenv(ENV)
    dist = outside / "outside_core-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-core\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[fraq.aggregators]\n{NAME} = {MODULE}:OutsideCore\n")
    assert AGGREGATORS[NAME].__module__ == MODULE


@pytest.mark.parametrize("modules, source, match", [
    ("outside_core,no_such_module_here", None, r"FRAQ_METHODS='outside_core,no_such_module_here': module "
                                               r"'no_such_module_here' failed to import: ModuleNotFoundError"),
    ("broken_method", "raise RuntimeError('no GPU here')", r"module 'broken_method' failed to import: "
                                                           r"RuntimeError: no GPU here"),
])
def test_a_module_that_fails_is_named_with_its_error_at_every_read(outside, monkeypatch, modules, source, match):
    if source is not None:
        (outside / "broken_method.py").write_text(source)
    monkeypatch.setenv(ENV, modules)
    for _ in range(2):  # not marked loaded: each read repeats the load and names the error
        with pytest.raises(ImportError, match=match):
            get_aggregator("fraq")
    sys.modules.pop("broken_method", None)


# ------------------------------------------------------------------------------ fraq aggregate
@pytest.mark.integration
def test_fraq_aggregate_in_process_and_in_a_fresh_process(outside, tmp_path):
    from fraq.cli import main
    from fraq.peft import example_clients, read_adapter

    dirs = [str(d) for d in example_clients(tmp_path / "ex", clients=2)]
    clients = [read_adapter(d) for d in dirs]
    runs = {"here": tmp_path / "here", "fresh": tmp_path / "fresh"}
    assert main(["aggregate", *dirs, "--method", f"{NAME}:tau=1.0", "--weights", "1", "3", "-o",
                 str(runs["here"])]) == 0
    done = subprocess.run([sys.executable, "-m", "fraq", "aggregate", *dirs, "--method", f"{NAME}:tau=1.0",
                           "--weights", "1", "3", "-o", str(runs["fresh"])],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for out in runs.values():
        merged = read_adapter(out)
        for n in clients[0].factors:
            want = sum(a * c.scales[n] * (c.factors[n][0].double() @ c.factors[n][1].double())
                       for a, c in zip((0.25, 0.75), clients))
            B, A = merged.factors[n]
            got = merged.scales[n] * (B.double() @ A.double())
            assert float((got - want).abs().max()) <= 100 * EPS32 * float(want.abs().max())


# ------------------------------------------------------------------------------ the harness
def test_harness_runs_it_in_process(outside):
    from test_new_method import tiny_config

    from fraq.federated.round_loop import run_method
    from fraq.federated.task import Task

    task = Task(tiny_config(**{"federated.rounds": 1}), log=lambda *a: None)
    out = run_method(task, f"{NAME}:tau=1.0", log=lambda *a: None)
    assert out["skipped"] is None and out["method"] == f"{NAME}:tau=1.0"
    assert out["display_name"] == DISPLAY  # what the federated table and figure show it by
    (rec,) = out["rounds"]
    assert rec["accuracy"] is not None and 0 < rec["downlink_pct_flora"] <= 100 + 1e-9  # tau=1: up to the stack's rank


def test_flower_strategy_merges_its_exact_aggregate(outside, monkeypatch):
    pytest.importorskip("flwr")
    from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType
    from flwr.supercore.task_identity import TaskIdentity
    from test_new_method import _exact, tiny_config

    from fraq.federated.flower.strategy import LoraStrategy, encode_update
    from fraq.federated.round_loop import MethodSetup
    from fraq.federated.state import RoundState

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)
    m = MethodSetup.make(f"{NAME}:tau=1.0", tiny_config(**{"federated.ranks": [1, 2]}))
    W0 = torch.randn(4, 3, dtype=torch.float64)
    state = RoundState(0, {"q": W0.clone()}, {"weight": torch.zeros(2, 3), "bias": torch.zeros(2)}, [None, None])
    st = LoraStrategy(m, state, {"q": (4, 3)}, {101: 0, 202: 1}, layer=m.agg.client_layer({"q": (4, 3)}, lambda *p: 0))
    g = torch.Generator().manual_seed(0)
    ups = [ClientUpdate({"q": (torch.randn(4, r, generator=g, dtype=torch.float64),
                               torch.randn(r, 3, generator=g, dtype=torch.float64))}, scale=2.0, weight=float(n))
           for r, n in ((1, 10), (2, 30))]
    st.aggregate_train(1, [Message(content=encode_update(u, None, k, loss=1.0, layout=st.upload_layouts[k]), message_type=MessageType.TRAIN,
                                   dst_node_id=0) for k, u in enumerate(ups)])
    torch.testing.assert_close(st.state.weights["q"] - W0, _exact(ups)["q"], rtol=0, atol=100 * EPS64)
    assert len(list(st.configure_train(2, ArrayRecord(), ConfigRecord(), grid=None))) == 2  # a message per client


@pytest.mark.slow
def test_flower_simulation_finds_it_in_its_own_processes(outside, tmp_path):
    """Flower's simulation runs the ClientApps in Ray workers: FRAQ_METHODS reaches them."""
    pytest.importorskip("ray")
    from test_federated_flower import cfg2

    from fraq.federated.flower.server_app import run_simulation

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    sink = run_simulation(cfg2(), f"{NAME}:tau=1.0", flwr_home=str(tmp_path / "flwr"),
                          results_dir=str(tmp_path / "out"))
    assert len(sink["strategy"].records) == 1
    written = list((tmp_path / "out").rglob("result.json"))
    assert len(written) == 1 and json.loads(written[0].read_text())["rounds"][0]["accuracy"] is not None


# ------------------------------------------------------------------------------ the benchmarks and the report
def _fig3_point(points, method):
    return next(c for c in points if c["method"] == method and c["mode"] == "batched")


@pytest.mark.integration
def test_tables_fig3_clients_and_report_show_it(outside, tmp_path):
    """Tables 1-3 get its row (after the paper's), Fig. 3 and the clients sweep compare it at
    every point, the results carry its class's fields, and the report and figures show it by
    its display name."""
    from analysis.sections.clients import figure as clients_figure
    from analysis.sections.fig3 import fig3_scalability
    from analysis.loaders import load_results
    from analysis.reproduce import main as reproduce
    from benchmarks.experiments import clients, fig3, tables123
    from benchmarks.results import write_result
    from benchmarks.run import described
    from fraq.presets import get_preset

    labels = [m.label for m in tables123.table_rows(get_preset("roberta-base"))]
    package = [m for m in labels[:-1] if m.split(" (")[0] in PACKAGE_METHODS]
    assert labels[-1] == NAME and labels[:-1] == package  # the package's rows first (the paper's in its order)
    assert labels.index("fraq (tau=0.95)") < labels.index("fedsvd")  # the paper's, then the package's others
    assert all(NAME in p["methods"] for p in tables123.points("tiny") if p["part"] == "shared")
    f3, cl = fig3.points("tiny"), clients.points("tiny")
    assert all(NAME in c["compared"] for c in f3 + cl)

    out = tmp_path / "results"
    shared = next(p for p in tables123.points("tiny") if p["part"] == "shared")
    shared = dict(shared, methods=["fraq:tau=0.95", NAME], rounds=2, layers=1)
    rec = tables123.measure(shared)
    write_result(out, "tables123", tables123.key(shared), shared, rec)
    row = rec["rows"][-1]
    assert row["display_name"] == DISPLAY and row["paper_order"] is None and row["flop_model"] is True
    assert math.isfinite(row["flops_full"]) and row["flops_full"] > 0 and 0 < row["downlink_pct"] < 100
    for name, module, points in (("fig3", fig3, f3), ("clients", clients, cl)):
        group = [c for c in points if c["compared"] == _fig3_point(points, NAME)["compared"]
                 and all(c[k] == _fig3_point(points, NAME)[k] for k in ("d", "D", "r", "mode"))]
        module.prepare_points(group, "cpu")  # the group's paired timing, as the runner does
        for c in group:
            write_result(out, name, module.key(c), c, described(c, module.measure(c, "cpu")))

    f3_rows = load_results(out / "fig3")
    mine = f3_rows[f3_rows["method"] == NAME].iloc[0]
    assert mine["display_name"] == DISPLAY and mine["analytic_flops_full"] > 0
    legend = fig3_scalability(f3_rows).legends[0]
    assert DISPLAY in [t.get_text() for t in legend.get_texts()]
    legend = clients_figure(load_results(out / "clients")).legends[0]
    assert DISPLAY in [t.get_text() for t in legend.get_texts()]

    assert reproduce(["--out", str(tmp_path), "--no-pdf"]) == 0
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    tables13 = report.split("## Tables 1-3")[1].split("\n## ")[0]
    assert f"| {DISPLAY} |" in tables13 and f"| {NAME} |" not in report  # Tables 1-3's row, by its display name
    assert f"| {DISPLAY} |" in report.split("## Table 5")[1]  # Table 5's row (it has a FLOP model)


def test_the_analysis_shows_a_method_by_its_result_fields_without_knowing_it():
    """analysis.style reads names, families and order from the rows; files without them fall
    back to the paper's names; an unknown method gets a colour no paper method has."""
    import pandas as pd

    from analysis.style import COLORS, described, styles

    rows = pd.DataFrame([
        {"method": NAME, "display_name": DISPLAY, "family": DISPLAY, "paper_order": None},
        {"method": "fraq:cholesky", "display_name": "FRAQ (cholesky)", "family": "FRAQ", "paper_order": 8},
        {"method": "florist"},  # a file written without the fields
        {"method": "fraq"},
    ])
    d = described(rows)
    assert list(d["method_name"]) == [DISPLAY, "FRAQ (cholesky)", "FLoRIST", "FRAQ"]
    look = styles(d)
    assert list(look) == ["FRAQ", "FRAQ (cholesky)", "FLoRIST", DISPLAY]  # legend: the paper's method first
    from analysis.style import MIN_DELTA_E, delta_e

    variant = look["FRAQ (cholesky)"]  # FRAQ's family, told apart from FRAQ by its shade and marker
    assert variant["variant"] and variant["marker"] != look["FRAQ"]["marker"]
    assert 0 < delta_e(variant["color"], COLORS["FRAQ"]) and delta_e(variant["color"], look["FLoRIST"]["color"]) > MIN_DELTA_E
    assert look[DISPLAY]["color"] not in COLORS.values() and not look[DISPLAY]["variant"]
