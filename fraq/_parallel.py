"""Split a batch of small LAPACK calls across the CPU threads torch was given.

torch runs a batch of small factorizations (geqrf, eigh, ormqr) as a serial loop of
LAPACK calls, each too small for LAPACK's own threads to help: on 2 cores a batch of 36
QRs of 768 x 80 barely speeds up from 1 to 2 threads. Running slices of the batch in
Python threads (torch releases the GIL inside its operators) can use the other cores.

It is off by default and turned on with ``FRAQ_LAPACK_FANOUT=1``: on this project's
2-core machine a whole ``fraq.recompress`` of the RoBERTa-base preset at 2 threads took
the same time with and without it on a quiet machine (55.4 vs 55.4 ms median, 12
interleaved runs), and 3.6x longer with it when the other core was busy (each worker's
LAPACK call starts its own OpenMP team, oversubscribing the cores). On CUDA, with one
thread, or for a batch of one, the call always runs as is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["batch_map"]

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def _executor(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="fraq-batch")
            _pool_size = size
        return _pool


def batch_map(fn: Callable[..., object], *tensors: torch.Tensor) -> object:
    """``fn(*tensors)`` with the leading (batch) dimension split across CPU threads.

    ``fn`` must act independently on each batch entry and return a tensor or a tuple of
    tensors whose leading dimension is the batch; the slices' results are concatenated.
    The first tensor is a batch of matrices (*, rows, cols); an unbatched one (2-D) is
    passed through whole.
    """
    if tensors[0].dim() < 3 or os.environ.get("FRAQ_LAPACK_FANOUT") != "1":
        return fn(*tensors)
    nb = tensors[0].shape[0]
    workers = min(torch.get_num_threads(), nb)
    if workers < 2 or tensors[0].device.type != "cpu" or threading.current_thread().name.startswith("fraq-batch"):
        return fn(*tensors)
    bounds = [nb * i // workers for i in range(workers + 1)]
    pool = _executor(workers)
    futures = [pool.submit(fn, *(t[lo:hi] for t in tensors)) for lo, hi in zip(bounds, bounds[1:])]
    parts = [f.result() for f in futures]
    if isinstance(parts[0], tuple):
        return tuple(torch.cat(p, dim=0) for p in zip(*parts))
    return torch.cat(parts, dim=0)
