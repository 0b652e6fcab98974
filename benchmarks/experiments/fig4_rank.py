"""Fig. 4 left: float32 fidelity against output rank p, per module.

LoRA-like updates of a model preset (:func:`benchmarks.cases.fidelity_modules`: the first
``layers`` layers of every module group; the saved real client adapters of a federated
round when ``FRAQ_ADAPTERS`` names one), each method cut to output rank p. Per matrix:
relative error against the float64 aggregate, the float64 Eckart-Young optimum at p, the
orthogonality of the adapter's basis side and the first-order metrics (principal angles
to the float64 subspaces, singular-value errors, their Wedin / Davis-Kahan bounds:
:mod:`benchmarks.measure.fidelity`). The sweep's largest ranks cut the LoRA-like spectra
(sigma_i ~ 0.85^i per client) where sigma_p / sigma_1 is below sqrt(eps32).
Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["fig4_rank"]``; the asv class
``bench_fidelity.RankFidelity`` reads the same :func:`measure`.

A method whose results are nested truncations (``MethodTraits.nested``: FlexLoRA's dense
SVD) is run once per group at the sweep's largest p (``p_max``) and cut to each p: one
dense SVD per module for every output rank, bit for bit the result of a call at p.
"""

from __future__ import annotations

import functools
import os

import torch

from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, untimed=True, scale=0.32,
                        gpu=(Priority(5, "Fig. 4: fidelity against the rank"),))

__all__ = ["chunk", "key", "measure", "points"]


def _modules(preset: str, layers: int | None) -> dict:
    """group -> (Bs, As, B, A, S, m, n): the clients, their exact stacks and float64 spectrum
    (``FRAQ_ADAPTERS``'s saved adapters when it is set)."""
    return _modules_of(preset, layers, os.environ.get("FRAQ_ADAPTERS"))


@functools.lru_cache(maxsize=1)
def _modules_of(preset: str, layers: int | None, adapters: str | None) -> dict:
    import fraq
    from fraq.reference import reference_svd

    out = {}
    for group, Bs, As, m, n in cases.fidelity_modules(preset, layers):
        B, A = fraq.stack(Bs, As)
        out[group] = (Bs, As, B, A, reference_svd(B, A), m, n)
    return out


@functools.lru_cache(maxsize=1)
def _largest(preset: str, layers: int | None, adapters: str | None, group: str, method: str, p_max: int,
             device: str):
    """A nested method's result on ``group`` at rank ``p_max``, kept while the sweep cuts it
    (the points of one group and method are consecutive)."""
    from benchmarks.measure.methods import get_method

    Bs, As = _modules_of(preset, layers, adapters)[group][:2]
    return get_method(method)(to_device(Bs, torch.device(device)), to_device(As, torch.device(device)), rank=p_max)


def points(size: str) -> list[dict]:
    """Every (group, method, p) of the ``size`` configuration, as result configs."""
    from benchmarks.measure.methods import traits

    c = size_config(size, "fig4_rank")
    out = []
    for group, (Bs, _, B, _, _, m, n) in _modules(c["preset"], c["layers"]).items():
        for method in c["methods"]:
            if traits(method).skip_reason(min(m, n)) is not None:
                continue
            for p in c["ranks"]:
                out.append(dict(figure="fig4_rank", preset=c["preset"], group=group, m=m, n=n, method=method, p=p,
                                p_max=max(c["ranks"]), layers=int(B.shape[0]), clients=len(Bs),
                                size_layers=c["layers"]))
    return out


def cost(config: dict) -> float:
    """The float64 error of every module (~7 us per row or column of each), plus a slow
    method's dense decomposition of the group: at every p, or for a nested method once,
    counted at p_max (the group's points run together, so the total is right)."""
    from benchmarks.experiments import dense_seconds
    from benchmarks.measure.methods import traits

    c, s = config, traits(config["method"])
    out = 0.2 + c["layers"] * (c["m"] + c["n"]) * 7e-6
    if s.slow and (not s.nested or c["p"] == c["p_max"]):
        out += dense_seconds(c["m"], c["n"], c["layers"])
    return out


def key(config: dict) -> str:
    return f"{config['group']}-{config['method']}-p{config['p']}"


def chunk(config: dict) -> str:
    """The points measured together when the runner splits them between processes
    (:func:`benchmarks.untimed.chunks`): one group and method, whose nested method's dense
    decomposition at ``p_max`` serves every p (:func:`_largest`)."""
    return f"{config['group']}-{config['method']}"


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """Per-matrix relative error, optimum and orthogonality of one (group, method, p)."""
    from benchmarks.measure import fidelity
    from benchmarks.measure.methods import get_method

    from benchmarks.measure.methods import traits

    c = config
    Bs, As, B, A, S, _, _ = _modules(c["preset"], c["size_layers"])[c["group"]]
    device = torch.device(device)
    if traits(c["method"]).nested and c["p"] <= c.get("p_max", c["p"]):
        Bg, Ag, rank = _largest(c["preset"], c["size_layers"], os.environ.get("FRAQ_ADAPTERS"), c["group"],
                                c["method"], c["p_max"], str(device))
        p = c["p"]
        Bg, Ag = Bg[..., :p], Ag[..., :p, :]
        rank = torch.clamp(rank, max=p) if isinstance(rank, torch.Tensor) else min(rank, p)
    else:
        Bg, Ag, rank = get_method(c["method"])(to_device(Bs, device), to_device(As, device), rank=c["p"])
    rank = rank.cpu() if isinstance(rank, torch.Tensor) else rank
    f = fidelity(B, A, Bg.cpu(), Ag.cpu(), rank, reference=S)
    return dict(relative_error=f.relative_error.tolist(), optimal_error=f.optimal_error.tolist(),
                excess_quadrature=f.excess_quadrature.tolist(), orthogonality=f.orthogonality.tolist(),
                **f.first.as_dict())
