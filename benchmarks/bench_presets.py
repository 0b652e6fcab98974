"""Whole-model aggregation on the paper's model presets: Tables 1-3's latency column.

Every row of :mod:`benchmarks.experiments.tables123` (every aggregator, FRAQ and FLoRIST
at their thresholds), named by its spec (``method``: ``fraq:tau=0.95``,
:class:`~benchmarks.experiments.table_rows.TableRow`), on every preset of size :data:`benchmarks.sizes.ASV`: the same
prepared calls the runner times (:func:`~benchmarks.experiments.tables123.method_job`),
with the same skips (a method not applicable to a preset's ranks, or too slow for the
size). ``time_aggregate`` times one federated round's server aggregation of the measured
layers; ``track_downlink_pct`` is the downlink per client as a percentage of the FLoRA
stack; ``track_peakmem`` and ``track_flops`` the tensor peak memory and counted FLOPs of
the same call.
"""

from __future__ import annotations

import functools

import torch

from benchmarks._suite import prepare, skip
from benchmarks.experiments import tables123
from benchmarks.sizes import ASV, size_config

_C = size_config(ASV, "tables123")


def _specs() -> list[str]:
    from fraq.presets import get_preset

    out = []
    for name in _C["presets"]:
        out += [str(m) for m in tables123.table_rows(get_preset(name)) if str(m) not in out]
    return out


@functools.lru_cache(maxsize=1)
def _model(preset: str, device: str):
    return tables123.model_for(preset, quick=_C["quick"], device=device)


class Presets:
    """One federated round's server aggregation for a whole model (its measured layers)."""

    params = [list(_C["presets"]), _specs()]
    param_names = ["preset", "method"]
    timeout = 900.0
    repeat = (1, 5, 60.0)
    rounds = 1

    def setup(self, preset, method):
        from fraq.presets import get_preset

        self.device = prepare()
        rows = {str(m): m for m in tables123.table_rows(get_preset(preset))}
        if method not in rows:
            skip(f"{method} is not a row of {preset}'s table")
        job = tables123.method_job(preset, _model(preset, str(self.device)), rows[method], quick=_C["quick"])
        if isinstance(job, str):
            skip(job)
        self.job = job
        calls = [fn for fn, _ in job.calls]
        self.call = lambda: [fn() for fn in calls]

    def time_aggregate(self, preset, method):
        self.call()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def track_peakmem(self, preset, method):
        """Tensor peak memory above the inputs of one aggregation."""
        from benchmarks.measure import peak_memory

        return peak_memory(self.call, device=self.device).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, preset, method):
        """Counted FLOPs (LAPACK included) of one aggregation."""
        from benchmarks.measure import count_flops

        return count_flops(self.call).total

    track_flops.unit = "flop"

    def track_downlink_pct(self, preset, method):
        """Parameters sent per client, as a percentage of the FLoRA stack's."""
        return self.job.row["downlink_pct"]

    track_downlink_pct.unit = "percent"
