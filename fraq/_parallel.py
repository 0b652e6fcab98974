"""Run a batch of small LAPACK calls as single-threaded calls spread over torch's threads.

torch runs a batched factorization (geqrf, eigh, ormqr, cholesky, triangular solves,
svd) as a serial loop of LAPACK calls, one per matrix. On the CPU each call gets MKL's
whole thread team, and for the small matrices of a LoRA stack (r x r Grams, d x r
panels) a team costs more than it saves: a batch of QRs of 768 x 80 panels runs
several times slower at two threads than at one. The rule here:

* a small batched LAPACK step runs every call on ONE thread, and chunks of the batch
  are handed out on demand to ``torch.get_num_threads()`` threads, the caller among
  them, so more threads never means slower: each thread does a share of independent
  serial work, and if the OS does not schedule a helper (a busy core) the caller
  simply takes its chunks. A batch whose work would not repay handing it to another
  thread, and a single matrix of any size, run on the caller, also on one thread
  (LAPACK's own team helps a large matrix only while all cores are idle, and costs
  many times its gain when one is busy);
* GEMM-shaped steps (matmul, bmm) keep all threads and do not go through this module.

How each call is kept on one thread, and why the alternatives fail (each was measured):

* The limit has to be per OS thread. torch's OpenMP backend reads the thread count from
  the calling thread's OpenMP ICV and sets MKL's thread-local count on each thread the
  first time torch runs there (``at::init_num_threads``). A Python worker therefore
  starts with torch's full count: without a limit, each worker's LAPACK call opens its
  own OpenMP team and the teams oversubscribe the cores (the earlier, opt-in version
  of this module, which became many times slower than one thread once other work
  shared the cores).
* What works: in each thread that runs chunks, after torch's per-thread initialisation,
  MKL's ``MKL_Set_Num_Threads_Local(1)`` (MKL then runs sequentially on that thread
  whatever its global count) and ``omp_set_num_threads(1)`` (libgomp keeps that ICV per
  thread; it stops torch's own ``parallel_for`` inside the op, e.g. the copy to
  column-major, from opening a team). Both are restored afterwards, so the caller's
  settings are unchanged. Neither touches process-wide state, so concurrent callers are
  safe.
* ``omp_set_num_threads(1)`` alone does not help (MKL's own thread-local count, set by
  torch, wins over the ICV), nor does threadpoolctl (it cannot see the MKL linked
  statically into libtorch_cpu, and limits only OpenMP and numpy's OpenBLAS).
  ``MKL_Set_Num_Threads_Local(1)`` alone leaves torch's ``parallel_for`` free to open
  teams from the workers.
* ``torch.set_num_threads(1)`` in a worker, or around the whole fan-out in the caller,
  does limit the calls, but it also writes process-wide state on every call (torch's
  global thread count, read by every thread torch initialises later; the QNNPACK pool
  size; it clears oneDNN's primitive cache), so it races with other Python threads.
* No torch op spreads a batch of LAPACK calls over threads: ``torch.vmap`` of a linalg
  op calls the same serial batched kernel (or a slower per-sample fallback, for ormqr).

The symbols are looked up once, in the process's loaded libraries (torch's own
libtorch_cpu and libgomp for the pip wheels). Where they are missing (a torch without
MKL, or with another OpenMP runtime) a per-thread limit cannot be guaranteed, and
:func:`batch_map` calls ``fn`` on the whole batch as is; so it does on CUDA and at one
thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["CHUNK_BYTES", "FANOUT_BYTES", "TEAM_WORK", "batch_map", "chunk_bounds", "fanout_available", "map_chunks",
           "one_thread", "over_chunks", "team_work", "whole_batch_threads"]

CHUNK_BYTES = 16 * 2**20
"""Working set a CPU chunk of a pipeline aims at (bytes), summed over its matrices (at
least one matrix per chunk); the caller says what one matrix needs.

Why chunks: a batched step writes its whole intermediate at once (H^T of 28 LLaMA-3.2-3B
up-projections is 58 MB), and an allocation that large is mapped fresh from the OS on
every call (glibc maps anything above 32 MB) and page-faulted in on first touch, which
costs about as much as the GEMM that fills it; a float32 -> float64 copy is several times
slower into fresh memory than into reused memory. Run chunk by chunk, each intermediate
is small enough for the allocator to hand back and reuse, and stays in cache for the
next step. A batch below the budget runs whole: chunks of small matrices only add
per-call overhead. On CUDA a batch always runs whole, in one synchronization."""

FANOUT_BYTES = 2 * 2**20
"""Working set (bytes, as for :data:`CHUNK_BYTES`) from which a CPU batch is shared by the
threads chunk by chunk, each chunk's whole pipeline on one thread. Below it the batch
runs whole, GEMMs on the BLAS threads when they are large enough to repay a thread team
(:data:`TEAM_WORK`), else on one thread: per-chunk calls would cost more than they share."""

TEAM_WORK = 8 * 10**6
"""Multiply-adds per matrix ((d + D) r^2 for the recompression, its Grams' and map back's
GEMMs) below which a CPU batch that runs whole runs on one thread (:func:`one_thread`):
waking an OpenMP team costs microseconds per op, and the ops of a small matrix (an r x r
Gram, an r x D product at r = 16) take little more, so the team made such calls slower
than one thread (docs/performance.md, "Threads"), breaking the rule that more threads
never make a call slower. Above it the GEMMs keep the team, which pays."""


@contextlib.contextmanager
def team_work(value: float):
    """:data:`TEAM_WORK` set to ``value`` inside the block, restored after: for a benchmark
    that compares the rule with another threshold in one run
    (``python -m benchmarks.thread_scaling --team-work``). Process-wide; not for use while
    other threads recompress."""
    global TEAM_WORK
    before, TEAM_WORK = TEAM_WORK, value
    try:
        yield
    finally:
        TEAM_WORK = before


_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_CHUNKS_PER_THREAD = 4  # chunks per thread: load balance against per-call overhead
# Fan out only when the rest of the batch would take longer than this on one thread. A
# hand-off costs tens of microseconds when the helper's core is idle, but up to a
# scheduler time slice (milliseconds) when it is busy, and the caller then waits for the
# helper's chunk: the rest must be worth several slices. Cheaper batches (r x r
# Cholesky factors of a RoBERTa-sized stack, say) stay on the caller, on one thread.
_FANOUT_SECONDS = 5e-3
_controls: tuple | None = None  # (set_mkl_local, omp_set, omp_get), or () when unavailable
# Where torch's MKL and OpenMP live: linked into libtorch_cpu / bundled libgomp in the pip
# wheels, separate MKL and OpenMP libraries in other builds.
_MKL_LIBS = ("libtorch_cpu.so", "libmkl_rt.so.2", "libmkl_rt.so", "libmkl_core.so.2", "libmkl_core.so")
_OMP_LIBS = ("libgomp.so.1", "libiomp5.so", "libomp.so")


def _symbol(name: str, libraries: tuple[str, ...]):
    """``name`` from the first of ``libraries`` this process has already loaded, or None.

    torch's own copy (in torch/lib) is tried first, then the library by its soname. Only
    loaded libraries count (RTLD_NOLOAD): a runtime torch does not use is never opened,
    since setting its counts would limit nothing.
    """
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    for lib in libraries:
        for candidate in (os.path.join(torch_lib, lib), lib):
            try:
                handle = ctypes.CDLL(candidate, mode=os.RTLD_NOLOAD)
            except OSError:
                continue
            fn = getattr(handle, name, None)
            if fn is not None:
                return fn
    return None


def _thread_controls() -> tuple:
    """ctypes handles of MKL's per-thread count and OpenMP's per-thread ICV, once."""
    global _controls
    with _lock:
        if _controls is None:
            _controls = ()
            if torch.backends.mkl.is_available() and torch.backends.openmp.is_available():
                # MKL_Set_Num_Threads_Local takes its count by value; the lower-case and
                # upper-case names are the Fortran entry points, which take a pointer.
                mkl = _symbol("MKL_Set_Num_Threads_Local", _MKL_LIBS)
                omp_set = _symbol("omp_set_num_threads", _OMP_LIBS)
                omp_get = _symbol("omp_get_max_threads", _OMP_LIBS)
                if mkl is not None and omp_set is not None and omp_get is not None:
                    mkl.argtypes, mkl.restype = [ctypes.c_int], ctypes.c_int
                    omp_set.argtypes, omp_set.restype = [ctypes.c_int], None
                    omp_get.argtypes, omp_get.restype = [], ctypes.c_int
                    _controls = (mkl, omp_set, omp_get)
        return _controls


def fanout_available() -> bool:
    """Whether this process can run LAPACK calls one thread each (MKL + OpenMP found)."""
    return bool(_thread_controls())


def _executor(size: int) -> ThreadPoolExecutor:
    """The shared pool, with room for ``size`` slices at once (threads start on demand).

    A larger request replaces the pool rather than shutting it down: a caller still
    holding the old one finishes on it, and its threads end once it is collected.
    """
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < size:
            _pool_size = max(size, os.cpu_count() or 1)
            _pool = ThreadPoolExecutor(max_workers=_pool_size, thread_name_prefix="fraq-batch")
        return _pool


@contextlib.contextmanager
def _one_thread():
    """This thread's MKL and OpenMP counts at 1 inside the block, restored after.

    torch's per-thread initialisation runs first (``torch.get_num_threads``), or it
    would reset both counts on this thread's first parallel op.
    """
    mkl_local, omp_set, omp_get = _thread_controls()
    torch.get_num_threads()
    omp_before = omp_get()
    mkl_before = mkl_local(1)  # returns this thread's previous local count (0: the global one)
    omp_set(1)
    try:
        yield
    finally:
        omp_set(omp_before)
        mkl_local(mkl_before)


@contextlib.contextmanager
def one_thread():
    """Inside the block, this thread's torch ops (copies included) and LAPACK/BLAS calls run
    on one thread, with no OpenMP team; the settings are restored after. A no-op where the
    MKL/OpenMP controls are missing. For small work between fanned-out steps: waking
    OpenMP's team for it costs more than it saves, and the team's spinning threads then
    compete with the next fan-out's helpers for the cores."""
    if not _thread_controls():
        yield
        return
    with _one_thread():
        yield


class _Chunks:
    """Contiguous batch chunks handed out one at a time to whichever thread asks first."""

    def __init__(self, fn: Callable[..., object], tensors: tuple[torch.Tensor, ...], bounds: list[int],
                 with_offset: bool = False):
        self.fn, self.tensors, self.with_offset = fn, tensors, with_offset
        self.bounds = bounds
        self.results: list[object] = [None] * (len(bounds) - 1)
        self.errors: list[tuple[int, BaseException]] = []
        self._next = 0
        self._lock = threading.Lock()

    def _take(self) -> int | None:
        with self._lock:
            if self.errors or self._next == len(self.results):
                return None
            self._next += 1
            return self._next - 1

    def drain(self, after_first: Callable[[float], None] | None = None) -> None:
        """Run chunks on one thread until none is left; ``after_first(seconds)`` once."""
        with _one_thread():
            while (i := self._take()) is not None:
                lo, hi = self.bounds[i], self.bounds[i + 1]
                start = time.perf_counter()
                try:
                    args = (*(t[lo:hi] for t in self.tensors), lo) if self.with_offset else (t[lo:hi] for t in self.tensors)
                    self.results[i] = self.fn(*args)
                except BaseException as e:  # noqa: BLE001 - raised by the caller once all threads stop
                    with self._lock:
                        self.errors.append((i, e))
                if after_first is not None:
                    after_first(time.perf_counter() - start)
                    after_first = None


def _join(parts: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate along the batch, keeping a batch of column-major matrices column-major."""
    first = parts[0]
    if first.dim() >= 3 and not first.is_contiguous() and first.mT.is_contiguous():
        return torch.cat([p.mT for p in parts], dim=0).mT
    return torch.cat(parts, dim=0)


def batch_map(fn: Callable[..., object], *tensors: torch.Tensor) -> object:
    """``fn(*tensors)`` with every LAPACK call on one thread, the batch spread over threads.

    ``fn`` must act independently on each batch entry and return a tensor or a tuple
    (named tuples included) of tensors whose leading dimension is the batch. The first
    tensor is a batch of matrices (b, rows, cols), or one matrix (rows, cols); the
    others share its leading b.

    With t = ``torch.get_num_threads()`` > 1, the batch is cut into up to 4 t contiguous
    chunks. The calling thread runs the first chunk on one thread (see the module
    docstring); if the rest would take more than ``_FANOUT_SECONDS`` at that pace, t - 1
    pool threads join it, and the threads take chunks in turn until none is left.
    Handing chunks out on demand keeps a thread the OS has not scheduled (a busy core)
    from holding the others up: at worst the caller runs every chunk itself, as a
    one-thread call would; a batch too small to repay a hand-off never leaves the
    caller. A single matrix runs on the caller on one thread too, whatever its size:
    LAPACK's own team gains on a large matrix only while every core is idle, and loses
    many times over when one is busy. On CUDA, at one thread, or without the
    MKL/OpenMP controls, ``fn`` is called as is.

    The results are concatenated in batch order, column-major matrices staying
    column-major, so each matrix comes out exactly as a one-thread call of ``fn``
    computes it. The caller's thread settings are restored, also when ``fn`` raises
    (the error of the earliest failing chunk is raised once all threads have stopped).
    """
    first = tensors[0]
    if first.device.type != "cpu" or first.dim() < 2 or torch.get_num_threads() < 2 or not _thread_controls():
        return fn(*tensors)
    nb = first.shape[0] if first.dim() > 2 else 1
    if nb < 2:
        with _one_thread():
            return fn(*tensors)
    count = min(nb, _CHUNKS_PER_THREAD * min(torch.get_num_threads(), nb))
    parts = _fan_out(fn, tensors, [nb * i // count for i in range(count + 1)])
    head = parts[0]
    if isinstance(head, tuple):
        joined = [_join(list(p)) for p in zip(*parts)]
        return type(head)(joined) if type(head) is not tuple else tuple(joined)
    return _join(parts)


def _fan_out(fn: Callable[..., object], tensors: tuple[torch.Tensor, ...], bounds: list[int], *,
             probe: bool = True, with_offset: bool = False) -> list[object]:
    """``fn`` on each chunk ``bounds[i]:bounds[i + 1]`` of the batch, one thread per call,
    spread over ``torch.get_num_threads()`` threads (see :func:`batch_map`); the results
    in batch order. With ``probe`` the helpers are recruited only if the first chunk,
    timed on the caller, says the rest is worth it; without, at once (the caller sized
    the chunks to be worth a hand-off). The earliest failing chunk's error is raised
    once all threads stop."""
    workers = min(torch.get_num_threads(), len(bounds) - 1)
    chunks = _Chunks(fn, tensors, bounds, with_offset)
    helpers = []

    def recruit(first_chunk_seconds: float) -> None:
        if first_chunk_seconds * (len(chunks.results) - 1) >= _FANOUT_SECONDS:
            pool = _executor(workers - 1)
            helpers.extend(pool.submit(chunks.drain) for _ in range(workers - 1))

    try:
        if not probe:
            recruit(math.inf)
        chunks.drain(after_first=recruit if probe else None)
    finally:
        for h in helpers:
            if not h.cancel():  # a helper that never started has nothing to finish
                h.result()
    if chunks.errors:
        raise min(chunks.errors, key=lambda e: e[0])[1]
    return chunks.results


def map_chunks(fn: Callable[..., object], bounds: list[int], *tensors: torch.Tensor,
               with_offset: bool = False) -> list[object]:
    """``[fn(*(t[lo:hi] for t in tensors)) for each chunk]``, the chunks run as :func:`batch_map` runs its own.

    ``bounds`` are the chunk edges along the leading (batch) dimension, ``0 = b_0 < b_1
    < ... < b_k = nb``; ``fn`` may return anything, and the list comes back in chunk
    order. This is for a whole pipeline run chunk by chunk: each chunk's intermediates
    stay small (cache-sized, and reused by the allocator instead of being mapped fresh
    from the OS and page-faulted in on every call), and with t = ``torch.get_num_threads()``
    > 1 the chunks are shared by t threads, every call inside a chunk (GEMMs included) on
    one thread, as :func:`batch_map` shares a batch of LAPACK calls, except that the
    helpers start at once: the caller sizes chunks so that each is worth a hand-off. A
    single chunk, a CUDA tensor, one thread, or a process without the MKL/OpenMP
    controls run the chunks in order on the caller with its own thread settings. With
    ``with_offset``, ``fn`` gets the chunk's first batch index as a last argument.
    """
    spans = list(zip(bounds[:-1], bounds[1:]))
    first = tensors[0]
    if len(spans) < 2 or first.device.type != "cpu" or torch.get_num_threads() < 2 or not _thread_controls():
        return [fn(*(t[lo:hi] for t in tensors), *((lo,) if with_offset else ())) for lo, hi in spans]
    return _fan_out(fn, tensors, bounds, probe=False, with_offset=with_offset)


def chunk_bounds(nb: int, item_bytes: int) -> list[int]:
    """Chunk edges of a CPU batch of ``nb`` matrices that need ``item_bytes`` of working set
    each: chunks of about :data:`CHUNK_BYTES` (at least one matrix); with t > 1 torch
    threads, at least t chunks when the batch has t matrices and :data:`FANOUT_BYTES` of
    work, so that every thread runs a share of the pipeline on one core."""
    count = max(1, math.ceil(nb * item_bytes / CHUNK_BYTES))
    threads = torch.get_num_threads()
    if threads > 1 and nb * item_bytes >= FANOUT_BYTES:
        count = max(count, threads)
    count = min(count, nb)
    return [nb * i // count for i in range(count + 1)]


def over_chunks(fn: Callable[..., object], join: Callable[[list, list[int]], object], item_bytes: int,
                *tensors: torch.Tensor, item_work: float = math.inf) -> object:
    """A batch pipeline applied from outside, the way scipy applies ``svd`` over a batch.

    ``fn(*tensors, offset)`` computes a batch (leading dimension nb) that starts at
    matrix ``offset`` of the caller's. On a CPU, a batch larger than one chunk
    (:func:`chunk_bounds`) runs chunk by chunk through :func:`map_chunks` and
    ``join(parts, bounds)`` assembles the chunks' results; otherwise (CUDA, one chunk)
    ``fn(*tensors, 0)`` runs whole, on the CPU on one thread (:func:`one_thread`) when
    ``item_work``, the multiply-adds of one matrix's GEMMs, is below :data:`TEAM_WORK`.
    """
    first = tensors[0]
    nb = first.shape[0]
    if first.device.type == "cpu" and nb > 1:
        bounds = chunk_bounds(nb, item_bytes)
        if len(bounds) > 2:
            return join(map_chunks(fn, bounds, *tensors, with_offset=True), bounds)
    if _small_work(first, item_work):
        with one_thread():
            return fn(*tensors, 0)
    return fn(*tensors, 0)


def whole_batch_threads(B: torch.Tensor, A: torch.Tensor) -> contextlib.AbstractContextManager:
    """The thread setting :func:`over_chunks` gives a batch it runs whole, for a method that
    recompresses stacks B (*, m, r), A (*, r, n) whole itself (the baselines): :func:`one_thread`
    where the batch is on the CPU, fits one chunk (:func:`chunk_bounds`, each matrix holding
    its stacks and two bases, 2 (m + n) r numbers) and its matrices need fewer than
    :data:`TEAM_WORK` multiply-adds each ((m + n) r^2, as FRAQ's), with more than one torch
    thread; else no change. The same rule as FRAQ's at the same shapes, so that no method's
    time at T threads carries a thread team FRAQ's does not (and more threads never make its
    call slower)."""
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    nb = math.prod(B.shape[:-2])
    if _small_work(B, (m + n) * r * r) and len(chunk_bounds(max(nb, 1), 2 * (m + n) * r * B.element_size())) == 2:
        return one_thread()
    return contextlib.nullcontext()


def _small_work(first: torch.Tensor, item_work: float) -> bool:
    """Whether a batch run whole, of matrices of ``item_work`` multiply-adds each, runs on one
    thread: on the CPU, with more than one torch thread, below :data:`TEAM_WORK`."""
    return first.device.type == "cpu" and item_work < TEAM_WORK and torch.get_num_threads() > 1
