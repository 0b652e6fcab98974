"""The Flower ``ClientApp``: apply the server's downlink, train LoRA locally, upload.

Each node keeps its copy of the global weights W_t of the adapted modules in
``context.state`` and adds the merges it receives (Algorithm 1:
W_t = W_{t-1} + s_g B_g A_g), with the same float64 arithmetic as the server
(:func:`fraq.federated.state.merge_into`, through the method's client layer). It answers a
``query`` message with its ``partition-id`` (checked against ``num-partitions`` and the
run's client count) so the server can address each client's own payload: SuperNode
``partition-id`` K trains the harness's client K (``Task.clients[K]``, the K-th part of
the seeded Dirichlet split).

``app`` is ``flwr run``'s component (configuration from ``context.run_config``);
:func:`make_client_app` builds one for a given configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fraq.federated.client import LocalJob, local_update
from fraq.federated.flower import console  # noqa: F401  (flwr's log lines plain outside a terminal)
from fraq.federated.flower.run_config import from_run_config
from fraq.federated.flower.strategy import decode_downlink, decode_layout, encode_update
from fraq.federated.round_loop import MethodSetup
from fraq.federated.state import merge_into
from fraq.federated.config import Config
from fraq.federated.task import Task
from fraq.methods import MethodSpec

__all__ = ["app", "make_client_app"]

_TASKS: dict[str, Task] = {}


def _task(config: Config) -> Task:
    """The run's Task, built once per process (a simulation node reuses it across rounds)."""
    key = json.dumps(config.to_record(), sort_keys=True, allow_nan=False)
    if key not in _TASKS:
        _TASKS[key] = Task(config, log=lambda *a: None)
    return _TASKS[key]


def _partition(context: Context, K: int) -> int:
    """This node's partition id, checked against the node's ``num-partitions`` and K clients."""
    nc = context.node_config
    if "partition-id" not in nc or "num-partitions" not in nc:
        raise ValueError(f"SuperNode node_config(={dict(nc)!r}) needs partition-id and num-partitions: start it with "
                         f"--node-config \"partition-id=K num-partitions={K}\"")
    pid, n = nc["partition-id"], nc["num-partitions"]
    if int(n) != K:
        raise ValueError(f"SuperNode num-partitions(={n!r}) differs from the run's clients(={K}); the data are "
                         f"split into {K} partitions, one per SuperNode")
    if not 0 <= int(pid) < K:
        raise ValueError(f"SuperNode partition-id(={pid!r}) must be in 0..{K - 1}")
    return int(pid)


def _register(app: ClientApp, resolve: Callable[[Context], tuple[Config, MethodSetup]]) -> ClientApp:
    """Add the query and train handlers; ``resolve(context)`` gives (config, method), built once per run."""

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        config, _ = resolve(context)
        pid = _partition(context, config.federated.clients)
        return Message(RecordDict({"metrics": MetricRecord({"partition-id": pid})}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        config, m = resolve(context)
        task = _task(config)
        layer = task.client_layer(m.agg)
        c = msg.content["config"]
        k = int(c["client"])
        pid = _partition(context, config.federated.clients)
        if pid != k:
            raise ValueError(f"node with partition-id {pid} was sent client {k}'s round")
        layout = decode_layout(c)  # how to pack the reply, the server's (strategy.py's docstring)
        tensors = msg.content["arrays"].to_torch_state_dict()
        merges, starts = decode_downlink(tensors, c)
        if "weights" in context.state:
            weights = context.state["weights"].to_torch_state_dict()
        else:
            weights = {n: W.clone() for n, W in task.pretrained.items()}
        weights = merge_into(weights, merges, layer)
        context.state["weights"] = ArrayRecord(torch_state_dict=weights)
        bb = task.backbone
        bb.set_weights(weights)
        head = task.new_head()
        head.load_state_dict({n[len("head."):]: v for n, v in tensors.items() if n.startswith("head.")})
        up = int(c["upload-rank"])
        job = LocalJob(k, int(c["server-round"]), int(c["rank"]), float(c["alpha"]), start=starts or None,
                       train=str(c["train"]), train_head=bool(c["train-head"]), layer=layer,
                       upload_rank=None if up < 0 else up)
        res = local_update(bb, head, *task.clients[k], job, m.settings)
        return Message(encode_update(res.update, res.head, k, res.loss, layout), reply_to=msg)

    return app


def make_client_app(config: Config, method: str | MethodSpec) -> ClientApp:
    """A ``ClientApp`` for ``config`` (a :func:`fraq.federated.config.load_config` configuration)
    and method ``method`` (a :class:`~fraq.methods.MethodSpec`, or its text, parsed here once;
    for the local-training settings)."""
    method = MethodSpec.parse(method)
    made: list[MethodSetup] = []  # the method is built on the first message, once

    def resolve(context: Context) -> tuple[Config, MethodSetup]:
        if not made:
            made.append(MethodSetup.make(method, config))
        return config, made[0]

    return _register(ClientApp(), resolve)


_RUNS: dict[str, tuple[Config, MethodSetup]] = {}
"""Run config (as JSON) -> (config, method): each run's configuration is parsed and checked once
per process, not on every message."""


def _from_run_config(context: Context) -> tuple[Config, MethodSetup]:
    key = json.dumps(dict(context.run_config), sort_keys=True, allow_nan=False)
    if key not in _RUNS:
        config, method, _ = from_run_config(context.run_config)
        _RUNS[key] = config, MethodSetup.make(method, config)
    return _RUNS[key]


# ``flwr run``'s component: the configuration comes from ``context.run_config``
app = _register(ClientApp(), _from_run_config)
