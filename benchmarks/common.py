"""Seeded, cached inputs shared by every benchmark, and the suite's fixed settings.

Data is built here and nowhere else, in ``setup``, never in a timed body. The generators
are :mod:`fraq.synthetic`'s LoRA-like clients (decaying spectra, partly shared subspaces)
with fixed seeds. Generating them takes far longer than aggregating them (70 s for the
heterogeneous LLaMA preset), and asv runs every benchmark in a fresh process, so they are
cached twice: on disk under ``FRAQ_BENCH_CACHE`` (default ``.asv/cache``, git-ignored),
keyed by the arguments and a digest of the generator's source, and in memory per
process (asv re-runs ``setup`` before every sample). Every commit the regression workflow
measures therefore sees the same inputs, unless ``fraq/synthetic.py`` itself changed.

Threads: every benchmark runs torch at ``FRAQ_BENCH_THREADS`` threads (default 1), set in
its ``setup``. On the 2-core machine this suite was written on, 2-thread LAPACK calls slow
down erratically when another process competes for the cores (a batched SVD measured 5x
slower at 2 threads than at 1, with an IQR as large as its median), which would be
recorded as a regression; one thread is the stable default. The thread count is part of
the asv machine name the regression workflow records under (``benchmarks/regress.py``).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os

import torch

THREADS = int(os.environ.get("FRAQ_BENCH_THREADS", "1"))

DTYPE = torch.float32

# Fig. 3: total stacked rank r at d = 768, and hidden size d at r = 80 (10 clients of
# rank 8 is RoBERTa's r = 80). Modules are square d x d, L of them: one projection
# across RoBERTa-base's 12 layers.
SWEEP_MODULES = 12
SWEEP_D = 768
SWEEP_RANKS = [16, 64, 256]
SWEEP_R = 80
SWEEP_DIMS = [256, 768, 4096]
SWEEP_P = 8
"""Output rank in the sweeps: fixed, so every method does the same work at every point."""

BACKEND_POINTS = ["d768-r16", "d768-r80", "d768-r256", "d4096-r80"]
"""(d, r) points where every backend runs: the rank sweep's ends and RoBERTa's r = 80 at
d = 768, and the hidden sweep's largest d."""

CACHE_DIR = os.environ.get("FRAQ_BENCH_CACHE") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".asv", "cache")

FLEXLORA_MAX_D = 768
"""FlexLoRA forms each d x D aggregate and runs a dense SVD, O(D d^2): 12 modules take
~5 s a call at d = 768 and one thread, about 5 minutes at d = 4096. Larger d is skipped."""

TAU = 0.95
"""Energy threshold of the preset benchmarks (the paper's main setting)."""


def _warm_up() -> None:
    """Pay the measurement layer's one-time costs here, once, not in every benchmark.

    asv's forkserver imports this module once and forks a process per benchmark; the
    first FlopCounterMode in a process imports torch's dispatch machinery (~6 s), which
    would otherwise be paid by every ``track_flops``.
    """
    from fraq.measure.flops import count_flops

    a = torch.ones(2, 2)
    count_flops(lambda: a @ a)


_warm_up()


def check_threads() -> None:
    """Set torch to THREADS threads: every ``setup`` and ``setup_cache`` calls this first
    (importing the suite changes nothing, so tests can import it)."""
    if torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)


@functools.lru_cache(maxsize=1)
def _generator_digest() -> str:
    import fraq.synthetic

    return hashlib.sha1(inspect.getsource(fraq.synthetic).encode()).hexdigest()[:12]


def _disk_cached(tag: str, build):
    """``build()`` saved to (and later loaded from) CACHE_DIR/<tag>-<digest>.pt."""
    path = os.path.join(CACHE_DIR, f"{tag}-{_generator_digest()}.pt")
    if os.path.exists(path):
        return torch.load(path)
    obj = build()
    os.makedirs(CACHE_DIR, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    return obj


@functools.lru_cache(maxsize=4)
def clients(m: int, n: int, ranks: tuple[int, ...], batch: int, seed: int = 0) -> tuple[tuple, tuple]:
    """K clients' factors for ``batch`` modules of shape m x n: (Bs, As) tuples of
    (batch, m, r_k) and (batch, r_k, n) tensors in :data:`DTYPE`."""
    from fraq.synthetic import lora_clients

    def build():
        Bs, As = lora_clients(m, n, list(ranks), batch=(batch,), seed=seed, dtype=DTYPE)
        return list(Bs), list(As)

    tag = f"clients-{m}x{n}-r{'_'.join(map(str, ranks))}-b{batch}-s{seed}"
    if len(tag) > 120:
        tag = f"clients-{m}x{n}-{hashlib.sha1(tag.encode()).hexdigest()[:12]}-b{batch}-s{seed}"
    Bs, As = _disk_cached(tag, build)
    return tuple(Bs), tuple(As)


@functools.lru_cache(maxsize=4)
def stacks(m: int, n: int, ranks: tuple[int, ...], batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact weighted stacks (uniform weights) of :func:`clients`."""
    import fraq

    Bs, As = clients(m, n, ranks, batch, seed)
    return fraq.stack(list(Bs), list(As))


def sweep_ranks(r: int) -> tuple[int, ...]:
    """Clients of rank 8 adding up to r (a last smaller client when 8 does not divide r)."""
    ranks = [8] * (r // 8)
    if r % 8:
        ranks.append(r % 8)
    return tuple(ranks)


@functools.lru_cache(maxsize=1)
def preset_clients(name: str, seed: int = 0) -> list[tuple[object, tuple, tuple]]:
    """Per module group of preset ``name``: (group, Bs, As), Bs[k] of shape (count, m, r_k)."""
    from fraq.presets import PRESETS

    preset = PRESETS[name]
    return [(g, *clients(g.m, g.n, tuple(preset.ranks), g.count, seed + i)) for i, g in enumerate(preset.groups)]


def skip(reason: str):
    """asv's skip: NotImplementedError raised from ``setup``."""
    raise NotImplementedError(reason)
