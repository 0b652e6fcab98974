r"""Roofs that are limits: each kernel a call runs, timed alone at its own shapes and data.

A roofline that divides a model's FLOPs by the rate of a large GEMM is a bound only for a
call made of large GEMMs. A recompression is a few GEMMs and then LAPACK reductions
(``geqrf``, ``syevd``, ``gesdd``) that are half BLAS-2, on small r x r problems where a
kernel's fixed cost is its cost. This module measures the limits the call's own kernels
set, on this machine:

- **Kernels.** :func:`kernel_roofs` runs the call once under a dispatch mode that sees
  every aten op (one kernel on the CPU, one or a few launches on a GPU) with its real
  arguments. Right after each op it times that op again, alone, on the same inputs (a
  copy of any argument the op writes, made outside the timed region): the best of
  several samples, each a loop long enough to read a clock (:data:`MIN_SAMPLE`). That
  time is the op's FLOPs over its own rate at its own shapes, the **per-kernel FLOP
  term**; the FLOPs come from the formulas of :mod:`benchmarks.measure.flops` (LAPACK
  counted at the routines torch calls).
- **Bytes.** Each op's bytes moved: every distinct tensor it reads or writes, once
  (``numel * element_size``; views move nothing). The **bytes term** is those bytes over
  the copy bandwidth measured at that working-set size (:func:`copy_bandwidth`: a
  ``copy_`` between two buffers of a power-of-two size, read + write counted, the best
  rate at any ladder size at or above the op's size rounded down, so a working set that
  fits a cache level is credited with that level's speed, never DRAM's).
- **The roof** of the call is the sum over its kernels of the larger of the two terms:
  the call runs its kernels one after another, and none can run faster than it runs
  alone, warm, at its own shapes, nor move its bytes faster than a copy of that size.
  It is a limit in that sense. It leaves out what happens between kernels (Python,
  dispatch of views, allocation), which is the call's overhead above the roof.
- **The GEMM-rate bound**, kept beside it: the counted FLOPs over the rate of a large
  float32 GEMM (:func:`benchmarks.measure.gemm_rate`) measured in the same process. It is
  the classic roofline's compute roof, and a bound only in the sense that no kernel
  beats GEMM's rate; for a reduction-heavy call it is far below the roof above.

Kernel times are kept in a per-machine table (:class:`RateTable`, a JSON file keyed by
op, shapes, strides, dtype, device and threads), and a remeasured kernel keeps the best
time ever seen: a floor stays a floor when a later run is loaded, and tightens when one
is idle. Data-dependent kernels (``syevd``'s deflation, ``gesdd``) are keyed by shape, so
the table's time is the fastest data of that shape measured here (a looser floor, never a
tighter one than the data allow). ``FRAQ_KERNEL_TABLE`` names the file; the default is
``$XDG_CACHE_HOME/fraq/kernels/<machine>.json`` (:func:`table_path`, which the runner calls
before measuring).

A caller that measures many calls sharing kernels (Tables 1-3's rows: the same stacks'
QRs at two thresholds, one op repeated per module) passes ``once=True``: a kernel the
table object has already timed (in this process) takes the table's time and is not timed
again, so each distinct kernel is timed once per process; the floor then tightens on a
later run, as every run times it once.

Random ops are replayed with their generators' states saved and restored, so timing
never changes what the call computes.

References: Williams, Waterman and Patterson, "Roofline: an insightful visual performance
model", CACM 52(4), 2009 (doi:10.1145/1498765.1498785), where each roof is a measured
ceiling of the machine; McCalpin's STREAM ``copy`` for the bandwidth.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from benchmarks.measure.timing import sync
from fraq.internals import replacing_file

__all__ = ["Kernel", "RateTable", "Roofs", "copy_bandwidth", "kernel_roofs", "process_table", "table_path"]

MIN_SAMPLE = 2e-3
"""Seconds one timed sample lasts at least (a loop of calls of a short kernel)."""

SAMPLES = 5
"""Samples per kernel; the best is kept (a floor)."""

SLOW = 0.25
"""A kernel that takes longer than this once is sampled twice more, not looped."""

LADDER = tuple(4**k * 4096 for k in range(9))
"""Copy sizes (bytes) of the bandwidth ladder: 4 KiB to 256 MiB by factors of 4."""


@dataclass(frozen=True)
class Kernel:
    """One aten op of a call: FLOPs, bytes moved, its best time alone (s), and its terms."""

    op: str
    shapes: tuple
    dtype: str
    flops: float
    bytes: int
    seconds: float
    flop_term: float
    bytes_term: float

    @property
    def roof(self) -> float:
        return max(self.flop_term, self.bytes_term)


@dataclass(frozen=True)
class Roofs:
    """A call's limits (seconds) on this machine: see the module docstring.

    Attributes:
        kernels: every non-view op dispatched, in order.
        views: view and metadata ops dispatched (no kernel, no bytes).
        flops: counted FLOPs (LAPACK included).
        bytes: bytes moved, summed over kernels.
        flop_roof: sum of the per-kernel FLOP terms (each op's FLOPs over its own rate).
        bytes_roof: sum of the bytes terms.
        roof: sum over kernels of the larger term: the call's roof.
        isolated: sum of every kernel's time alone (FLOP-free ones included).
        gemm_rate: FLOP/s of the large GEMM measured in this process.
        gemm_bound: ``flops / gemm_rate``.
    """

    kernels: tuple
    views: int
    flops: float
    bytes: int
    flop_roof: float
    bytes_roof: float
    roof: float
    isolated: float
    gemm_rate: float
    gemm_bound: float

    def as_dict(self, kernels: bool = False) -> dict:
        """The result-file payload (seconds); ``kernels=True`` adds one row per kernel."""
        out = {k: getattr(self, k) for k in ("views", "flops", "bytes", "flop_roof", "bytes_roof", "roof", "isolated",
                                             "gemm_rate", "gemm_bound")}
        out["kernel_count"] = len(self.kernels)
        if kernels:
            out["kernels"] = [dict(asdict(k), shapes=[list(s) for s in k.shapes]) for k in self.kernels]
        return out


def _slug(device: torch.device) -> str:
    from fraq.internals import machine_record

    m = machine_record(device)
    text = json.dumps({k: m.get(k) for k in ("cpu", "cores", "blas", "torch", "gpu", "cuda")}, sort_keys=True,
                      allow_nan=False)
    name = "".join(c if c.isalnum() else "-" for c in (m.get("gpu") or m.get("cpu") or "machine"))[:40].strip("-")
    return f"{name}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"


TABLE_ENV = "FRAQ_KERNEL_TABLE"
"""The environment variable naming the kernel table's file."""


def table_path(device: torch.device | str = "cpu") -> Path:
    """The per-machine kernel table's file, checked before anything is measured (a table
    that cannot be saved would be found only after the first point's measurements, and a
    rerun would meet it again):

    - ``FRAQ_KERNEL_TABLE`` when set: ValueError naming it when it is a directory or
      something else that is not a file, or when its directory cannot be created or
      written (the run was told where the table goes: it is not moved elsewhere);
    - else ``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/fraq/kernels/<machine>.json``, and when
      that directory cannot be created or written (a read-only or missing home), a
      temporary table shared by this user's processes (``$TMPDIR/fraq-kernels-<uid>``),
      with one warning naming both, as the benchmark input cache does
      (:func:`benchmarks.cases.cache_dir`).
    """
    env = os.environ.get(TABLE_ENV)
    if env:
        from fraq.internals import check_file_target

        return check_file_target(env, TABLE_ENV)
    return _table_dir() / f"{_slug(torch.device(device))}.json"


def process_table(device: torch.device | str = "cpu") -> RateTable:
    """This machine's table (:func:`table_path`) as one :class:`RateTable` per file in this
    process, so that :func:`kernel_roofs` with ``once`` times each kernel once per process
    however many calls share it; each call's end saves it (merged into the file)."""
    return _table_at(table_path(device))


@functools.lru_cache(maxsize=None)
def _table_at(path: Path) -> RateTable:
    return RateTable(path)


def _table_dir() -> Path:
    """The default table directory, created, or the temporary one (:func:`table_path`)."""
    try:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fraq" / "kernels"
    except RuntimeError as e:  # no home directory to find
        return _fallback(None, f"cannot be found ({e})")
    return _writable_or_fallback(root)


@functools.lru_cache(maxsize=None)
def _writable_or_fallback(root: Path) -> Path:
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK | os.X_OK):
            return root
        reason = "is not writable"
    except OSError as e:
        reason = f"cannot be created ({e.strerror})"
    return _fallback(root, reason)


@functools.lru_cache(maxsize=None)
def _fallback(root: Path | None, reason: str) -> Path:
    """The temporary table directory, with one warning per process naming why."""
    fallback = Path(tempfile.gettempdir()) / f"fraq-kernels-{os.getuid() if hasattr(os, 'getuid') else 0}"
    try:
        fallback.mkdir(exist_ok=True)
    except OSError as e:
        raise ValueError(f"the kernel table directory {root} {reason}, and {fallback} cannot be created either "
                         f"({e.strerror}): set {TABLE_ENV} to a writable file path") from None
    print(f"benchmarks: warning: the kernel table directory {root} ({TABLE_ENV} unset) {reason}; keeping the "
          f"table in {fallback} instead", file=sys.stderr, flush=True)
    return fallback


MIN_KERNEL_S = 1e-7
"""The fewest seconds a table entry may hold: one aten op called from Python costs about a
microsecond of dispatch alone (a GPU launch several), so 100 ns is a tenth of any real
kernel's time; a smaller entry (a unit slip, a hand edit) would make every roof it enters
a fiction, and since the table keeps minima it would never be measured again."""

MAX_KERNEL_S = 1e4
"""The most seconds an entry may hold (a kernel of nearly three hours is not a floor)."""

MAX_COPY_BYTES_S = 1e14
"""The fastest copy an entry may imply, bytes read and written per second: 100 TB/s, over
twenty times an H200's HBM3e and far above any cache level's bandwidth a copy of the
ladder's smallest size could see."""


def plausible(key: str, seconds: float) -> bool:
    """Whether ``seconds`` can be a time of the table's entry ``key``: finite, within
    [:data:`MIN_KERNEL_S`, :data:`MAX_KERNEL_S`], and for a copy (``copy|<bytes>|...``) no
    faster than :data:`MAX_COPY_BYTES_S`."""
    if not (math.isfinite(seconds) and MIN_KERNEL_S <= seconds <= MAX_KERNEL_S):
        return False
    if key.startswith("copy|"):
        try:
            size = int(key.split("|")[1])
        except (IndexError, ValueError):
            return False
        return 2 * size / seconds <= MAX_COPY_BYTES_S
    return True


class RateTable:
    """Best kernel and copy times seen on this machine: ``key -> seconds``, kept at their minimum.

    ``path=None`` keeps the table in memory only. :meth:`save` writes beside and swaps the
    file in whole; a table that cannot be read is started afresh (it only holds floors), and
    an entry that cannot be a time (:func:`plausible`) is discarded on reading, with one
    line naming the file. ``timed`` holds the keys this object has been given a measured
    time for (:meth:`put`), as opposed to those read from its file: what
    :func:`kernel_roofs`' ``once`` reuses.
    """

    def __init__(self, path: Path | str | None = None):
        self.path = None if path is None else Path(path)
        self.best: dict[str, float] = {}
        self.timed: set[str] = set()
        if self.path is not None and self.path.is_file():
            best = _entries(self.path)
            bad = {k: v for k, v in best.items() if not plausible(k, v)}
            if bad:
                k, v = next(iter(bad.items()))
                print(f"warning: the kernel table {self.path} holds {len(bad)} impossible time(s) (e.g. {k!r}: {v!r} s; "
                      f"a kernel takes {MIN_KERNEL_S:g} to {MAX_KERNEL_S:g} s, a copy moves at most "
                      f"{MAX_COPY_BYTES_S:g} B/s); they are discarded and measured again", file=sys.stderr, flush=True)
            self.best = {k: v for k, v in best.items() if k not in bad}

    def get(self, key: str) -> float | None:
        return self.best.get(key)

    def put(self, key: str, seconds: float) -> float:
        """Record a time measured now for ``key``; returns the best time the table holds."""
        self.timed.add(key)
        return self._keep(key, seconds)

    def _keep(self, key: str, seconds: float) -> float:
        best = min(seconds, self.best.get(key, math.inf))
        self.best[key] = best
        return best

    def save(self) -> None:
        """Merge this table into its file: under an exclusive lock (a file beside it), the
        file's entries are read again and each key keeps the smaller time, so two processes
        saving at once lose nothing; written beside and swapped in whole, through a
        symbolic link to its target (the link stays a link)."""
        if self.path is None:
            return
        target = Path(os.path.realpath(self.path))
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.with_name(f".{target.name}.lock")):
            for k, v in _entries(target).items():
                if plausible(k, v):
                    self._keep(k, v)
            with replacing_file(target) as tmp:
                tmp.write_text(json.dumps({"best": self.best}, sort_keys=True, allow_nan=False))


def _entries(path: Path) -> dict[str, float]:
    """Every entry of the table file ``path`` as written (none when it cannot be read)."""
    try:
        return {k: float(v) for k, v in json.loads(path.read_text())["best"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive advisory lock on ``path`` (created) for the block; no lock where
    ``fcntl`` is absent (Windows), where a lost entry only costs its measurement again."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _best(run: Callable[[], object], device: torch.device, prepare: Callable[[], object] | None = None,
          min_sample: float = MIN_SAMPLE, samples: int = SAMPLES) -> float:
    """Best seconds of one ``run()`` (already warm): ``samples`` looped samples of at least
    ``min_sample``, or, when each run needs fresh inputs from ``prepare()``, single runs after it."""
    def once(arg) -> float:
        sync(device)
        t0 = time.perf_counter()
        run() if arg is None else run(arg)
        sync(device)
        return time.perf_counter() - t0

    if prepare is not None:
        return min(once(prepare()) for _ in range(samples))
    first = once(None)
    if first >= SLOW:
        return min(first, once(None), once(None))
    loops = max(1, math.ceil(min_sample / max(first, 1e-7)))
    best = first
    for _ in range(samples):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(loops):
            run()
        sync(device)
        best = min(best, (time.perf_counter() - t0) / loops)
    return best


def copy_bandwidth(nbytes: int, device: torch.device | str = "cpu", table: RateTable | None = None) -> float:
    """Bytes per second a copy achieves for a working set of ``nbytes`` here: the best rate
    over the :data:`LADDER` sizes at or above ``nbytes`` rounded down to the ladder (read and
    write both counted). The rate never falls as the set shrinks, so a kernel is credited
    with the cache level its data could sit in."""
    device = torch.device(device)
    table = table if table is not None else RateTable()
    floor = max([s for s in LADDER if s <= max(nbytes, LADDER[0])])
    best = 0.0
    for size in (s for s in LADDER if s >= floor):
        key = f"copy|{size}|{device.type}|{torch.get_num_threads()}"
        t = table.get(key)
        if t is None:
            src = torch.ones(size // 4, dtype=torch.float32, device=device)
            dst = torch.empty_like(src)
            dst.copy_(src)
            t = table.put(key, _best(lambda: dst.copy_(src), device))
            del src, dst
        best = max(best, 2 * size / t)
    return best


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _moved(args, kwargs, out) -> int:
    seen, total = set(), 0
    for t in _tensors((args, kwargs)) + _tensors(out):
        key = (t.device, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def _written(func) -> list[int]:
    """Positions (in the schema's argument list) of the arguments ``func`` writes."""
    return [i for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


class _Recorder(TorchDispatchMode):
    """Runs each op, then times it again alone on its own inputs (see the module docstring)."""

    def __init__(self, device: torch.device, table: RateTable, formulas: dict, min_sample: float = MIN_SAMPLE,
                 samples: int = SAMPLES, once: bool = False):
        super().__init__()
        self.device, self.table, self.formulas, self.min_sample = device, table, formulas, min_sample
        self.samples, self.once = samples, once
        self.kernels: list[tuple] = []
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view or not _tensors(out) and func.overloadpacket is not torch.ops.aten._local_scalar_dense:
            self.views += 1
            return out
        flops = 0.0
        f = self.formulas.get(func.overloadpacket)
        if f is not None:
            flops = float(f(*args, **kwargs, out_val=out))
        inputs = _tensors((args, kwargs))
        shapes = tuple(tuple(t.shape) for t in inputs)
        dtype = str(inputs[0].dtype) if inputs else str(_tensors(out)[0].dtype)
        key = "|".join([str(func), str(shapes), str(tuple(tuple(t.stride()) for t in inputs)), dtype,
                        self.device.type, str(torch.get_num_threads())])
        if self.once and key in self.table.timed:
            seconds = self.table.get(key)
        else:
            seconds = self.table.put(key, self._time(func, args, kwargs))
        self.kernels.append((str(func.overloadpacket), shapes, dtype, flops, _moved(args, kwargs, out), seconds))
        return out

    def _time(self, func, args, kwargs) -> float:
        gens = [g for g in tree_leaves((args, kwargs)) if isinstance(g, torch.Generator)]
        seeded = torch.Tag.nondeterministic_seeded in func.tags
        states = ([g.get_state() for g in gens], torch.random.get_rng_state(),
                  torch.cuda.get_rng_state_all() if seeded and torch.cuda.is_initialized() else None)
        try:
            written = _written(func)
            if not written:
                return _best(lambda: func(*args, **kwargs), self.device, min_sample=self.min_sample,
                             samples=self.samples)
            names = [func._schema.arguments[i].name for i in written]

            def prepare():
                a = [x.clone() if i in written and isinstance(x, torch.Tensor) else x for i, x in enumerate(args)]
                k = {n: (v.clone() if n in names and isinstance(v, torch.Tensor) else v) for n, v in kwargs.items()}
                return a, k

            return _best(lambda ak: func(*ak[0], **ak[1]), self.device, prepare, samples=self.samples)
        finally:
            for g, s in zip(gens, states[0]):
                g.set_state(s)
            torch.random.set_rng_state(states[1])
            if states[2] is not None:
                torch.cuda.set_rng_state_all(states[2])


def kernel_roofs(fn: Callable[[], object], device: torch.device | str = "cpu", table: RateTable | None = None,
                 gemm_rate: float | None = None, min_sample: float = MIN_SAMPLE, *, samples: int = SAMPLES,
                 once: bool = False, gemm: bool = True) -> Roofs:
    """Run ``fn()`` once (warm: call it once before), timing each of its kernels alone, and
    return its :class:`Roofs` at the current torch thread count.

    ``table``: the per-machine :class:`RateTable` (default: an in-memory one); saved at the
    end. ``gemm_rate``: FLOP/s of a large float32 GEMM measured in this process (measured
    here when not given). ``min_sample``: seconds of one looped sample (shorter is quicker
    and noisier: the clock's resolution and the loop's own overhead weigh more). ``samples``:
    samples per kernel, the best kept (fewer is quicker and a looser floor for this run; the
    table keeps the best over runs). ``once``: a kernel ``table`` has already timed
    (:attr:`RateTable.timed`) is not timed again (module docstring). ``gemm=False``: no
    large GEMM is measured, and ``gemm_rate`` and ``gemm_bound`` are NaN (a caller that
    reads the roof alone saves the GEMM's second or two). The dispatch mode sees the calling
    thread only: a call that fans its batch out over Python threads (:mod:`fraq._parallel`)
    should be measured at one torch thread, where it does not.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples(={samples!r}) must be an integer >= 1")
    from torch.utils.flop_counter import flop_registry, shape_wrapper

    from benchmarks.measure.flops import LAPACK_FORMULAS
    from benchmarks.measure.timing import gc_off
    from benchmarks.measure.timing import gemm_rate as measure_gemm

    device = torch.device(device)
    table = table if table is not None else RateTable()
    formulas = {**flop_registry, **{k: shape_wrapper(v) for k, v in LAPACK_FORMULAS.items()}}
    rec = _Recorder(device, table, formulas, min_sample, samples, once)
    with gc_off():
        with rec:
            fn()
        sync(device)
        kernels = []
        for op, shapes, dtype, flops, moved, seconds in rec.kernels:
            bytes_term = moved / copy_bandwidth(moved, device, table) if moved else 0.0
            kernels.append(Kernel(op, shapes, dtype, flops, moved, seconds, seconds if flops > 0 else 0.0, bytes_term))
    rate = math.nan if not gemm else gemm_rate if gemm_rate is not None else measure_gemm(2048, device=device)
    table.save()
    total = sum(k.flops for k in kernels)
    return Roofs(kernels=tuple(kernels), views=rec.views, flops=total, bytes=sum(k.bytes for k in kernels),
                 flop_roof=sum(k.flop_term for k in kernels), bytes_roof=sum(k.bytes_term for k in kernels),
                 roof=sum(k.roof for k in kernels), isolated=sum(k.seconds for k in kernels), gemm_rate=rate,
                 gemm_bound=total / rate)
