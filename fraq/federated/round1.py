"""Round 1 trained once for the methods whose clients train it identically.

Every fresh adapter of round 1 is peft's initialization drawn from a seed of the round
and module that all clients and all methods share (:mod:`fraq.federated.client`), and no
method has aggregated anything yet. So FLoRA, FedEx-LoRA, FedIT, FlexLoRA, FLoRIST and
FRAQ at any tau train exactly the same round 1 from the same start: only what their
servers do with the uploads differs. A setting of nine methods trains round 1 three
times (those six and FRAQ's two taus together, LoRA-A² which trains B alone, FLoRG with
its own layer) instead of nine.

The reuse is decided by content, not by method names: :func:`signature` digests every
input of the clients' local training (the adapted weights W_1, the head, each client's
rank, alpha, component budget and the exact factors it starts from, what it trains, the
optimizer settings, the layer it trains). Two rounds with one signature run the same
computation on the same data (the task's partition, which the cache lives beside), so
reusing the first one's uploads gives the second method the bits it would have computed;
``tests/test_federated_round1.py`` checks that a whole run is identical with and without
the reuse. A method that differs in any input gets its own training.
"""

from __future__ import annotations

import hashlib

import torch

from fraq.federated.client import load_start, lora_scale
from fraq.federated.seeding import stable_seed

__all__ = ["signature"]


def _feed(h, t: torch.Tensor | None) -> None:
    if t is None:  # FLoRG's single-matrix adapter has no B
        h.update(b"none")
        return
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def signature(task, method, state, trains: str, train_head: bool) -> str:
    """The digest of every input of round ``state.round + 1``'s local training under ``method``.

    ``task``: the :class:`~fraq.federated.task.Task` (its clients' data are the same for
    every method of a partition); ``method``: the :class:`~fraq.federated.round_loop.MethodSetup`;
    ``state``: the :class:`~fraq.federated.state.RoundState` the round starts from.
    """
    layer = task.client_layer(method.agg)
    settings, plan = method.settings, method.plan
    h = hashlib.sha256()
    h.update(repr((type(layer).__module__, type(layer).__qualname__, layer.peft_lora, settings, trains,
                   train_head, state.round, plan.ranks, plan.alphas, plan.upload_ranks)).encode())
    targets = task.backbone.targets
    for name in targets:
        _feed(h, state.weights[name])
    for key in sorted(state.head):
        h.update(key.encode())
        _feed(h, state.head[key])
    t = state.round + 1
    for k, (rank, alpha) in enumerate(zip(plan.ranks, plan.alphas)):
        start = state.starts[k]
        s = lora_scale(rank, alpha, settings.use_rslora)
        for j, (name, (m, n)) in enumerate(targets.items()):
            f = None if start is None else start[name]
            if layer.peft_lora:  # what the client loads: a fresh draw and a shared fresh start are one
                B, A = load_start(f, m, n, rank, s, stable_seed(settings.seed, "init", t, j))
                _feed(h, B)
                _feed(h, A)
            elif f is None:
                h.update(b"fresh")
            else:
                h.update(repr((f.rank, f.scale)).encode())
                _feed(h, f.B)
                _feed(h, f.A)
    return h.hexdigest()
