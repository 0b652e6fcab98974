"""Measurement helpers shared by the CLI, the asv suite and the pytest-benchmark checks.

Nothing in the core (``fraq.stack``, ``fraq.recompress``) imports from here.
"""

from fraq.measure.machine import machine_record
from fraq.measure.timing import Timing, gemm_rate, time_call

__all__ = ["Timing", "gemm_rate", "machine_record", "time_call"]
