"""Peak memory of the tensors a call allocates above its inputs.

This is the figure the paper's Fig. 3 and Table 4 report (server workspace), not the
process's resident set: asv's own ``peakmem_`` benchmarks measure the RSS of the whole
Python process, torch's libraries and thread pools included, which hides a 100 MiB
workspace under a 400 MiB baseline. Here only tensor storage counts.

- CUDA: ``torch.cuda.reset_peak_memory_stats`` before the call, then
  ``max_memory_allocated - memory_allocated(before)``. The caching allocator's counters
  are exact for tensor storage; cuBLAS/cuSOLVER workspaces that bypass it are not seen.
  CuPy (``fraq.recompress``'s ``eigensolver="cupy"`` route, CUDA's default where CuPy
  imports) allocates from its own pool, which torch does not count: when CuPy is
  imported, its default pool's free blocks are released before the call and the bytes
  the pool holds after it are added (``outside``). A pool keeps every block it allocated
  until released, so that is at least CuPy's peak within the call; added to torch's peak
  it bounds the two together from above (their peaks need not coincide).
- CPU: the profiler with ``profile_memory=True`` records one ``[memory]`` event per
  allocation and free of torch's CPU allocator, with a signed byte count. Summing them in
  time order and taking the running maximum gives the exact peak. The aggregated
  ``prof.events()`` / ``key_averages()`` view does not: it folds each operator's
  allocations and frees into one net number per op, so a temporary allocated and freed
  inside an op (LAPACK workspace) disappears. LAPACK workspace that ATen allocates as a
  tensor (``geqrf``, ``gesdd``, ``syevd`` work arrays) is counted; memory a BLAS library
  mallocs internally is not, on either device.

Threads (CPU): the profiler's memory events are recorded per thread, and torch 2.13's
``profile_all_threads`` option records none at all, so allocations made by work fanned
out to Python threads (``fraq._parallel.batch_map`` splits a batch of LAPACK calls
across threads when torch has more than one) would be missed. The call is therefore
measured at one thread by default (``single_thread=True``): tensor sizes do not depend on
the thread count, only how many batch slices are live at once, which moves the peak by
at most the outputs' concatenation.

The inputs are whatever exists before the call; the outputs the call returns are
allocated inside it and so are counted, as the paper's workspace figures count them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

__all__ = ["MemoryPeak", "peak_memory", "tensor_bytes", "mib"]


@dataclass(frozen=True)
class MemoryPeak:
    """Tensor memory a call allocated above what existed before it, in bytes.

    Attributes:
        peak: largest amount live at once during the call.
        net: still allocated when the call returned (its outputs, and anything cached).
        allocated: total of all allocations (churn), >= peak.
        device: "cpu" or "cuda:i".
        outside: of ``peak``, the bytes held by CuPy's memory pool after the call (CUDA
            with CuPy imported; module docstring), 0 elsewhere.
    """

    peak: int
    net: int
    allocated: int
    device: str
    outside: int = 0

    @property
    def peak_mib(self) -> float:
        return mib(self.peak)

    def as_dict(self) -> dict:
        return {"peak": self.peak, "net": self.net, "allocated": self.allocated, "device": self.device,
                "outside": self.outside}


def mib(nbytes: float) -> float:
    return nbytes / 2**20


def tensor_bytes(*tensors: torch.Tensor) -> int:
    """Bytes of storage the tensors' elements occupy (numel * itemsize, views counted in full)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def peak_memory(fn: Callable[[], object], *, device: torch.device | str = "cpu",
                single_thread: bool = True) -> MemoryPeak:
    """Run ``fn()`` once and return the peak tensor memory it allocated above its inputs.

    The result of ``fn`` is dropped after the measurement. Run it once beforehand if the
    first call populates caches (the CUDA allocator's pool does not affect these counts,
    but lazily built constants would). ``single_thread`` (CPU only): run at one torch
    thread so that work fanned out to Python threads is seen (see the module docstring).

    The garbage collector is off while ``fn`` runs: a collection inside the call would free
    the garbage of earlier calls and move the count by what that held, and the call's own
    garbage counts as what it allocated, as it stays allocated until a collection. (A full
    collection before each call would cost about 75 ms with torch and the suite imported,
    more than most calls measured; with it the counts come out the same on the sweeps' points.)
    """
    from benchmarks.measure.timing import threads

    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device(={device}) must be cpu or cuda")
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if device.type == "cuda":
            return _peak_cuda(fn, device)
        with threads(1 if single_thread else None):
            return _peak_cpu(fn)
    finally:
        if was_enabled:
            gc.enable()


def _peak_cuda(fn, device: torch.device) -> MemoryPeak:
    torch.cuda.synchronize(device)
    pool = _cupy_pool(device)
    if pool is not None:
        pool.free_all_blocks()
        used0 = pool.used_bytes()
    base = torch.cuda.memory_allocated(device)
    churn0 = torch.cuda.memory_stats(device).get("allocated_bytes.all.allocated", 0)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    net = torch.cuda.memory_allocated(device) - base
    churn = torch.cuda.memory_stats(device).get("allocated_bytes.all.allocated", 0) - churn0
    outside = 0
    if pool is not None:
        outside = max(int(pool.total_bytes()) - int(used0), 0)
        net += int(pool.used_bytes()) - int(used0)
    del out
    return MemoryPeak(peak=int(peak) + outside, net=int(net), allocated=int(churn) + outside, device=str(device),
                      outside=outside)


def _cupy_pool(device: torch.device):
    """CuPy's default memory pool on ``device`` when CuPy is imported already (a call that
    uses it imported it), else None."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    with cupy.cuda.Device(index):
        return cupy.get_default_memory_pool()


def _memory_deltas(prof) -> list[int]:
    """Signed byte counts of the CPU allocator's [memory] events, in time order."""
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    # Stable sort on the timestamp keeps the recorded order of same-instant events.
    events.sort(key=lambda e: e.start_ns())
    return [e.nbytes() for e in events]


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null for the block: the profiler's C++ library prints
    "USDT ... profiler_start/stop" there on every start and stop, and no log level stops it.
    Only the profiler's start and stop run inside, never the measured call."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _peak_cpu(fn) -> MemoryPeak:
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        prof.__enter__()
    try:
        out = fn()
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    # The result is still referenced here, so the events end with it live: their sum is
    # what the call left allocated.
    deltas = _memory_deltas(prof)
    del out
    live = peak = allocated = 0
    for nb in deltas:
        live += nb
        if nb > 0:
            allocated += nb
        peak = max(peak, live)
    return MemoryPeak(peak=int(peak), net=int(live), allocated=int(allocated), device="cpu")
