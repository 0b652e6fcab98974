"""The clients' partitions of a data set's training examples.

:func:`partition`: Dirichlet(alpha) over labels (the paper's 0.1 and 0.02), pathological
one-task-per-client, or an equal random split, all seeded; :func:`partition_summary`
prints each client's label mix.
"""

from __future__ import annotations

import numbers
import os

import numpy as np

__all__ = ["partition", "partition_summary"]


def partition(labels: np.ndarray, clients: int, *, scheme: str = "dirichlet", alpha: float = 0.1,
              tasks: list[str] | None = None, min_size: int = 10, seed: int = 42) -> list[np.ndarray]:
    """Split example indices across ``clients``; one sorted int64 index array per client.

    Schemes:
        ``"dirichlet"``: for every label, proportions q ~ Dir(alpha * 1_K) and counts
            ~ Multinomial(n_label, q) split that label's examples across the K clients; redrawn (up to 1000 times) until every
            client has at least ``min_size`` examples. Small alpha: few labels per client.
        ``"pathological"``: one task per client (``tasks`` per example, e.g. the generated
            corpus's domains or the reasoning benchmarks), tasks in sorted order; with
            more tasks than clients, client k takes tasks k, k + K, ...
        ``"iid"``: a seeded random equal split.

    Every example goes to exactly one client.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients(={clients!r}) must be a positive int")
    if clients > labels.size:
        raise ValueError(f"clients(={clients}) exceeds the number of examples ({labels.size})")
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(labels.size), clients)]
    if scheme == "pathological":
        if tasks is None:
            raise ValueError("scheme='pathological' needs a task per example (dataset.task_column)")
        if len(tasks) != labels.size:
            raise ValueError(f"tasks has {len(tasks)} entries for {labels.size} examples")
        names = sorted(set(tasks))
        if len(names) < clients:
            raise ValueError(f"scheme='pathological' gives one task per client, but there are {len(names)} tasks "
                             f"for clients(={clients})")
        owner = {t: i % clients for i, t in enumerate(names)}
        who = np.array([owner[t] for t in tasks])
        return [np.flatnonzero(who == k) for k in range(clients)]
    if scheme != "dirichlet":
        raise ValueError(f"scheme(={scheme!r}) must be 'dirichlet', 'pathological' or 'iid'")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not alpha > 0:
        raise ValueError(f"alpha(={alpha!r}) must be a positive number")
    if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 0:
        raise ValueError(f"min_size(={min_size!r}) must be an int >= 0")
    if min_size * clients > labels.size:
        raise ValueError(f"min_size(={min_size}) * clients(={clients}) exceeds the {labels.size} examples")
    classes = np.unique(labels)
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            q = rng.dirichlet(np.full(clients, float(alpha)))
            counts = rng.multinomial(idx.size, q)  # unbiased; flooring cumulative cuts favours the last client
            for k, piece in enumerate(np.split(idx, np.cumsum(counts)[:-1])):
                parts[k].extend(piece.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise RuntimeError(f"no Dirichlet(alpha={alpha}) draw in 1000 gave every client >= {min_size} examples; "
                       f"lower min_size or raise alpha")


def partition_summary(parts: list[np.ndarray], labels: np.ndarray, label_names: list[str], top: int = 4) -> str:
    """One line per client: its size, how many labels it holds, and its largest labels."""
    labels = np.asarray(labels)
    lines = []
    for k, idx in enumerate(parts):
        counts = np.bincount(labels[idx], minlength=len(label_names))
        order = np.argsort(-counts, kind="stable")
        held = int((counts > 0).sum())
        mix = ", ".join(f"{label_names[c]} {counts[c]}" for c in order[:top] if counts[c] > 0)
        more = f", +{held - top} more" if held > top else ""
        lines.append(f"client {k:>2}: {idx.size:>5} examples, {held:>3} labels: {mix}{more}")
    return os.linesep.join(lines)
