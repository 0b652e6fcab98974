"""The federated round loop: the paper's Algorithm 1, with each method's client behaviour.

Per round t, every client trains its adapter on the frozen global weights W_t (clients
run one after another), the server calls the method's :class:`fraq.aggregators.Aggregator`
(the same objects the benchmarks time) on the uploads, and every client applies its
:class:`~fraq.aggregators.Downlink`: it adds ``merge`` to W (FLoRA and FRAQ: the whole
update, then a fresh adapter, Algorithm 1; FedEx-LoRA: the residual) and trains from
``start`` next round (warm start: FedIT, FedEx-LoRA, FlexLoRA, FLoRIST, LoRA-A^2, FLoRG).

What each method's clients do differently:

- every fresh adapter (round 1 of every method, every round of FLoRA and FRAQ) is peft's
  initialization drawn from a seed of the round shared by all clients, so all clients
  start a round from a common point and all methods train identically in round 1;
- LoRA-A^2 trains only B in odd rounds and only A in even rounds; with mixed client ranks
  every client holds the global rank max r_k and uploads its r_k-component budget;
- FLoRG's clients train one matrix per module (:class:`~fraq.federated.model.FlorgLinear`);
  its initial A is nonzero (a zero A gets no gradient), so the base weights are offset by
  the initial update, W_0 - s L A_0^T A_0 R, and the model starts at the pretrained one;
- FedIT, FedEx-LoRA and FLoRG average factors and need one rank for all clients: with
  mixed ranks they are skipped, as in the paper's heterogeneous table.

The model evaluated after a round is W_{t+1} plus the start adapter of the client with the
largest rank (for FlexLoRA with mixed ranks the clients' truncations differ; every other
method sends one global adapter). The linear head is trained and averaged (FedAvg, data
weights) for the first ``head_rounds`` rounds, then frozen.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fraq.aggregators import REINITIALIZE, AggregationResult, Aggregator, Factors
from fraq.aggregators.florg import florg_delta, projections
from fraq.federated.checkpoint import RoundState, load_checkpoint, save_checkpoint
from fraq.federated.client import LocalJob, TrainSettings, local_update, lora_scale
from fraq.federated.config import client_ranks, method_aggregator, method_label
from fraq.federated.dataset import load_dataset, partition, partition_summary
from fraq.federated.model import Backbone, Inputs, init_lora, resolve_device, stable_seed
from fraq.federated.records import flora_downlink, jsonable, method_result, round_line, round_record

__all__ = ["ClientPlan", "Method", "Task", "apply_round", "eval_weights", "flora_downlink", "florg_offset",
           "initial_state", "merge_into", "method_result", "round_line", "run_method", "run_round"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


class Task:
    """What every method of a run shares: model, tokenized data, client partitions.

    Built once per run; ``backbone`` may be passed in (tests build a tiny BERT).
    """

    def __init__(self, cfg: dict, *, backbone: Backbone | None = None, log=print):
        if cfg["threads"] is not None:
            torch.set_num_threads(cfg["threads"])
        self.cfg = cfg
        seed = cfg["seed"]
        ds = dict(cfg["dataset"])
        ds.setdefault("seed", seed)
        self.data = load_dataset(ds)
        p = cfg["partition"]
        K = cfg["federated"]["clients"]
        self.parts = partition(self.data.train_labels, K, scheme=p["scheme"], alpha=p["alpha"],
                               tasks=self.data.train_tasks, min_size=p["min_size"], seed=seed)
        log(f"{len(self.data.train_texts)} training / {len(self.data.test_texts)} test examples, "
            f"{self.data.num_labels} labels, partition {p['scheme']}"
            + (f"(alpha={p['alpha']})" if p["scheme"] == "dirichlet" else ""))
        log(partition_summary(self.parts, self.data.train_labels, self.data.label_names))
        m = cfg["model"]
        if backbone is None:
            device = resolve_device(m["device"])
            backbone = Backbone(m["name"], target_modules=m["target_modules"],
                                layers_to_transform=m["layers_to_transform"], layers_pattern=m["layers_pattern"],
                                pooling=m["pooling"], max_length=m["max_length"], dtype=_DTYPES[m["dtype"]],
                                device=device, cache_prefix=m["cache_prefix"])
        self.backbone = backbone
        t0 = time.perf_counter()
        train = backbone.encode(self.data.train_texts)
        self.test = backbone.encode(self.data.test_texts)
        backbone.prefix_cached()
        log(f"{len(backbone.targets)} adapted modules; data encoded in {time.perf_counter() - t0:.1f} s"
            + (f" (frozen prefix of {backbone.cache_from} layers cached)" if backbone.cache_from else ""))
        self.test_labels = torch.from_numpy(self.data.test_labels)
        labels = torch.from_numpy(self.data.train_labels)
        self.clients = [(Inputs(train.x[torch.from_numpy(ix)], train.mask[torch.from_numpy(ix)]),
                         labels[torch.from_numpy(ix)]) for ix in self.parts]
        self.pretrained = backbone.weights()
        self._florg: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def florg_projections(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Module -> FLoRG's fixed (L, R), seeded per module."""
        if self._florg is None:
            self._florg = {name: projections(m, n, seed=stable_seed(self.cfg["seed"], "florg", j) % 2**31)
                           for j, (name, (m, n)) in enumerate(self.backbone.targets.items())}
        return self._florg

    def new_head(self) -> nn.Linear:
        """The initial head, nn.Linear's default initialization drawn from the run's seed."""
        head = nn.Linear(self.backbone.hidden_size, self.data.num_labels)
        g = torch.Generator().manual_seed(stable_seed(self.cfg["seed"], "head"))
        bound = 1 / math.sqrt(self.backbone.hidden_size)
        with torch.no_grad():
            head.weight.copy_((torch.rand(head.weight.shape, generator=g) * 2 - 1) * bound)
            head.bias.copy_((torch.rand(head.bias.shape, generator=g) * 2 - 1) * bound)
        return head.to(self.backbone.device)


@dataclass(frozen=True)
class ClientPlan:
    """Per-client ranks, alphas and LoRA-A^2 budgets of one method, or why it cannot run."""

    ranks: list[int]
    alphas: list[float]
    upload_ranks: list[int | None]
    skip: str | None = None

    @classmethod
    def make(cls, agg: Aggregator, ranks: list[int], alphas: list[float]) -> ClientPlan:
        mixed = len(set(zip(ranks, alphas))) > 1
        if agg.rank_budgets:
            r = max(ranks)
            budgets = [rk if mixed else None for rk in ranks]
            return cls([r] * len(ranks), [2.0 * r if mixed else alphas[0]] * len(ranks), budgets)
        if mixed and not agg.heterogeneous_ranks:
            return cls(ranks, alphas, [None] * len(ranks),
                       skip=f"{agg.name} needs one rank and alpha for all clients (ranks {ranks})")
        return cls(ranks, alphas, [None] * len(ranks))


def merge_into(weights: dict[str, torch.Tensor], merges: dict[str, tuple[Factors, ...]],
               florg: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> dict[str, torch.Tensor]:
    """W + sum of each merge's product per module, in float64, cast back to W's dtype.

    A merge with ``B`` None is FLoRG's ``scale L A^T A R`` with ``florg[module] = (L, R)``.
    The server and every client apply their merges with this function, so they hold the
    same weights bit for bit.
    """
    out = dict(weights)
    for name, fs in merges.items():
        if fs:
            W = weights[name]
            acc = W.double()
            for f in fs:
                acc = acc + _start_delta(f, None if florg is None else florg.get(name))
            out[name] = acc.to(W.dtype)
    return out


def _start_delta(f: Factors, proj: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    if f.B is None:
        L, R = proj
        return florg_delta(L.double(), f.A.double(), R.double(), f.scale)
    return f.dense(torch.float64)


def eval_weights(state: RoundState, ranks: list[int], florg: dict | None) -> dict[str, torch.Tensor]:
    """The global model's adapted weights: W plus the largest-rank client's start adapter."""
    ref = state.starts[int(np.argmax(ranks))]
    if ref is None:
        return state.weights
    return {n: (W.double() + _start_delta(ref[n], None if florg is None else florg[n])).to(W.dtype)
            for n, W in state.weights.items()}


def initial_state(task: Task, agg: Aggregator, plan: ClientPlan, use_rslora: bool) -> RoundState:
    """Round 0: pretrained weights, the initial head, and the round-1 starts."""
    seed = task.cfg["seed"]
    weights = {n: W.clone() for n, W in task.pretrained.items()}
    head = {k: v.detach().cpu().clone() for k, v in task.new_head().state_dict().items()}
    K = len(plan.ranks)
    if agg.client_init == REINITIALIZE:
        return RoundState(0, weights, head, [None] * K)
    starts = []
    shared: dict[tuple, dict[str, Factors]] = {}
    for r, a in zip(plan.ranks, plan.alphas):
        s = lora_scale(r, a, use_rslora)
        if (r, s) not in shared:
            adapter = {}
            for j, (name, (m, n)) in enumerate(task.backbone.targets.items()):
                B, A = init_lora(min(m, n) if agg.single_matrix else m, min(m, n) if agg.single_matrix else n, r,
                                 stable_seed(seed, "init", 1, j))
                adapter[name] = Factors(None if agg.single_matrix else B, A, s)
            shared[(r, s)] = adapter
        starts.append(shared[(r, s)])
    if agg.single_matrix:  # FLoRG: offset W so the initial nonzero adapter leaves the model unchanged
        weights = merge_into(weights, florg_offset(starts[0]), task.florg_projections())
    return RoundState(0, weights, head, starts)


def florg_offset(start: dict[str, Factors]) -> dict[str, tuple[Factors, ...]]:
    """FLoRG's initial merge: minus the initial adapter's update, so W_0 + adapter = pretrained."""
    return {n: (Factors(None, f.A, -f.scale),) for n, f in start.items()}


def _same(a: tuple[Factors, ...], b: tuple[Factors, ...]) -> bool:
    return len(a) == len(b) and all(
        x is y or (x.scale == y.scale and torch.equal(x.A, y.A) and
                   (x.B is y.B or (x.B is not None and y.B is not None and torch.equal(x.B, y.B))))
        for x, y in zip(a, b))


def apply_round(state: RoundState, result: AggregationResult, heads: list[dict] | None,
                weights: list[float]) -> RoundState:
    """The state after round ``state.round + 1``: merges into W, the new starts, the averaged head."""
    merges = result.merged(0)
    for k in range(1, result.clients):  # every method merges one shared update into W
        if not all(_same(merges[n], fs) for n, fs in result.merged(k).items()):
            raise RuntimeError(f"{result.method}: clients received different merges; the harness keeps one W")
    new_w = merge_into(state.weights, merges)
    starts = [None if result.client_init == REINITIALIZE else result.starts(k) for k in range(result.clients)]
    head = state.head
    if heads is not None:
        a = torch.tensor(weights, dtype=torch.float64) / sum(weights)
        head = {key: sum(float(a[k]) * heads[k][key].double() for k in range(len(heads))).to(state.head[key].dtype)
                for key in state.head}
    return RoundState(state.round + 1, new_w, head, starts, result.state, list(state.records))


@dataclass(frozen=True)
class Method:
    """One method of a run: its spec, aggregator, client plan and local-training settings."""

    spec: str
    agg: Aggregator
    plan: ClientPlan
    settings: TrainSettings
    client_ranks: tuple[int, ...]

    @property
    def label(self) -> str:
        return method_label(self.spec)

    @classmethod
    def make(cls, spec: str, cfg: dict) -> Method:
        agg = method_aggregator(spec)
        ranks, alphas = client_ranks(cfg)
        plan = ClientPlan.make(agg, ranks, alphas)
        t = cfg["train"]
        settings = TrainSettings(steps=t["steps"], batch_size=t["batch_size"], lr=t["lr"], head_lr=t["head_lr"],
                                 weight_decay=t["weight_decay"], use_rslora=t["use_rslora"], seed=cfg["seed"])
        return cls(spec, agg, plan, settings, tuple(ranks))

    def initial_state(self, task: Task) -> RoundState:
        return initial_state(task, self.agg, self.plan, self.settings.use_rslora)


def run_round(task: Task, method: Method, state: RoundState, *, evaluate: bool, progress: bool = False
              ) -> tuple[RoundState, dict, list]:
    """Round ``state.round + 1``: local training, aggregation, downlink applied, optional evaluation.

    Returns the new state (its ``records`` not yet extended), the round's record, and the
    clients' uploads.
    """
    cfg, bb, plan, agg = task.cfg, task.backbone, method.plan, method.agg
    f = cfg["federated"]
    t, K = state.round + 1, f["clients"]
    florg = task.florg_projections() if agg.single_matrix else None
    bb.set_weights(state.weights)
    head = task.new_head()
    head.load_state_dict(state.head)
    train_head = t <= f["head_rounds"]
    trains = agg.trained_factors(t)
    t0 = time.perf_counter()
    updates, heads, losses = [], [], []
    it = range(K)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"{method.label} round {t}/{f['rounds']}", unit="client", leave=False)
    for k in it:
        job = LocalJob(k, t, plan.ranks[k], plan.alphas[k], start=state.starts[k], train=trains,
                       train_head=train_head, florg=florg, upload_rank=plan.upload_ranks[k])
        res = local_update(bb, head, *task.clients[k], job, method.settings)
        updates.append(res.update)
        heads.append(res.head)
        losses.append(res.loss)
    train_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    result = agg.aggregate(updates, state.agg_state)
    agg_ms = (time.perf_counter() - t1) * 1e3
    state = apply_round(state, result, heads if train_head else None, [u.weight for u in updates])
    acc = None
    if evaluate:
        bb.set_weights(eval_weights(state, plan.ranks, florg))
        head.load_state_dict(state.head)
        acc = bb.accuracy(head, task.test, task.test_labels)
        bb.set_weights(state.weights)
    rec = round_record(result, t=t, losses=losses, train_seconds=train_s, agg_ms=agg_ms, targets=bb.targets,
                       client_ranks=list(method.client_ranks), accuracy=acc)
    return state, rec, updates


def run_method(task: Task, spec: str, out_dir: Path, *, resume: bool = False, state: RoundState | None = None,
               log=print, progress: bool = True, save_adapters=None) -> dict:
    """Run every round of method ``spec`` (e.g. ``"fraq:tau=0.95"``); return its result dict.

    Writes ``out_dir/<label>/checkpoint.pt`` after every round and ``result.json`` at the
    end (the checkpoint is then removed). ``state``: the state to continue from (a
    checkpoint already read); else with ``resume`` a checkpoint is read and continued.
    ``save_adapters(path, updates, meta)`` is called with the uploads of round
    ``federated.save_adapters_round``.
    """
    from fraq.federated.results import write_json

    cfg = task.cfg
    method = Method.make(spec, cfg)
    plan, label = method.plan, method.label
    mdir = Path(out_dir) / label
    if plan.skip:
        log(f"[{spec}] skipped: {plan.skip}")
        return {"method": spec, "label": label, "skipped": plan.skip, "rounds": []}
    f = cfg["federated"]
    meta = {"method": spec, "config": jsonable(cfg)}
    ckpt = mdir / "checkpoint.pt"
    if state is None and resume and ckpt.exists():
        state = load_checkpoint(ckpt, meta)
    if state is not None:
        log(f"[{spec}] resuming after round {state.round}")
    else:
        state = method.initial_state(task)
    R = f["rounds"]
    while state.round < R:
        t = state.round + 1
        state, rec, updates = run_round(task, method, state, evaluate=t % f["eval_every"] == 0 or t == R,
                                        progress=progress)
        if save_adapters is not None and t == f["save_adapters_round"]:
            save_adapters(Path(out_dir) / "adapters" / f"{label}_round{t}.safetensors", updates,
                          {"method": spec, "round": t, "model": cfg["model"]["name"], "alphas": plan.alphas})
        state.records.append(rec)
        save_checkpoint(ckpt, state, meta)
        log(round_line(spec, t, R, rec))
    out = method_result(task, method, state.records)
    write_json(mdir / "result.json", out)
    if ckpt.exists():
        ckpt.unlink()
    return out
