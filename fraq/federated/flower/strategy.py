"""A Flower strategy that aggregates LoRA uploads with any :mod:`fraq.aggregators` method.

:class:`LoraStrategy` is Flower's ``FedAvg`` with the two methods a federated LoRA
strategy must change: ``configure_train`` (each client gets its own payload: the merges
and start adapter of its :class:`~fraq.aggregators.Downlink`, its rank and what to train)
and ``aggregate_train`` (the uploads become :class:`~fraq.aggregators.ClientUpdate` objects
for the method's aggregator; the server state advances exactly as in the in-process
harness, through :func:`fraq.federated.state.apply_round`). Client evaluation is off;
the ``ServerApp`` evaluates the global model centrally.

Wire format (peft's names), encoded and decoded here, in one module: server -> client
``merge.{i}.{module}.B`` / ``.A`` (products added to the frozen weights),
``start.{module}.B`` / ``.A`` (the warm start), ``head.*``; scales and the round's
instructions in the ConfigRecord (:func:`decode_downlink`). Client -> server
``{module}.lora_B.weight`` (out, r), ``{module}.lora_A.weight`` (r, in), ``head.*`` while
the head trains, and a MetricRecord with ``num-examples``, ``client``, ``scale``,
``upload-rank``, ``loss`` (:func:`encode_update`, :func:`decode_update`).

Every reply is checked before the aggregation (:func:`decode_update`): its client index
(in range, once per round, every client present), its metrics, every adapted module
present with factors of the module's shape that share a rank, the head's keys and shapes
(the server's), every tensor floating and finite, heads included, and nothing else. A
fault is one ValueError naming the round, the client (and node) and the module or tensor.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable, Mapping
from logging import INFO

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log

from fraq.aggregators import ClientLayer, ClientUpdate, Factors
from fraq.aggregators.capping import capped_aggregate
from fraq.federated.records import round_record
from fraq.federated.round_loop import MethodSetup
from fraq.federated.state import RoundState, apply_round

__all__ = ["LoraStrategy", "decode_downlink", "decode_update", "encode_update"]


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


def encode_update(update: ClientUpdate, head: dict[str, torch.Tensor] | None, client: int, loss: float) -> RecordDict:
    """A client's reply: its factors under peft's names, its head, its metrics."""
    arrays = {}
    for name, (B, A) in update.factors.items():
        if B is not None:
            arrays[f"{name}.lora_B.weight"] = B.contiguous()
        arrays[f"{name}.lora_A.weight"] = A.contiguous()
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


def decode_update(content: RecordDict, targets: Mapping[str, tuple[int, int]], head: Mapping[str, torch.Tensor],
                  clients: int, where: str) -> tuple[int, ClientUpdate, dict[str, torch.Tensor] | None, float]:
    """(client index, its :class:`~fraq.aggregators.ClientUpdate`, its head or None, its loss)
    from a reply :func:`encode_update` wrote, every part checked (see the module docstring).

    Args:
        content: the reply's RecordDict.
        targets: adapted module -> (m, n).
        head: the server's head, name -> tensor: a reply's head must have its keys and shapes.
        clients: K; the client index must be in 0..K-1.
        where: how messages start (``"round 2, node 7"``); the client index is added.

    Raises:
        ValueError: one line naming ``where``, the client and the module or tensor at fault.
    """
    if "metrics" not in content or "arrays" not in content:
        raise ValueError(f"{where}: the reply lacks its {'metrics' if 'metrics' not in content else 'arrays'} record")
    met = content["metrics"]
    k = _metric(where, met, "client", "index")
    if not 0 <= k < clients:
        raise ValueError(f"{where}: the reply names client {k}, not one of 0..{clients - 1}")
    where = f"{where}, client {k}"
    n, scale, up, loss = (_metric(where, met, key, kind) for key, kind in _METRICS.items() if key != "client")
    tensors = content["arrays"].to_torch_state_dict()
    factors = {}
    for name, (m, n_in) in targets.items():
        A, B = tensors.pop(f"{name}.lora_A.weight", None), tensors.pop(f"{name}.lora_B.weight", None)
        if A is None:
            raise ValueError(f"{where}: module {name!r} is missing from the upload (no {name}.lora_A.weight)")
        if B is None:  # a single-matrix adapter (FLoRG): its shape is the method's to check
            _tensor(where, f"module {name!r}: lora_A", A, dims=2)
        else:
            _tensor(where, f"module {name!r}: lora_B", B, dims=2)
            _tensor(where, f"module {name!r}: lora_A", A, shape=(B.shape[1], n_in))
            if B.shape[0] != m:
                raise ValueError(f"{where}: module {name!r}: lora_B has shape {tuple(B.shape)}, expected ({m}, r)")
        factors[name] = (B, A)
    sent = {key[len("head."):]: tensors.pop(key) for key in list(tensors) if key.startswith("head.")}
    if sent and set(sent) != set(head):
        raise ValueError(f"{where}: head tensors {sorted(sent)} are not the server's {sorted(head)}")
    for key, t in sent.items():
        _tensor(where, f"head.{key}", t, shape=head[key].shape)
    if tensors:
        raise ValueError(f"{where}: the upload holds {sorted(tensors)[:4]}, which are not adapted modules "
                         f"({sorted(targets)[:4]}{', ...' if len(targets) > 4 else ''}) or head tensors")
    update = ClientUpdate(factors, scale=float(scale), weight=float(n), upload_rank=None if up < 0 else int(up))
    return k, update, sent or None, float(loss)


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
                   "upload-rank": -1 if plan.upload_ranks[k] is None else plan.upload_ranks[k]}
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
        decoded: dict[int, tuple] = {}
        for msg in valid:
            where = f"round {server_round}, node {msg.metadata.src_node_id}"
            k, update, head, loss = decode_update(msg.content, self.targets, self.state.head, K, where)
            node = msg.metadata.src_node_id
            if node in self.node_clients and self.node_clients[node] != k:
                raise ValueError(f"{where}: the reply names client {k}, but that node trains client "
                                 f"{self.node_clients[node]}")
            if k in decoded:
                raise RuntimeError(f"round {server_round}: two replies from client {k}")
            if train_head and head is None:
                raise ValueError(f"{where}, client {k}: the head trains this round but the reply has no head")
            decoded[k] = (update, head, loss)
        missing = sorted(set(range(K)) - set(decoded))
        if missing:
            raise RuntimeError(f"round {server_round}: no reply from client(s) {missing}")
        updates, heads, losses = (list(x) for x in zip(*(decoded[k] for k in range(K))))
        t0 = time.perf_counter()
        result = capped_aggregate(self.method.agg, updates, self.state.agg_state)  # the one rank rule
        agg_ms = (time.perf_counter() - t0) * 1e3
        self.state = apply_round(self.state, result, heads if train_head else None, [u.weight for u in updates],
                                 self.layer)
        self._merges = [result.merged(k) for k in range(K)]
        rec = round_record(result, t=server_round, losses=losses, train_seconds=train_s, agg_ms=agg_ms,
                           targets=self.targets, client_ranks=list(self.method.client_ranks),
                           certificate=result.certificate(updates))  # outside agg_ms
        rec["train_shared"] = False  # every ClientApp trains its own round; the in-process harness may share round 1
        self.records.append(rec)
        metrics = MetricRecord({"train-loss": rec["train_loss"], "agg-ms": agg_ms,
                                "downlink-pct-flora": rec["downlink_pct_flora"], "rank-mean": rec["rank_mean"]})
        return ArrayRecord(torch_state_dict=dict(self.state.head)), metrics
