"""A Flower strategy that aggregates LoRA uploads with any :mod:`fraq.aggregators` method.

:class:`LoraStrategy` is Flower's ``FedAvg`` with the two methods a federated LoRA
strategy must change: ``configure_train`` (each client gets its own payload: the merges
and start adapter of its :class:`~fraq.aggregators.Downlink`, its rank and what to train)
and ``aggregate_train`` (each reply is checked and added to the round's buffer,
:func:`fraq.aggregators.capping.open_capped_round`, one client at a time, its decoded
adapter released once copied in; then the method aggregates and the round's certificate
reads the buffer; the server state advances exactly as in the in-process harness, through
:func:`fraq.federated.state.apply_round`). The strategy itself holds the buffer and one
decoded upload; the reply messages are Flower's, which hands them over as one list. Client evaluation is off;
the ``ServerApp`` evaluates the global model centrally.

Wire format (peft's names), encoded and decoded here, in one module: server -> client
``merge.{i}.{module}.B`` / ``.A`` (products added to the frozen weights),
``start.{module}.B`` / ``.A`` (the warm start), ``head.*``; scales and the round's
instructions in the ConfigRecord (:func:`decode_downlink`), among them
``upload-layout``: the client's :class:`~fraq.aggregators.Layout` as JSON
(:meth:`Layout.to_record <fraq.aggregators.Layout.to_record>`; :func:`decode_layout`).
Client -> server ``adapter``, the whole adapter as one flat array packed in that layout
(:meth:`Layout.pack <fraq.aggregators.Layout.pack>`: per block of modules of one shape,
the B^T then the A factors), ``head.*`` while the head trains, and a MetricRecord with
``num-examples``, ``client``, ``scale``, ``upload-rank``, ``loss`` (:func:`encode_update`,
:func:`decode_update`).

The layout is the server's to decide, because it depends on every client's rank (modules
are grouped by shape and ranks) and on the method (FLoRG sends A alone): the server
derives each client's from the shapes and ranks it configured the clients with
(:func:`fraq.aggregators.capping.capped_layouts`) and sends it every round, so a client
never derives it on its own and both sides read the same array the same way.

Every reply is checked before it is added (:func:`decode_update`, then
:meth:`RoundBuffer.add <fraq.aggregators.RoundBuffer.add>`): its client index (in range,
once per round, every client present), its metrics, its adapter (floating, 1-D, the
length of its client's layout, finite: a non-finite entry is named by module and factor),
the head's keys and shapes (the server's), the head floating and finite, and nothing
else. A fault is one ValueError naming the round, the node, the client and the module or
tensor; the server state is left as it was.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from logging import INFO

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log

from fraq.aggregators import ClientLayer, ClientUpdate, Factors, Layout
from fraq.aggregators.capping import capped_layouts, open_capped_round
from fraq.federated.records import round_record
from fraq.federated.round_loop import MethodSetup
from fraq.federated.state import RoundState, apply_round

__all__ = ["LoraStrategy", "Reply", "decode_downlink", "decode_layout", "decode_update", "encode_update"]


def _encode_factors(prefix: str, f: Factors, arrays: dict, config: dict) -> None:
    if f.B is not None:
        arrays[f"{prefix}.B"] = f.B.detach().cpu().contiguous()
    arrays[f"{prefix}.A"] = f.A.detach().cpu().contiguous()
    config[f"scale.{prefix}"] = float(f.scale)


def decode_downlink(arrays: dict[str, torch.Tensor], config) -> tuple[dict[str, list[Factors]], dict[str, Factors]]:
    """(module -> merges in order, module -> start) from a train message's records."""
    merges: dict[str, list[tuple[int, Factors]]] = {}
    starts: dict[str, Factors] = {}
    for key, scale in config.items():
        if not key.startswith("scale."):
            continue
        prefix = key[len("scale."):]
        B = arrays.get(f"{prefix}.B")
        f = Factors(B, arrays[f"{prefix}.A"], float(scale))
        kind, _, rest = prefix.partition(".")
        if kind == "start":
            starts[rest] = f
        else:
            i, _, module = rest.partition(".")
            merges.setdefault(module, []).append((int(i), f))
    return {m: [f for _, f in sorted(v, key=lambda x: x[0])] for m, v in merges.items()}, starts


def decode_layout(config) -> Layout:
    """Client k's upload layout from its train message's ConfigRecord (``upload-layout``)."""
    if "upload-layout" not in config:
        raise ValueError("the train message's config has no 'upload-layout': the server sends each client the "
                         "layout to pack its adapter in")
    return Layout.from_record(json.loads(config["upload-layout"]))


def encode_update(update: ClientUpdate, head: dict[str, torch.Tensor] | None, client: int, loss: float,
                  layout: Layout) -> RecordDict:
    """A client's reply: its adapter as one flat array in ``layout`` (:func:`decode_layout`),
    its head, its metrics."""
    arrays = {"adapter": layout.pack(update)}
    for k, v in (head or {}).items():
        arrays[f"head.{k}"] = v.contiguous()
    metrics = {"num-examples": int(update.weight), "client": int(client), "scale": float(update.scale),
               "upload-rank": -1 if update.upload_rank is None else int(update.upload_rank), "loss": float(loss)}
    return RecordDict({"arrays": ArrayRecord(torch_state_dict=arrays), "metrics": MetricRecord(metrics)})


_METRICS = {"num-examples": "count", "client": "index", "scale": "positive", "upload-rank": "rank", "loss": "real"}
"""The reply's metrics and what each must be."""


def _metric(where: str, met, key: str, kind: str):
    if key not in met:
        raise ValueError(f"{where}: the reply has no metric {key!r}; a client reply carries {sorted(_METRICS)}")
    v = met[key]
    integral = isinstance(v, numbers.Integral) and not isinstance(v, bool)
    ok = {"count": integral and v >= 0, "index": integral, "rank": integral and v >= -1,
          "positive": isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
          "real": isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)}[kind]
    if not ok:
        what = {"count": "an int >= 0", "index": "an int", "rank": "an int >= -1 (-1: no budget)",
                "positive": "a finite positive number", "real": "a finite number"}[kind]
        raise ValueError(f"{where}: metric {key!r}(={v!r}) must be {what}")
    return v


def _tensor(where: str, key: str, t: torch.Tensor, shape: tuple | None = None, dims: int | None = None) -> None:
    if not t.is_floating_point():
        raise ValueError(f"{where}: {key} has dtype {t.dtype}, not a floating dtype")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{where}: {key} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if dims is not None and t.dim() != dims:
        raise ValueError(f"{where}: {key} has shape {tuple(t.shape)}, expected {dims} dimensions")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{where}: {key} holds NaN or infinity")


@dataclass(frozen=True)
class Reply:
    """One client's decoded reply: its flat adapter (its layout's length, not yet checked
    for finiteness: :meth:`RoundBuffer.add <fraq.aggregators.RoundBuffer.add>` does that,
    naming the module), its metrics and its head (None when it sent none)."""

    client: int
    adapter: torch.Tensor
    weight: float
    scale: float
    upload_rank: int | None
    head: dict[str, torch.Tensor] | None
    loss: float


def decode_update(content: RecordDict, layouts: tuple[Layout, ...], head: Mapping[str, torch.Tensor],
                  where: str) -> Reply:
    """The :class:`Reply` :func:`encode_update` wrote, checked (see the module docstring).

    Args:
        content: the reply's RecordDict.
        layouts: client -> its upload layout (K of them; the client index must be in 0..K-1).
        head: the server's head, name -> tensor: a reply's head must have its keys and shapes.
        where: how messages start (``"round 2, node 7"``); the client index is added.

    Raises:
        ValueError: one line naming ``where``, the client and the tensor at fault.
    """
    if "metrics" not in content or "arrays" not in content:
        raise ValueError(f"{where}: the reply lacks its {'metrics' if 'metrics' not in content else 'arrays'} record")
    met = content["metrics"]
    clients = len(layouts)
    k = _metric(where, met, "client", "index")
    if not 0 <= k < clients:
        raise ValueError(f"{where}: the reply names client {k}, not one of 0..{clients - 1}")
    where = f"{where}, client {k}"
    n, scale, up, loss = (_metric(where, met, key, kind) for key, kind in _METRICS.items() if key != "client")
    tensors = content["arrays"].to_torch_state_dict()
    flat = tensors.pop("adapter", None)
    if flat is None:
        raise ValueError(f"{where}: the reply has no 'adapter' array (the whole adapter, flat, in its layout)")
    if not flat.is_floating_point():
        raise ValueError(f"{where}: adapter has dtype {flat.dtype}, not a floating dtype")
    if flat.dim() != 1 or flat.numel() != layouts[k].numel:
        raise ValueError(f"{where}: adapter has shape {tuple(flat.shape)}, expected ({layouts[k].numel},) "
                         f"(client {k}'s layout)")
    sent = {key[len("head."):]: tensors.pop(key) for key in list(tensors) if key.startswith("head.")}
    if sent and set(sent) != set(head):
        raise ValueError(f"{where}: head tensors {sorted(sent)} are not the server's {sorted(head)}")
    for key, t in sent.items():
        _tensor(where, f"head.{key}", t, shape=head[key].shape)
    if tensors:
        raise ValueError(f"{where}: the upload holds {sorted(tensors)[:4]}, which are not its 'adapter' or head "
                         "tensors")
    return Reply(k, flat, float(n), float(scale), None if up < 0 else int(up), sent or None, float(loss))


class LoraStrategy(FedAvg):
    """Federated LoRA rounds with ``method``'s aggregator, every client every round.

    Args:
        method: the :class:`~fraq.federated.round_loop.MethodSetup` (aggregator, client plan).
        state: the server state before round 1 (:meth:`MethodSetup.initial_state`).
        targets: adapted module -> (m, n), for the FLoRA downlink reference.
        node_clients: Flower node id -> client (data partition) index.
        initial_merges: module -> products every client adds to its pretrained weights
            before round 1 (the method's ``client_layer(...).offset``), or None.
        head_rounds: rounds in which the head trains and is averaged.
        layer: the method's :class:`~fraq.aggregators.ClientLayer`, for the server's own
            merges (default: peft's LoRA).

    After each round ``state`` holds the new server state and ``records`` one dict per round,
    built by :func:`fraq.federated.records.round_record` as in the in-process harness
    (``accuracy`` is filled in by the ``ServerApp``'s evaluation; ``train_seconds`` is the wall time from
    ``configure_train`` to ``aggregate_train``: local training plus communication).
    """

    def __init__(self, method: MethodSetup, state: RoundState, targets: dict[str, tuple[int, int]],
                 node_clients: dict[int, int], *, initial_merges: dict[str, tuple[Factors, ...]] | None = None,
                 head_rounds: int = 0, layer: ClientLayer | None = None):
        K = len(method.plan.ranks)
        if sorted(node_clients.values()) != list(range(K)):
            raise ValueError(f"node_clients must map one node to each client 0..{K - 1}, got "
                             f"{sorted(node_clients.values())}")
        super().__init__(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=K, min_available_nodes=K)
        self.method = method
        self.state = state
        self.targets = dict(targets)
        self.node_clients = dict(node_clients)
        self.head_rounds = head_rounds
        self.layer = layer
        self.records: list[dict] = []
        self.upload_layouts = capped_layouts(method.agg, self.targets, clients=K, ranks=method.plan.ranks)
        self._t_configure: float | None = None
        merges = initial_merges or {}
        self._merges = [dict(merges) for _ in range(K)]

    def summary(self) -> None:
        log(INFO, "\t├──> LoRA aggregation: %s (%s)", self.method.spec, type(self.method.agg).__name__)
        log(INFO, "\t└──> clients: %d, ranks %s", len(self.method.plan.ranks), self.method.plan.ranks)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                        ) -> Iterable[Message]:
        """One message per client: its pending merges, its start adapter, the head, the instructions."""
        plan, agg = self.method.plan, self.method.agg
        self._t_configure = time.perf_counter()
        train = agg.trained_factors(server_round)
        messages = []
        for node_id, k in sorted(self.node_clients.items(), key=lambda x: x[1]):
            tensors: dict[str, torch.Tensor] = {f"head.{n}": v for n, v in self.state.head.items()}
            cfg = {"server-round": server_round, "client": k, "rank": plan.ranks[k], "alpha": float(plan.alphas[k]),
                   "train": train, "train-head": server_round <= self.head_rounds,
                   "upload-rank": -1 if plan.upload_ranks[k] is None else plan.upload_ranks[k],
                   "upload-layout": json.dumps(self.upload_layouts[k].to_record(), allow_nan=False)}
            for module, fs in self._merges[k].items():
                for i, f in enumerate(fs):
                    _encode_factors(f"merge.{i}.{module}", f, tensors, cfg)
            start = self.state.starts[k]
            for module, f in (start or {}).items():
                _encode_factors(f"start.{module}", f, tensors, cfg)
            content = RecordDict({"arrays": ArrayRecord(torch_state_dict=tensors), "config": ConfigRecord(cfg)})
            messages.append(Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node_id))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The method's aggregation of every client's upload; the server state advances one round."""
        train_s = None if self._t_configure is None else time.perf_counter() - self._t_configure
        # Flower's own content check names no client: every reply is checked by decode_update instead
        valid, errors = self._check_and_log_replies(list(replies), is_train=True, validate=False)
        K = len(self.method.plan.ranks)
        if errors or len(valid) != K:
            raise RuntimeError(f"round {server_round}: {len(valid)} of {K} clients replied ({len(errors)} errors); "
                               f"every client must upload for the aggregation")
        train_head = server_round <= self.head_rounds
        decoded: dict[int, tuple] = {}  # client -> (head, loss, weight): its adapter is in the buffer, not kept
        buf = None  # opened at the first reply, in its adapter's dtype
        for msg in valid:
            node = msg.metadata.src_node_id
            where = f"round {server_round}, node {node}"
            r = decode_update(msg.content, self.upload_layouts, self.state.head, where)
            k = r.client
            if node in self.node_clients and self.node_clients[node] != k:
                raise ValueError(f"{where}: the reply names client {k}, but that node trains client "
                                 f"{self.node_clients[node]}")
            if k in decoded:
                raise RuntimeError(f"round {server_round}: two replies from client {k}")
            if train_head and r.head is None:
                raise ValueError(f"{where}, client {k}: the head trains this round but the reply has no head")
            if buf is None:
                buf = open_capped_round(self.method.agg, self.targets, clients=K, ranks=self.method.plan.ranks,
                                        dtype=r.adapter.dtype)
            try:
                buf.add(r.adapter, client=k, weight=r.weight, scale=r.scale, upload_rank=r.upload_rank)
            except (TypeError, ValueError) as e:  # the buffer names the client and the module
                raise ValueError(f"{where}: {e}") from None
            decoded[k] = (r.head, r.loss, r.weight)
            del r  # the decoded adapter is copied into the buffer: one decoded upload alive at a time
        missing = sorted(set(range(K)) - set(decoded))
        if missing:
            raise RuntimeError(f"round {server_round}: no reply from client(s) {missing}")
        heads, losses, weights = (list(x) for x in zip(*(decoded[k] for k in range(K))))
        t0 = time.perf_counter()
        result = buf.aggregate(self.state.agg_state)  # the one rank rule
        agg_ms = (time.perf_counter() - t0) * 1e3
        self.state = apply_round(self.state, result, heads if train_head else None, weights, self.layer)
        self._merges = [result.merged(k) for k in range(K)]
        rec = round_record(result, t=server_round, losses=losses, train_seconds=train_s, agg_ms=agg_ms,
                           targets=self.targets, client_ranks=list(self.method.client_ranks),
                           certificate=result.certificate(buf))  # outside agg_ms; reads the buffer's stacks
        rec["train_shared"] = False  # every ClientApp trains its own round; the in-process harness may share round 1
        self.records.append(rec)
        metrics = MetricRecord({"train-loss": rec["train_loss"], "agg-ms": agg_ms,
                                "downlink-pct-flora": rec["downlink_pct_flora"], "rank-mean": rec["rank_mean"]})
        return ArrayRecord(torch_state_dict=dict(self.state.head)), metrics
