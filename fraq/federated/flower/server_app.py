"""The Flower ``ServerApp`` and a one-call simulation of the federated rounds.

The ``ServerApp`` asks every node for its partition, builds the method's
:class:`~fraq.federated.flower.strategy.LoraStrategy` from the same initial state as the
in-process harness, runs ``strategy.start`` for ``federated.rounds`` rounds,
evaluates the global model centrally (``evaluate_fn``) every ``eval_every`` rounds and
writes the per-round records to ``<results-dir>/<label>/result.json`` (atomic, after
every round). ``app`` is ``flwr run``'s component (configuration from
``context.run_config``, :mod:`~fraq.federated.flower.run_config`);
:func:`make_server_app` builds one for a given configuration, and :func:`run_simulation`
runs it in-process with Flower's simulation runtime (Ray backend).
"""

from __future__ import annotations

import os
import time
from logging import INFO
from pathlib import Path

from flwr.app import ArrayRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fraq.federated.flower import console  # noqa: F401  (flwr's log lines plain outside a terminal)
from fraq.federated.flower.run_config import from_run_config
from fraq.federated.flower.strategy import LoraStrategy
from fraq.federated.config import Config
from fraq.federated.records import method_result, round_line
from fraq.federated.results import write_json
from fraq.federated.round_loop import MethodSetup
from fraq.federated.state import eval_weights
from fraq.federated.task import Task
from fraq.methods import MethodSpec

__all__ = ["app", "make_server_app", "run_simulation"]


def _wait_for_nodes(grid: Grid, count: int, timeout: float = 300.0) -> list[int]:
    t0 = time.monotonic()
    while len(nodes := list(grid.get_node_ids())) < count:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{len(nodes)} of {count} nodes connected after {timeout:.0f} s")
        time.sleep(0.2)
    return nodes


def _partitions(grid: Grid, K: int) -> dict[int, int]:
    """Node id -> partition id, asked of every connected node; exactly one node per client 0..K-1."""
    nodes = _wait_for_nodes(grid, K)
    query = [Message(RecordDict({}), message_type=MessageType.QUERY, dst_node_id=n) for n in nodes]
    node_clients = {}
    for reply in grid.send_and_receive(query):
        if reply.has_error():
            raise RuntimeError(f"node {reply.metadata.src_node_id} failed the partition query: {reply.error.reason}")
        node_clients[reply.metadata.src_node_id] = int(reply.content["metrics"]["partition-id"])
    if sorted(node_clients.values()) != list(range(K)):
        raise RuntimeError(f"federated.clients(={K}) needs one SuperNode per partition-id 0..{K - 1}; the "
                           f"connected nodes have partition-ids {sorted(node_clients.values())}")
    return node_clients


def _result(strategy: LoraStrategy, task: Task, m: MethodSetup, config: Config, run_id: int | None) -> dict:
    """The method's result in the in-process harness's shape (``run_method``), plus the run id and
    ``num_rounds`` (the run is complete when ``len(rounds) == num_rounds``)."""
    return {**method_result(task, m, strategy.records), "num_rounds": config.federated.rounds,
            "runtime": "flower", "run_id": run_id, "config": config.to_record()}


def _main(grid: Grid, context: Context, config: Config, method: MethodSpec, sink: dict | None,
          results_dir: str | None) -> None:
    m = MethodSetup.make(method, config)
    if m.plan.skip:  # before the model and data are loaded
        raise ValueError(f"{method}: {m.plan.skip}")
    task = Task(config, log=lambda msg: log(INFO, "%s", msg))
    f = config.federated
    node_clients = _partitions(grid, f.clients)
    state = m.initial_state(task)
    layer = task.client_layer(m.agg)
    strategy = LoraStrategy(m, state, task.backbone.targets, node_clients,
                            initial_merges=layer.offset(state.starts[0]), head_rounds=f.head_rounds, layer=layer)
    accuracy: dict[int, float] = {}
    out = None if results_dir is None else Path(results_dir).expanduser().resolve() / m.label / "result.json"
    if out is not None:
        log(INFO, "fraq: results go to %s", out)

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        if rnd == 0:
            return None
        metrics = None
        if rnd % f.eval_every == 0 or rnd == f.rounds:
            bb = task.backbone
            bb.set_weights(eval_weights(strategy.state, m.plan.ranks, layer))
            head = task.new_head()
            head.load_state_dict(strategy.state.head)
            accuracy[rnd] = strategy.records[-1]["accuracy"] = bb.accuracy(head, task.test, task.test_labels)
            metrics = MetricRecord({"accuracy": accuracy[rnd]})
        log(INFO, "fraq: %s", round_line(m.spec, rnd, f.rounds, strategy.records[-1]))
        if out is not None:
            write_json(out, _result(strategy, task, m, config, context.run_id))
        return metrics

    result = strategy.start(grid, ArrayRecord(torch_state_dict=dict(state.head)), num_rounds=f.rounds,
                            evaluate_fn=evaluate)
    if sink is not None:
        sink.update(strategy=strategy, result=result, accuracy=accuracy)


def make_server_app(config: Config, method: str | MethodSpec, sink: dict | None = None,
                    results_dir: str | None = None) -> ServerApp:
    """A ``ServerApp`` running ``method`` (a :class:`~fraq.methods.MethodSpec`, or its text such
    as ``"fraq:tau=0.95"``, parsed here once) with configuration ``config``.

    ``sink`` (a dict) receives ``strategy`` (its ``state`` and ``records``), ``result``
    (Flower's ``Result``) and ``accuracy`` (round -> accuracy). With ``results_dir`` the
    records are written to ``results_dir/<label>/result.json`` after every round.
    """
    app = ServerApp()
    method = MethodSpec.parse(method)

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        _main(grid, context, config, method, sink, results_dir)

    return app


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """``flwr run``'s entry point: the configuration comes from ``context.run_config``."""
    config, method, results_dir = from_run_config(context.run_config)
    _main(grid, context, config, method, None, results_dir)


def run_simulation(config: Config, method: str | MethodSpec, *, flwr_home: str | None = None, results_dir: str | None = None) -> dict:
    """Run ``method`` under Flower's simulation runtime with one node per client; return the sink.

    Sets ``FLWR_TELEMETRY_ENABLED=0`` and ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``,
    and ``FLWR_HOME`` when given. Needs the Ray backend (``flwr[simulation]``); each node
    gets one CPU. With ``results_dir`` the records also go to ``results_dir/<label>/result.json``.
    """
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise ImportError('Flower simulation needs its Ray backend: pip install "flwr[simulation]==1.41.*"')
    os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
    os.environ["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
    if flwr_home is not None:
        os.environ["FLWR_HOME"] = flwr_home
    from flwr.simulation import run_simulation as _run

    from fraq.federated.flower.client_app import make_client_app

    sink: dict = {}
    method = MethodSpec.parse(method)  # once, for both apps
    _run(make_server_app(config, method, sink, results_dir), make_client_app(config, method),
         num_supernodes=config.federated.clients,
         backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if "strategy" not in sink:
        raise RuntimeError("the Flower simulation ended without finishing the ServerApp (see the log above)")
    return sink
