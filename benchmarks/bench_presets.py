"""Whole-model aggregation on the paper's model presets (Tables 1-3's latency column).

Each method aggregates every adapted module of the preset, one batched call per group of
equal-shape modules, at the energy threshold ``TAU`` (FlexLoRA truncates to the largest
client rank, its ``aggregate_batch`` default). Time, tensor peak memory, counted FLOPs, the
analytic model summed over the modules (Eq. 14), and the mean selected rank.
"""

from __future__ import annotations

import torch

from benchmarks._suite import cached, prepare, skip
from benchmarks.cases import PRESET_NAMES, TAU, check_threads, preset_clients
from benchmarks.device import DeviceUnavailable, checked, to_device
from benchmarks.measure.flops import count_flops
from benchmarks.measure.memory import peak_memory
from benchmarks.measure.methods import BASELINES, default_backend, default_factored, get_method, spec

METHODS = ["fraq", *BASELINES]


def _skip_reason(preset: str, method: str) -> str | None:
    from fraq.presets import PRESETS

    reason = spec(method).skip_reason(max(min(g.m, g.n) for g in PRESETS[preset].groups))
    if reason is not None:
        return reason
    try:
        get_method(method)
    except NotImplementedError as exc:
        return str(exc)
    return None


def _aggregator(preset: str, method: str, device: torch.device):
    """(groups, spec, zero-argument callable aggregating the whole model on ``device``)."""
    from fraq.presets import PRESETS

    fn = get_method(method)
    spec = PRESETS[preset]
    groups = [(g, to_device(Bs, device), to_device(As, device)) for g, Bs, As in preset_clients(preset)]
    scales = list(spec.scales)
    # A method with its own rank rule (FlexLoRA: each client's rank) is not given tau.
    cut = {"tau": TAU} if spec(method).energy_rule else {}

    def aggregate():
        return [fn(list(Bs), list(As), scales=scales, **cut) for _, Bs, As in groups]

    return groups, spec, aggregate


def _measure_once(call, device: torch.device):
    """One run of ``call`` giving its selected ranks, counted FLOPs and tensor peak memory:
    the memory measurement runs inside FlopCounterMode, both on the calling thread."""
    outs, peaks = [], []
    flops = count_flops(lambda: peaks.append(peak_memory(lambda: outs.append(call()), device=device)))
    return outs[0], flops.total, peaks[0].peak


class Presets:
    """One federated round's server aggregation for a whole model.

    A heterogeneous-rank round takes 25 s (FRAQ) to 60 s (FLoRIST) at one thread, so
    everything but the timing comes from a single measured run per (preset, method) in
    ``setup_cache``: selected ranks (for Eq. 14 and the mean rank), counted FLOPs and
    tensor peak memory.
    """

    params = [list(PRESET_NAMES), METHODS]
    param_names = ["preset", "method"]
    timeout = 900.0
    repeat = (1, 5, 60.0)
    rounds = 1

    def setup_cache(self):
        check_threads()
        try:
            device = checked()
        except DeviceUnavailable as exc:  # every combination skips with the reason (setup raises)
            return {(p, m): str(exc) for p in PRESET_NAMES for m in METHODS}
        cache = {}
        for preset in PRESET_NAMES:
            for method in METHODS:
                reason = _skip_reason(preset, method)
                if reason is not None:
                    cache[(preset, method)] = reason
                    continue
                groups, spec, aggregate = _aggregator(preset, method, device)
                outs, flops, peak = _measure_once(aggregate, device)
                ranks = [(g.m, g.n, g.count, torch.as_tensor(p).reshape(-1).expand(g.count).tolist())
                         for (g, _, _), (_, _, p) in zip(groups, outs)]
                every = [p for *_, ps in ranks for p in ps]
                cache[(preset, method)] = {"ranks": ranks, "flops": flops, "peak": peak,
                                           "mean_rank": sum(every) / len(every)}
        return cache

    def setup(self, cache, preset, method):
        if isinstance(cache[(preset, method)], str):
            skip(cache[(preset, method)])
        self.device = prepare()
        self.groups, self.spec, self.call = _aggregator(preset, method, self.device)

    def time_aggregate(self, cache, preset, method):
        self.call()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    track_peakmem = cached("peak", "bytes", "Tensor peak memory above the inputs of one whole-model aggregation.")
    track_flops = cached("flops", "flop", "Counted FLOPs (LAPACK included) of one whole-model aggregation.")
    track_mean_rank = cached("mean_rank", "rank", "Mean output rank over the model's modules.")

    def track_flops_model(self, cache, preset, method):
        """Eq. 14, the model with the code's constants (FRAQ with the backend it ran), at the
        ranks this method selected."""
        from fraq.flops import model_flops

        r = sum(self.spec.ranks)
        groups = [(m, n, count) for m, n, count, _ in cache[(preset, method)]["ranks"]]
        ranks = [p for *_, ps in cache[(preset, method)]["ranks"] for p in ps]
        return model_flops(groups, method, r, ranks, backend=default_backend(self.device),
                           factored=method == "fraq" and default_factored())

    track_flops_model.unit = "flop"

    def track_flops_table5(self, cache, preset, method):
        """Eq. 14 with the paper's Table 5 formula, at the same ranks."""
        from fraq.flops import model_flops

        r = sum(self.spec.ranks)
        groups = [(m, n, count) for m, n, count, _ in cache[(preset, method)]["ranks"]]
        ranks = [p for *_, ps in cache[(preset, method)]["ranks"] for p in ps]
        return model_flops(groups, method, r, ranks, model="table5")

    track_flops_table5.unit = "flop"
