"""Wall-clock timing with warm-up, repeats, median and spread.

On CUDA the timed region is bracketed by CUDA events and synchronized, so
asynchronous kernel launches are not mistaken for finished work. On the CPU it is
``time.perf_counter``. The thread count is recorded with every measurement: on a
2-core machine a 2-thread LAPACK call has been seen to slow 100x for minutes, so a
surprising number should be checked at 1 thread before it is believed.

The garbage collector is off while samples are taken (:func:`gc_off`, as the standard
library's ``timeit`` does): a collection triggered by one call's allocations would
otherwise land in whichever sample crosses the threshold. Before the block only the
youngest generation is collected (the set-up's fresh garbage, microseconds): a full
collection walks every object the process holds (about 200,000 with torch and the suite
imported, 90 ms on a 2.8 GHz Xeon), which timers called once per sample (Table 4's steps,
peft's merges) would pay hundreds of times per run, and with the collector off nothing is
collected inside a sample whatever the older generations hold.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import torch

__all__ = ["Timing", "balanced_order", "block_median", "timed", "gemm_rate", "gc_off", "round_robin", "sync", "threads"]


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one call, in seconds."""

    samples: tuple[float, ...]
    threads: int
    device: str

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def q25(self) -> float:
        return _quantile(self.samples, 0.25)

    @property
    def q75(self) -> float:
        return _quantile(self.samples, 0.75)

    @property
    def iqr(self) -> float:
        return self.q75 - self.q25

    @property
    def min(self) -> float:
        return min(self.samples)

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(median=self.median, q25=self.q25, q75=self.q75, min=self.min)
        return out

    def __str__(self) -> str:
        return f"{self.median * 1e3:.2f} ms (IQR {self.iqr * 1e3:.2f} ms, n={len(self.samples)}, {self.threads} thr)"


def _quantile(xs: tuple[float, ...], q: float) -> float:
    ys = sorted(xs)
    if len(ys) == 1:
        return ys[0]
    pos = q * (len(ys) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[int]:
    """Run the block with torch at ``n`` intra-op threads (None: unchanged), then restore."""
    before = torch.get_num_threads()
    if n is not None:
        if n < 1:
            raise ValueError(f"threads(={n}) must be >= 1")
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def gc_off() -> Iterator[None]:
    """Collect the youngest generation, then run the block with the garbage collector
    disabled; restore its state (module docstring: why not a full collection)."""
    was_enabled = gc.isenabled()
    gc.collect(0)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA); nothing elsewhere."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(
    fn: Callable[[], object],
    *,
    repeats: int = 7,
    warmup: int = 2,
    device: torch.device | str = "cpu",
    min_time: float = 0.0,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then at least ``repeats`` timed ones.

    If ``min_time`` > 0, timing continues until the samples add up to it. On CUDA each
    sample is measured with events on the device's current stream around the call, after
    the warm-up calls and a synchronize; the end event is waited for before the next call.
    """
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    sync(device)
    with gc_off():
        samples = _samples(fn, repeats, min_time, device)
    return Timing(tuple(samples), torch.get_num_threads(), str(device))


def _samples(fn: Callable[[], object], repeats: int, min_time: float, device: torch.device) -> list[float]:
    samples: list[float] = []
    while len(samples) < repeats or sum(samples) < min_time:
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            stream = torch.cuda.current_stream(device)
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return samples


def block_median(fn: Callable[[], object], seconds: float, min_calls: int = 5) -> float:
    """The median time of ``fn`` over a block of at least ``seconds`` and ``min_calls`` calls,
    after one untimed call (the first after a change of setting pays for it): one block of
    the benchmarks that alternate two settings block by block (``benchmarks.thread_scaling``,
    ``benchmarks.tall_products``)."""
    fn()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < min_calls:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def balanced_order(n: int, j: int) -> list[int]:
    """The order of n calls in round j: row j of a Williams design (Williams, Aust. J. Sci.
    Res. A 2, 1949), so that over every n rounds (2 n for an odd n) each call follows every
    other equally often.

    A call's time depends on what ran just before it: after a dense SVD of seconds the next
    call of a millisecond finds its code and data evicted and runs markedly slower than
    after a light call (docs/benchmarks.md, *Statistics*, has the measurement). An order
    merely rotated each round keeps every call behind the same predecessor, so that cost
    would fall on one method round after round; here it falls on each alike. Row 0 is 0, 1, n - 1, 2, n - 2, ...;
    row j adds j mod n; for an odd n, rows n .. 2 n - 1 are rows 0 .. n - 1 reversed."""
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    j %= n if n % 2 == 0 else 2 * n
    row = [(x + j) % n for x in first]
    return row if j < n else row[::-1]


def round_robin(calls: dict, repeats: int, device: torch.device | str = "cpu") -> dict:
    """Time each call ``repeats`` times in turn (in a balanced order, :func:`balanced_order`),
    after one warm-up each.

    Interleaving makes a machine whose speed drifts (shared or virtual cores) slow every
    call alike, so ratios between the calls hold where separate runs would not. Sample k
    of every key comes from round k: the samples are paired, and a verdict on their ratio
    should be judged per round (``analysis.verdicts.judge(..., paired=True)``). The
    garbage collector is off for all rounds. Returns ``{key: Timing}``.
    """
    keys = list(calls)
    for fn in calls.values():
        fn()
    samples = {k: [] for k in keys}
    device = torch.device(device)
    sync(device)
    with gc_off():
        for rep in range(repeats):
            for i in balanced_order(len(keys), rep):
                samples[keys[i]].append(_samples(calls[keys[i]], 1, 0.0, device)[0])
    return {k: Timing(tuple(v), torch.get_num_threads(), str(device)) for k, v in samples.items()}


def gemm_rate(size: int = 2048, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
              repeats: int = 5) -> float:
    """Measured matrix-multiply rate in FLOP/s on a ``size``^3 product (median of repeats)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=g, dtype=dtype).to(device)
    b = torch.randn(size, size, generator=g, dtype=dtype).to(device)
    t = timed(lambda: torch.matmul(a, b), repeats=repeats, warmup=1, device=device)
    return 2.0 * size**3 / t.median
