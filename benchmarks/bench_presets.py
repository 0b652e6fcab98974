"""Whole-model aggregation on the paper's model presets (Tables 1-3's latency column).

Each method aggregates every adapted module of the preset, one batched call per group of
equal-shape modules, at the energy threshold ``TAU`` (FlexLoRA truncates to the largest
client rank, its ``aggregate_batch`` default). Time, tensor peak memory, counted FLOPs, the
analytic model summed over the modules (Eq. 14), and the mean selected rank.
"""

from __future__ import annotations

import torch

from benchmarks.common import TAU, check_threads, preset_clients, skip
from fraq.measure.flops import analytic_flops, count_flops
from fraq.measure.memory import peak_memory
from fraq.measure.methods import BASELINES, get_method

PRESET_NAMES = ["roberta-base", "llama-3.2-3b", "llama-3.2-3b-hetero"]
METHODS = ["fraq", *BASELINES]


class Presets:
    """One federated round's server aggregation for a whole model."""

    params = [PRESET_NAMES, METHODS]
    param_names = ["preset", "method"]
    timeout = 600.0
    repeat = (1, 5, 60.0)
    rounds = 1

    def setup(self, preset, method):
        check_threads()
        if method == "flexlora" and preset != "roberta-base":
            skip("flexlora on LLaMA-3.2-3B: 196 dense SVDs of up to 3072 x 8192, ~30 min a round at one thread")
        from fraq.presets import PRESETS

        fn = get_method(method)
        spec = PRESETS[preset]
        groups = preset_clients(preset)
        scales = list(spec.scales)
        self.spec, self.groups = spec, groups
        # FlexLoRA's own rule is each client's rank (aggregate_batch's default), not tau.
        cut = {} if method == "flexlora" else {"tau": TAU}

        def aggregate():
            return [fn(list(Bs), list(As), scales=scales, **cut) for _, Bs, As in groups]

        self.call = aggregate

    def time_aggregate(self, preset, method):
        self.call()

    def track_peakmem(self, preset, method):
        return peak_memory(self.call).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, preset, method):
        return count_flops(self.call).total

    track_flops.unit = "flop"

    def track_flops_model(self, preset, method):
        """Eq. 14 with the ranks this method selected."""
        name, _, backend = method.partition(":")
        r = sum(self.spec.ranks)
        total = 0.0
        for (g, _, _), (_, _, p) in zip(self.groups, self.call()):
            ps = torch.as_tensor(p).reshape(-1).tolist()
            ps = ps * g.count if len(ps) == 1 else ps
            try:
                total += sum(analytic_flops(name, g.m, g.n, r, int(pi), backend=backend or "householder")
                             for pi in ps)
            except (NotImplementedError, ValueError):
                return float("nan")
        return total

    track_flops_model.unit = "flop"

    def track_mean_rank(self, preset, method):
        ranks = torch.cat([torch.as_tensor(p).reshape(-1).double() for _, _, p in self.call()])
        return float(ranks.mean())

    track_mean_rank.unit = "rank"
