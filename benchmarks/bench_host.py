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

``RoundHost`` counts a round through the round buffer (every client's flat upload added,
then one aggregate; :mod:`benchmarks.measure.round_host`), per structure (the presets'
modules at 16 x 16 with equal clients, or at reduced sides as above) and configuration
(FRAQ as CUDA and the CPU resolve ``"auto"``, FRAQ with ``reads="call"``, FLoRA), all
counts, nothing timed (docs/performance.md, "The host budget of a round"):

* ``track_python_calls``: Python and builtin calls of the aggregate call (the host-time
  proxy; targets: at most 1.3x from 36 to 196 modules, at most 1.3x FLoRA's);
* ``track_python_calls_per_client``: the same of one client's add;
* ``track_host_reads``: host reads of the aggregate call (the target is 1);
* ``track_ops``: non-view aten ops of the aggregate call (the target is 35 per shape
  group plus 40);
* ``track_aten_ops``: every aten op the aggregate call dispatches, views included.
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


def _round(structure: str, preset: str, config: str, device) -> dict:
    from benchmarks.measure.round_host import aggregator, round_counts
    from benchmarks.measure.round_host import structure as shaped

    c = round_counts(aggregator(config), shaped(preset, structure), device=device)
    return {"python_calls": c.call.python_calls, "python_calls_per_client": c.per_client("python_calls"),
            "host_reads": c.call.host_reads, "ops": c.call.non_view_ops, "aten_ops": c.call.aten_ops}


class RoundHost:
    """Counts of one round through the round buffer: every client's flat upload, then one aggregate."""

    params = [["16x16", "reduced"], PRESETS, ["fraq-cuda", "fraq-cpu", "fraq-call", "flora"]]
    param_names = ["structure", "preset", "config"]
    timeout = 600.0

    def setup_cache(self):
        return measure_points(self.params, _round)

    def setup(self, cache, structure, preset, config):
        if isinstance(cache.get((structure, preset, config)), str):
            skip(cache[(structure, preset, config)])

    track_python_calls = cached("python_calls", "calls",
                                "Python and builtin calls of the aggregate call (sys.setprofile events).")
    track_python_calls_per_client = cached("python_calls_per_client", "calls",
                                           "Python and builtin calls of one client's add of its flat upload.")
    track_host_reads = cached("host_reads", "reads", "Host reads (device synchronisations) of the aggregate call.")
    track_ops = cached("ops", "ops", "Non-view aten ops (kernel launches on a GPU) of the aggregate call.")
    track_aten_ops = cached("aten_ops", "ops", "Every aten op the aggregate call dispatches, views included.")
