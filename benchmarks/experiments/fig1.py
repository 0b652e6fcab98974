"""Fig. 1: per-client downlink against the number of clients K and the local rank r_k.

A model preset's first ``layers`` layers of every projection with K clients of rank r_k
(:func:`benchmarks.cases.build_model`), aggregated by the exact FLoRA stack and by FRAQ at
each energy threshold; the downlink is what :mod:`fraq.aggregators` counts, scaled to the
whole model. Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["fig1"]``.
"""

from __future__ import annotations

import functools

import torch

from benchmarks import cases
from benchmarks.experiments import Experiment
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, untimed=True, scale=0.21)

__all__ = ["key", "measure", "points"]


def points(size: str) -> list[dict]:
    c = size_config(size, "fig1")
    methods = [("flora", None)] + [("fraq", t) for t in c["taus"]]
    return [dict(figure="fig1", preset=c["preset"], method=name, tau=tau, clients=K, client_rank=rk,
                 layers=c["layers"])
            for K in c["clients"] for rk in c["client_ranks"] for name, tau in methods]


def cost(config: dict) -> float:
    """About 0.4 s per LLaMA layer (the downlink of one aggregation)."""
    return 0.4 * config["layers"]


def key(config: dict) -> str:
    c = config
    return f"{c['method']}-tau{c['tau']}-K{c['clients']}-r{c['client_rank']}"


@functools.lru_cache(maxsize=1)
def _model(preset: str, K: int, rk: int, layers: int):
    from fraq.presets import Preset, get_preset

    base = get_preset(preset)
    return cases.build_model(Preset(base.name, base.groups, ranks=(rk,) * K, alphas=(2.0 * rk,) * K), layers=layers)


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """Downlink parameters (measured layers and scaled to the model) and the ranks kept.
    Counting, not timing: it runs on the CPU whatever ``device``."""
    from fraq.aggregators import get_aggregator
    from fraq.presets import get_preset

    c = config
    model = _model(c["preset"], c["clients"], c["client_rank"], c["layers"])
    full_layers = max(g.count for g in get_preset(c["preset"]).groups)
    res = get_aggregator(c["method"], **({} if c["tau"] is None else {"tau": c["tau"]})).aggregate(model.updates())
    params = res.downlink_params(0)
    return dict(downlink_params_measured=int(params), downlink_params_full=float(params * full_layers / model.layers),
                flora_params_measured=int(model.flora_params()), layers_measured=model.layers,
                layers_full=full_layers,
                ranks=[int(v) if isinstance(v, int) else list(v) for v in res.ranks.values()])
