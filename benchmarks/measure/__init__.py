"""Measurement helpers shared by every suite: asv, pytest-benchmark, the runner, the experiments.

One implementation of each measurement, so both suites measure the same things the same
way: :mod:`~benchmarks.measure.timing` (warm-up, repeats, median and spread, threads, CUDA
events), :mod:`~benchmarks.measure.memory` (tensor peak memory above the inputs),
:mod:`~benchmarks.measure.flops` (counted FLOPs with LAPACK formulas; the analytic
model is :mod:`fraq.flops`), :mod:`~benchmarks.measure.fidelity` (error against float64 Eckart-Young),
:mod:`~benchmarks.measure.methods` (every compared method on one calling convention),
:mod:`~benchmarks.measure.ablation` (Table 4's variants), :mod:`~benchmarks.measure.host_reads`,
:mod:`~benchmarks.measure.ops` and :mod:`~benchmarks.measure.overhead` (a whole-model aggregate's device
synchronisations, kernel launches and Python time, counted on any CPU),
:mod:`~benchmarks.measure.python_calls` and :mod:`~benchmarks.measure.round_host` (a round through the
round buffer counted per client and per call, Python calls standing for host time); the machine record
is :mod:`fraq._machine`.

Nothing in ``fraq`` imports from here, and nothing here imports more of ``fraq`` at import
time than its long-standing public modules, so that :mod:`benchmarks.regress` can import
the suite against older commits (a newer name is looked up when it is used). No module-level name here starts with ``time_``,
``track_``, ``mem_`` or ``peakmem_``: asv would collect it as a benchmark.
"""

from benchmarks.measure.fidelity import Fidelity, fidelity
from benchmarks.measure.flops import FlopCount, count_flops
from benchmarks.measure.memory import MemoryPeak, peak_memory, tensor_bytes
from benchmarks.measure.timing import Timing, gemm_rate, round_robin, threads, timed

__all__ = [
    "Fidelity",
    "FlopCount",
    "MemoryPeak",
    "Timing",
    "count_flops",
    "fidelity",
    "gemm_rate",
    "peak_memory",
    "round_robin",
    "tensor_bytes",
    "threads",
    "timed",
]
