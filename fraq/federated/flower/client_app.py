"""The Flower ``ClientApp``: apply the server's downlink, train LoRA locally, upload.

Each node keeps its copy of the global weights W_t of the adapted modules in
``context.state`` and adds the merges it receives (Algorithm 1: W_t = W_{t-1} +
s_g B_g A_g), with the same float64 arithmetic as the server
(:func:`fraq.federated.server.merge_into`). It answers a ``query`` message with its
``partition-id`` so the server can address each client's own payload.
"""

from __future__ import annotations

import json

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fraq.federated.client import LocalJob, local_update
from fraq.federated.flower.strategy import decode_downlink, encode_update
from fraq.federated.server import Method, Task, merge_into

__all__ = ["make_client_app"]

_TASKS: dict[str, Task] = {}


def _task(cfg: dict) -> Task:
    """The run's Task, built once per process (a simulation node reuses it across rounds)."""
    key = json.dumps(cfg, sort_keys=True)
    if key not in _TASKS:
        _TASKS[key] = Task(cfg, log=lambda *a: None)
    return _TASKS[key]


def make_client_app(cfg: dict, method: str) -> ClientApp:
    """A ``ClientApp`` for configuration ``cfg`` (a :func:`fraq.federated.config.load_config` dict)
    and method spec ``method`` (for the local-training settings)."""
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        pid = int(context.node_config.get("partition-id", -1))
        return Message(RecordDict({"metrics": MetricRecord({"partition-id": pid})}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        task = _task(cfg)
        settings = Method.make(method, cfg).settings
        c = msg.content["config"]
        k = int(c["client"])
        pid = context.node_config.get("partition-id")
        if pid is not None and int(pid) != k:
            raise ValueError(f"node with partition-id {pid} was sent client {k}'s round")
        tensors = msg.content["arrays"].to_torch_state_dict()
        merges, starts = decode_downlink(tensors, c)
        florg = task.florg_projections() if bool(c["florg"]) else None
        if "weights" in context.state:
            weights = context.state["weights"].to_torch_state_dict()
        else:
            weights = {n: W.clone() for n, W in task.pretrained.items()}
        weights = merge_into(weights, merges, florg)
        context.state["weights"] = ArrayRecord(torch_state_dict=weights)
        bb = task.backbone
        bb.set_weights(weights)
        head = task.new_head()
        head.load_state_dict({n[len("head."):]: v for n, v in tensors.items() if n.startswith("head.")})
        up = int(c["upload-rank"])
        job = LocalJob(k, int(c["server-round"]), int(c["rank"]), float(c["alpha"]), start=starts or None,
                       train=str(c["train"]), train_head=bool(c["train-head"]), florg=florg,
                       upload_rank=None if up < 0 else up)
        res = local_update(bb, head, *task.clients[k], job, settings)
        return Message(encode_update(res.update, res.head, k, res.loss), reply_to=msg)

    return app
