"""The Flower ``ServerApp`` and a one-call simulation of the federated rounds.

The ``ServerApp`` asks every node for its partition, builds the method's
:class:`~fraq.federated.flower.strategy.LoraStrategy` from the same initial state as the
in-process harness, runs ``strategy.start`` for ``federated.rounds`` rounds and
evaluates the global model centrally (``evaluate_fn``) every ``eval_every`` rounds.
:func:`run_simulation` runs it with Flower's simulation runtime (Ray backend).
"""

from __future__ import annotations

import os
import time

from flwr.app import ArrayRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp

from fraq.federated.flower.strategy import LoraStrategy
from fraq.federated.server import Method, Task, eval_weights, florg_offset

__all__ = ["make_server_app", "run_simulation"]


def _wait_for_nodes(grid: Grid, count: int, timeout: float = 300.0) -> list[int]:
    t0 = time.monotonic()
    while len(nodes := list(grid.get_node_ids())) < count:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{len(nodes)} of {count} nodes connected after {timeout:.0f} s")
        time.sleep(0.2)
    return nodes


def make_server_app(cfg: dict, method: str, sink: dict | None = None) -> ServerApp:
    """A ``ServerApp`` running ``method`` (e.g. ``"fraq:tau=0.95"``) with configuration ``cfg``.

    ``sink`` (a dict) receives ``strategy`` (its ``state`` and ``records``), ``result``
    (Flower's ``Result``) and ``accuracy`` (round -> accuracy).
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        task = Task(cfg, log=lambda *a: None)
        m = Method.make(method, cfg)
        if m.plan.skip:
            raise ValueError(f"{method}: {m.plan.skip}")
        K = cfg["federated"]["clients"]
        nodes = _wait_for_nodes(grid, K)
        query = [Message(RecordDict({}), message_type=MessageType.QUERY, dst_node_id=n) for n in nodes]
        node_clients = {}
        for reply in grid.send_and_receive(query):
            if reply.has_error():
                raise RuntimeError(f"node {reply.metadata.src_node_id} failed the partition query: {reply.error.reason}")
            node_clients[reply.metadata.src_node_id] = int(reply.content["metrics"]["partition-id"])
        state = m.initial_state(task)
        florg = task.florg_projections() if m.agg.single_matrix else None
        strategy = LoraStrategy(m, state, task.backbone.targets, node_clients,
                                initial_merges=florg_offset(state.starts[0]) if florg else None,
                                head_rounds=cfg["federated"]["head_rounds"])
        f = cfg["federated"]
        accuracy: dict[int, float] = {}

        def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
            if rnd == 0 or not (rnd % f["eval_every"] == 0 or rnd == f["rounds"]):
                return None
            bb = task.backbone
            bb.set_weights(eval_weights(strategy.state, m.plan.ranks, florg))
            head = task.new_head()
            head.load_state_dict(strategy.state.head)
            accuracy[rnd] = bb.accuracy(head, task.test, task.test_labels)
            return MetricRecord({"accuracy": accuracy[rnd]})

        result = strategy.start(grid, ArrayRecord(torch_state_dict=dict(state.head)), num_rounds=f["rounds"],
                                evaluate_fn=evaluate)
        if sink is not None:
            sink.update(strategy=strategy, result=result, accuracy=accuracy)

    return app


def run_simulation(cfg: dict, method: str, *, flwr_home: str | None = None) -> dict:
    """Run ``method`` under Flower's simulation runtime with one node per client; return the sink.

    Sets ``FLWR_TELEMETRY_ENABLED=0`` and ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``,
    and ``FLWR_HOME`` when given. Needs the Ray backend (``flwr[simulation]``); each node
    gets one CPU.
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
    _run(make_server_app(cfg, method, sink), make_client_app(cfg, method), num_supernodes=cfg["federated"]["clients"],
         backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if "strategy" not in sink:
        raise RuntimeError("the Flower simulation ended without finishing the ServerApp (see the log above)")
    return sink
