"""Measurement helpers shared by the CLI, the asv suite and the pytest-benchmark checks.

One implementation of each measurement, so both suites measure the same things the same
way: :mod:`~fraq.measure.timing` (warm-up, repeats, median and spread, threads, CUDA
events), :mod:`~fraq.measure.memory` (tensor peak memory above the inputs),
:mod:`~fraq.measure.flops` (counted FLOPs with LAPACK formulas; the analytic
model is :mod:`fraq.flops`), :mod:`~fraq.measure.fidelity` (error against float64 Eckart-Young),
:mod:`~fraq.measure.methods` (every compared method on one calling convention),
:mod:`~fraq.measure.ablation` (Table 4's variants) and :mod:`~fraq.measure.machine`.

Nothing in the core (``fraq.stack``, ``fraq.recompress``) imports from here.
"""

from fraq.measure.fidelity import Fidelity, fidelity
from fraq.measure.flops import FlopCount, count_flops
from fraq.measure.machine import machine_record
from fraq.measure.memory import MemoryPeak, peak_memory, tensor_bytes
from fraq.measure.timing import Timing, gemm_rate, threads, time_call

__all__ = [
    "Fidelity",
    "FlopCount",
    "MemoryPeak",
    "Timing",
    "count_flops",
    "fidelity",
    "gemm_rate",
    "machine_record",
    "peak_memory",
    "tensor_bytes",
    "threads",
    "time_call",
]
