"""The host's share of a whole-model aggregate, tracked so a regression shows on any CPU.

On a GPU, once the math is fast, what is left of an aggregate is the host's: its device
synchronisations, its kernel launches and its Python. The first two are counts, the same
on every machine, taken on the CPU as in the CUDA configuration
(:mod:`benchmarks.measure.overhead`); the third is a ratio of two times taken in one run,
which a machine's speed cancels. Per preset (RoBERTa-base, LLaMA-3.2-3B: their modules and
clients) and method (FRAQ in the CUDA configuration, :data:`benchmarks.measure.overhead.CUDA_CONFIGURATION`:
the ``cholesky`` basis and the static pipeline; FLoRA, which
only stacks, the reference):

* ``track_host_reads``: host reads per shape group (docs/performance.md: the budget is 1);
* ``track_ops``: non-view aten ops per shape group (the budget is 35);
* ``track_python_ratio``: the method's Python time over FLoRA's on the same uploads at
  16 x 16 factors, interleaved call by call (the budget is 1; FLoRA's own row is 1).

Measured once per run in ``setup_cache``, at one thread.
"""

from __future__ import annotations

import functools

from benchmarks._suite import cached, measure_points, skip
from benchmarks.measure.overhead import CUDA_CONFIGURATION

PRESETS = ["roberta-base", "llama-3.2-3b"]
METHODS = {"fraq": dict(CUDA_CONFIGURATION), "flora": {}}
"""The methods tracked, with their options: FRAQ in the CUDA configuration."""

RATIO_REPEATS = 9
"""Interleaved calls per method whose medians make the ratio (a LLaMA call at 16 x 16 is
tens of milliseconds, so the run is about a second)."""


def _aggregator(method: str):
    from fraq.aggregators import get_aggregator

    return get_aggregator(method, **METHODS[method])


@functools.lru_cache(maxsize=None)
def _python_ms(preset: str, device: str) -> dict:
    """Every tracked method's Python time on ``preset``, from one interleaved run."""
    from benchmarks.measure.overhead import python_ms

    return python_ms({m: _aggregator(m) for m in METHODS}, preset, repeats=RATIO_REPEATS, device=device)


def _measure(preset: str, method: str, device) -> dict:
    from benchmarks.measure.overhead import per_group

    counts = per_group(_aggregator(method), preset, device=device)
    ms = _python_ms(preset, str(device))
    return {"host_reads_per_group": counts.host_reads_per_group, "ops_per_group": counts.ops_per_group,
            "python_ratio": ms[method] / ms["flora"]}


class Host:
    """Host reads, launches and Python time of one whole-model aggregate."""

    params = [PRESETS, list(METHODS)]
    param_names = ["preset", "method"]
    timeout = 600.0

    def setup_cache(self):
        return measure_points(self.params, _measure)

    def setup(self, cache, preset, method):
        if isinstance(cache.get((preset, method)), str):
            skip(cache[(preset, method)])

    track_host_reads = cached("host_reads_per_group", "reads",
                              "Host reads (device synchronisations) per shape group of one aggregate.")
    track_ops = cached("ops_per_group", "ops", "Non-view aten ops (kernel launches on a GPU) per shape group.")
    track_python_ratio = cached("python_ratio", "ratio",
                                "Python time over FLoRA's on the same uploads at 16 x 16 factors, interleaved.")
