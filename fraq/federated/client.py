"""One client's local round: load the start adapter, train LoRA (and the head) with AdamW, upload.

The client trains on top of the frozen global weights W_t (already in the backbone). Its
adapter starts either fresh (peft's initialization, B = 0 and A kaiming-uniform, drawn
from a seed of the round and module that every client shares, as when all clients run peft
with one seed: FLoRA and FRAQ after merging; a rank-r client gets the first r rows of the
draw) or from what the server sent (``Downlink.start``: the warm-start methods). A start
of rank p loads into the client's rank-r_k adapter at the client's own scale s_k:
``lora_B = B * (scale / s_k)``, ``lora_A = A``; with p > r_k the client keeps the first r_k
components, with p < r_k it pads with zero columns of B and fresh rows of A (the product
is unchanged and the new components can still learn; all-zero padding would get zero
gradient). A method whose clients train a layer of their own instead of peft's LoRA (its
:class:`~fraq.aggregators.ClientLayer` is not ``peft_lora``) has that layer swapped in for
each target module and uploads what the layer reads back.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fraq.aggregators import ClientLayer, ClientUpdate, Factors
from fraq.federated.model import Backbone, Inputs
from fraq.federated.seeding import init_lora, stable_seed

__all__ = ["LocalJob", "LocalResult", "TrainSettings", "local_update", "load_start"]


@dataclass(frozen=True)
class TrainSettings:
    """Local optimization: AdamW with a constant learning rate (the paper's Table 4)."""

    steps: int = 200
    batch_size: int = 32
    lr: float = 5e-4
    head_lr: float = 5e-4
    weight_decay: float = 0.0
    use_rslora: bool = False
    seed: int = 42


@dataclass(frozen=True)
class LocalJob:
    """What one client does in one round.

    Attributes:
        client, round: indices (round from 1), for the seeds.
        rank, alpha: the client's LoRA rank and ``lora_alpha``.
        start: module -> the adapter to warm-start from, or None: a fresh adapter.
        train: ``"AB"`` (both factors), ``"B"`` or ``"A"`` (``agg.trained_factors``).
        train_head: whether the classification head trains this round.
        layer: the method's :class:`~fraq.aggregators.ClientLayer` (None: peft's LoRA).
        upload_rank: the client's component budget (``rank_budgets``), passed on in the upload.
    """

    client: int
    round: int
    rank: int
    alpha: float
    start: Mapping[str, Factors] | None = None
    train: str = "AB"
    train_head: bool = True
    layer: ClientLayer | None = None
    upload_rank: int | None = None


@dataclass
class LocalResult:
    update: ClientUpdate
    head: dict[str, torch.Tensor] | None
    loss: float
    seconds: float


def lora_scale(rank: int, alpha: float, use_rslora: bool) -> float:
    """peft's scaling: ``alpha / r``, or ``alpha / sqrt(r)`` with rsLoRA."""
    return alpha / math.sqrt(rank) if use_rslora else alpha / rank


def load_start(f: Factors | None, m: int, n: int, rank: int, scale: float, seed: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The (lora_B (m, r), lora_A (r, n)) a rank-``rank`` client at ``scale`` trains from.

    ``f`` None: a fresh seeded adapter. Otherwise ``scale * B' A' = f.scale * B A`` when
    ``rank`` >= ``f.rank``; a smaller rank keeps the first ``rank`` components.
    """
    B0, A0 = init_lora(m, n, rank, seed)
    if f is None:
        return B0, A0
    p = f.rank
    B = f.B.detach().float().cpu() * (f.scale / scale)
    A = f.A.detach().float().cpu()
    if p >= rank:
        return B[:, :rank].clone(), A[:rank].clone()
    return torch.cat([B, B0[:, p:]], 1), torch.cat([A, A0[p:]], 0)


def _batches(n: int, steps: int, batch_size: int, seed: int):
    rng = np.random.default_rng(seed)
    order, pos = rng.permutation(n), 0
    for _ in range(steps):
        if pos + batch_size > n and pos > 0:
            order, pos = rng.permutation(n), 0
        idx = order[pos:pos + batch_size]
        pos += batch_size
        yield torch.from_numpy(idx)


def local_update(backbone: Backbone, head: nn.Linear, data: Inputs, labels: torch.Tensor, job: LocalJob,
                 settings: TrainSettings) -> LocalResult:
    """Train client ``job.client`` for ``settings.steps`` AdamW steps on ``data`` / ``labels``.

    ``data`` and ``labels`` hold this client's examples only. The backbone holds the
    global weights W_t and is returned unchanged (the adapter is removed afterwards).
    """
    if job.train not in ("AB", "A", "B"):
        raise ValueError(f"job.train(={job.train!r}) must be 'AB', 'A' or 'B'")
    t0 = time.perf_counter()
    head = copy.deepcopy(head)
    head.requires_grad_(job.train_head)
    s = lora_scale(job.rank, job.alpha, settings.use_rslora)
    base = backbone.model
    own = job.layer is not None and not job.layer.peft_lora  # the method's own layer, not peft's LoRA
    restore: list[tuple[nn.Module, str, nn.Module]] = []  # own layers: modules swapped in place
    wrapped = None  # LoRA: the PeftModel around ``base``
    try:
        if own:
            model, params = base, []
            for name in backbone.targets:
                parent_name, _, child = name.rpartition(".")
                parent = base.get_submodule(parent_name)
                orig = getattr(parent, child)
                layer = job.layer.module(name, orig, job.start[name], s).to(backbone.device)
                setattr(parent, child, layer)
                restore.append((parent, child, orig))
                params += [p for p in layer.parameters() if p.requires_grad]
        else:
            model = wrapped = backbone.wrap(job.rank, job.alpha, settings.use_rslora)
            params = []
            with torch.no_grad():
                for j, (name, (m, n)) in enumerate(backbone.targets.items()):
                    layer = model.base_model.model.get_submodule(name)
                    f = None if job.start is None else job.start[name]
                    B, A = load_start(f, m, n, job.rank, s, stable_seed(settings.seed, "init", job.round, j))
                    layer.lora_B["default"].weight.copy_(B)
                    layer.lora_A["default"].weight.copy_(A)
                    wa, wb = layer.lora_A["default"].weight, layer.lora_B["default"].weight
                    wa.requires_grad_("A" in job.train)
                    wb.requires_grad_("B" in job.train)
                    params += [w for w in (wa, wb) if w.requires_grad]
        groups = [{"params": params, "lr": settings.lr}]
        if job.train_head:
            groups.append({"params": list(head.parameters()), "lr": settings.head_lr})
        opt = torch.optim.AdamW(groups, lr=settings.lr, weight_decay=settings.weight_decay)
        losses = []
        for idx in _batches(len(data), settings.steps, settings.batch_size,
                            stable_seed(settings.seed, "batches", job.round, job.client)):
            feats = backbone.features(model, data.batch(idx, backbone.device))
            loss = nn.functional.cross_entropy(head(feats.float()), labels[idx].to(backbone.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach().item())
        factors = {}
        with torch.no_grad():
            if own:
                for (parent, child, _), name in zip(restore, backbone.targets):
                    factors[name] = job.layer.upload(getattr(parent, child))
            else:
                for name in backbone.targets:
                    layer = model.base_model.model.get_submodule(name)
                    factors[name] = (layer.lora_B["default"].weight.detach().float().cpu().clone(),
                                     layer.lora_A["default"].weight.detach().float().cpu().clone())
    finally:
        for parent, child, orig in restore:
            setattr(parent, child, orig)
        if wrapped is not None:
            backbone.model = wrapped.unload()
    update = ClientUpdate(factors, scale=s, weight=float(len(data)), upload_rank=job.upload_rank)
    head_state = {k: v.detach().cpu().clone() for k, v in head.state_dict().items()} if job.train_head else None
    return LocalResult(update, head_state, float(np.mean(losses)) if losses else float("nan"),
                       time.perf_counter() - t0)
