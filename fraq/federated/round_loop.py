"""The in-process federated round loop: the paper's Algorithm 1, with each method's client behaviour.

Per round t, every client trains its adapter on the frozen global weights W_t (clients
run one after another), the server adds each upload as it is produced to the round's
buffer (:func:`fraq.aggregators.capping.open_capped_round`, the method's
:class:`~fraq.aggregators.RoundBuffer` under the one rank rule) and aggregates once all
are in, with the method's :class:`fraq.aggregators.Aggregator` (the same objects the
benchmarks time), and every client applies its
:class:`~fraq.aggregators.Downlink`: it adds ``merge`` to W (:mod:`fraq.federated.state`)
and trains from ``start`` next round, or from a fresh adapter. The task (data,
partitions, model) is :mod:`fraq.federated.task`; a run of many methods, seeds and
variants, and its result files, is :mod:`fraq.federated.experiment`'s.

What is peculiar to a method is asked of its aggregator class, never of its name
(:class:`~fraq.aggregators.Aggregator`): the layer its clients train and the offset they
start from (``agg.client_layer``: peft's LoRA, or the method's own), what they train each
round (``agg.trained_factors``), whether they need one rank (``heterogeneous_ranks``:
with mixed ranks such a method is skipped, as in the paper's heterogeneous table) or hold
the largest rank under component budgets (``rank_budgets``), and its state between
rounds (``result.state``). Every fresh adapter (round 1 of every method, every round of
a method that reinitializes) is peft's initialization drawn from a seed of the round
shared by all clients, so all clients start a round from a common point and all methods
train identically in round 1: a run trains it once for every group of methods whose
clients' inputs are identical (:mod:`fraq.federated.round1`).

The model evaluated after a round is W_{t+1} plus the start adapter of the client with the
largest rank (a method may send clients different truncations; most send one global
adapter). The linear head is trained and averaged (FedAvg, data
weights) for the first ``head_rounds`` rounds, then frozen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from fraq.aggregators import REINITIALIZE, Aggregator, Factors
from fraq.aggregators.capping import capped_aggregate, open_capped_round
from fraq.federated.checkpoint import load_checkpoint, save_checkpoint
from fraq.federated.client import LocalJob, TrainSettings, local_update, lora_scale
from fraq.federated.config import Config
from fraq.federated.method_specs import method_aggregator, method_label
from fraq.federated.records import method_result, round_line, round_record
from fraq.federated.round1 import signature
from fraq.federated.seeding import init_lora, stable_seed
from fraq.federated.state import RoundState, apply_round, eval_weights, merge_into
from fraq.federated.task import Task
from fraq.methods import MethodSpec

__all__ = ["ClientPlan", "MethodSetup", "initial_state", "run_method", "run_round"]


@dataclass(frozen=True)
class ClientPlan:
    """Per-client ranks, alphas and component budgets (``rank_budgets``) of one method, or why it cannot run."""

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


def initial_state(task: Task, agg: Aggregator, plan: ClientPlan, use_rslora: bool) -> RoundState:
    """Round 0: pretrained weights plus the method's start offset, the initial head, the round-1 starts."""
    seed = task.config.seed
    weights = {n: W.clone() for n, W in task.pretrained.items()}
    head = {k: v.detach().cpu().clone() for k, v in task.new_head().state_dict().items()}
    K = len(plan.ranks)
    if agg.client_init == REINITIALIZE:
        return RoundState(0, weights, head, [None] * K)
    layer = task.client_layer(agg)
    starts = []
    shared: dict[tuple, dict[str, Factors]] = {}
    for r, a in zip(plan.ranks, plan.alphas):
        s = lora_scale(r, a, use_rslora)
        if (r, s) not in shared:
            adapter = {}
            for j, name in enumerate(task.backbone.targets):
                init = stable_seed(seed, "init", 1, j)
                adapter[name] = layer.fresh(name, r, s, lambda m, n, rank: init_lora(m, n, rank, init))
            shared[(r, s)] = adapter
        starts.append(shared[(r, s)])
    weights = merge_into(weights, layer.offset(starts[0]), layer)
    return RoundState(0, weights, head, starts)


@dataclass(frozen=True)
class MethodSetup:
    """One method set up for a run: its spec, aggregator, client plan and local-training settings."""

    spec: MethodSpec
    agg: Aggregator
    plan: ClientPlan
    settings: TrainSettings
    client_ranks: tuple[int, ...]

    @property
    def label(self) -> str:
        return method_label(self.spec)

    @property
    def display_name(self) -> str:
        """The name reports show the method by, its class's (``describe()``; a method from
        outside the package by its own): the analysis reads it from the result files."""
        return self.agg.describe()["display_name"]

    @classmethod
    def make(cls, spec: str | MethodSpec, config: Config) -> MethodSetup:
        """``spec`` set up under ``config``; a :class:`~fraq.methods.MethodSpec` is carried as
        it is, text (a caller's front door) is parsed once here."""
        spec = spec if isinstance(spec, MethodSpec) else MethodSpec.parse(spec)
        agg = method_aggregator(spec)
        ranks, alphas = config.federated.client_ranks()
        plan = ClientPlan.make(agg, ranks, alphas)
        t = config.train
        settings = TrainSettings(steps=t.steps, batch_size=t.batch_size, lr=t.lr, head_lr=t.head_lr,
                                 weight_decay=t.weight_decay, use_rslora=t.use_rslora, seed=config.seed)
        return cls(spec, agg, plan, settings, tuple(ranks))

    def initial_state(self, task: Task) -> RoundState:
        return initial_state(task, self.agg, self.plan, self.settings.use_rslora)


def run_round(task: Task, method: MethodSetup, state: RoundState, *, evaluate: bool, progress: bool = False,
              keep_uploads: bool = False) -> tuple[RoundState, dict, list | None]:
    """Round ``state.round + 1``: local training, aggregation, downlink applied, optional evaluation.

    Returns the new state (its ``records`` not yet extended), the round's record, and the
    clients' uploads when kept (else None). Each upload goes into the round buffer as its
    client finishes and is then released: the buffer's certificate reads its stacks
    (:meth:`RoundBuffer.certificate <fraq.aggregators.RoundBuffer.certificate>`), so the
    server holds the stacks plus the upload in flight. The uploads are kept only where
    something reads them after the round: ``keep_uploads`` (``save_adapters``), a round 1
    shared with other methods (:mod:`fraq.federated.round1`), or a round whose uploads do not
    have the plan's ranks (a method whose own client layer uploads another rank: the list
    path, :func:`fraq.aggregators.capping.capped_aggregate`, with the uploads already in the
    buffer read back as views of it, :meth:`RoundBuffer.uploads`).
    """
    bb, plan, agg = task.backbone, method.plan, method.agg
    f = task.config.federated
    t, K = state.round + 1, f.clients
    layer = task.client_layer(agg)
    bb.set_weights(state.weights)
    head = task.new_head()
    head.load_state_dict(state.head)
    train_head = t <= f.head_rounds
    trains = agg.trained_factors(t)
    key = signature(task, method, state, trains, train_head) if t == 1 and task.share_round1 else None
    shared = key is not None and key in task.round1
    buf, planned = None, True
    keep = keep_uploads or key is not None
    listed: dict[int, object] = {}  # the uploads kept, or taken on the list path
    weights: list[float] = [0.0] * K

    def arrived(k: int, update) -> None:  # into the round buffer, opened in the uploads' dtype and device
        nonlocal buf, planned
        weights[k] = update.weight
        if keep:
            listed[k] = update
        if planned and any(A.shape[-2] != plan.ranks[k] for _, A in update.factors.values()):
            planned = False  # a method whose layer uploads another rank than the plan's: the list path this round
            if buf is not None:
                listed.update({j: u for j, u in buf.uploads().items() if j not in listed})
            buf = None
        if not planned:
            listed[k] = update
            return
        if buf is None:
            A = next(iter(update.factors.values()))[1]
            buf = open_capped_round(agg, bb.targets, clients=K, ranks=plan.ranks, dtype=A.dtype, device=A.device)
        buf.add(update, client=k)

    if shared:  # the same inputs trained already for another method: the same uploads (fraq.federated.round1)
        ups, heads, losses, train_s = task.round1[key]
        for k, u in enumerate(ups):
            arrived(k, u)
        del ups
    else:
        t0 = time.perf_counter()
        heads, losses = [], []
        it = range(K)
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc=f"{method.label} round {t}/{f.rounds}", unit="client", leave=False)
        for k in it:
            job = LocalJob(k, t, plan.ranks[k], plan.alphas[k], start=state.starts[k], train=trains,
                           train_head=train_head, layer=layer, upload_rank=plan.upload_ranks[k])
            res = local_update(bb, head, *task.clients[k], job, method.settings)
            arrived(k, res.update)
            heads.append(res.head)
            losses.append(res.loss)
            del res  # the upload lives on in the buffer (or in ``listed`` where kept)
        train_s = time.perf_counter() - t0
        if key is not None:
            task.round1[key] = ([listed[k] for k in range(K)], heads, losses, train_s)
    updates = [listed[k] for k in range(K)] if len(listed) == K else None
    t1 = time.perf_counter()
    # a fixed rank is a cap per module; uploads of ranks other than the plan's take the list path
    result = buf.aggregate(state.agg_state) if planned else capped_aggregate(agg, updates, state.agg_state)
    agg_ms = (time.perf_counter() - t1) * 1e3
    state = apply_round(state, result, heads if train_head else None, weights, layer)
    acc = None
    if evaluate:
        bb.set_weights(eval_weights(state, plan.ranks, layer))
        head.load_state_dict(state.head)
        acc = bb.accuracy(head, task.test, task.test_labels)
        bb.set_weights(state.weights)
    rec = round_record(result, t=t, losses=losses, train_seconds=train_s, agg_ms=agg_ms, targets=bb.targets,
                       client_ranks=list(method.client_ranks), accuracy=acc,
                       certificate=result.certificate(buf if planned else updates))  # outside agg_ms
    rec["train_shared"] = shared  # train_seconds: of the training whose uploads these are
    return state, rec, updates if keep else None


def run_method(task: Task, spec: str | MethodSpec, *, checkpoint: Path | None = None, resume: bool = False,
               state: RoundState | None = None, log=print, on_round=None, save_adapters=None) -> dict:
    """Run every round of method ``spec`` (a :class:`~fraq.methods.MethodSpec`, or its text such
    as ``"fraq:tau=0.95"``) on ``task``; return its result dict.

    ``checkpoint``: the file written after every round (the caller removes it once the
    result is written: a run killed in between loses nothing); with ``resume`` an existing
    one is read and continued. ``state``: the state to continue
    from (a checkpoint already read). ``on_round(t)`` is called after each round (a
    progress bar); ``save_adapters(t, updates, meta)`` with the uploads of round
    ``federated.save_adapters_round``. Accuracy is evaluated after every
    ``federated.eval_every``-th round and the last.
    """
    config = task.config
    method = MethodSetup.make(spec, config)
    spec = str(method.spec)  # the text, for the log, the result and the checkpoint
    plan = method.plan
    if plan.skip:
        log(f"[{spec}] skipped: {plan.skip}")
        return {"method": spec, "label": method.label, "display_name": method.display_name, "skipped": plan.skip,
                "rounds": []}
    f = config.federated
    meta = {"method": spec, "config": config.to_record()}
    if state is None and resume and checkpoint is not None and checkpoint.exists():
        state = load_checkpoint(checkpoint, meta)
    if state is not None:
        log(f"[{spec}] resuming after round {state.round}")
    else:
        state = method.initial_state(task)
    R = f.rounds
    while state.round < R:
        t = state.round + 1
        save = save_adapters is not None and t == f.save_adapters_round
        state, rec, updates = run_round(task, method, state, evaluate=t % f.eval_every == 0 or t == R,
                                        keep_uploads=save)
        if save:
            save_adapters(t, updates, {"method": spec, "round": t, "model": config.model.name,
                                       "alphas": plan.alphas})
        state.records.append(rec)
        if checkpoint is not None:
            save_checkpoint(checkpoint, state, meta)
        log(round_line(spec, t, R, rec))
        if on_round is not None:
            on_round(t)
    return method_result(task, method, state.records)
