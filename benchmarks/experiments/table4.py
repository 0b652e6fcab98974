"""Table 4: the ablation. Adaptive vs fixed orientation, Gram vs coordinate SVD.

``modules`` LLaMA-3.2-3B-shaped gate/up projections (m x n), ``clients`` clients of rank
``client_rank``, output rank p, one batched call per variant
(:mod:`benchmarks.measure.ablation`; ``library`` is :func:`fraq.recompress` itself on the
same stacks). Per variant: latency (every variant in the same paired rounds over
``launches`` processes, this one and fresh ones, :mod:`benchmarks.measure.paired`), tensor
peak memory and the resident set's growth over a first and a second call in a process that
has run nothing else (its cross-check,
:func:`benchmarks.measure.rss.rss_growth`), the relative error against the
coordinate-SVD product (the paper's error column), the error above the float64
Eckart-Young optimum and the first-order metrics (principal angles to the float64
subspaces against the Wedin bound: :mod:`benchmarks.measure.fidelity`). The Gram
variants are the paper's configuration (product Gram, eigensolver in the input dtype);
``library`` is the library default (Gram form by cost, float64 eigensolver). Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["table4"]``; the asv
class ``bench_ablation.Table4`` and the pytest-benchmark checks call the same :func:`call`
and :func:`metrics`. The paper's numbers are ``analysis/paper.json``'s, read by the analysis.
"""

from __future__ import annotations

import functools

import torch

from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, scale=0.96, gpu=(Priority(3, "Table 4"),))

__all__ = ["GROUP", "LAUNCH_SECONDS", "call", "cost", "group", "group_calls", "key", "measure", "metrics", "points",
           "prepare_points", "timing_cost"]


def points(size: str) -> list[dict]:
    from benchmarks.measure.ablation import VARIANT_NAMES

    c = size_config(size, "table4")
    return [dict(figure="table4", variant=v, compared=list(VARIANT_NAMES), **c) for v in VARIANT_NAMES]


GROUP = "benchmarks.experiments.table4:group_calls"
"""The builder of the variants' calls in every launch (:func:`benchmarks.measure.paired.launched`)."""


def group(config: dict) -> dict:
    """The point's group: its config without the variant (the variants are ``compared``)."""
    return {k: v for k, v in config.items() if k != "variant"}


def group_calls(group: dict, device: torch.device | str = "cpu") -> dict:
    """Every compared variant's call on the same stacks."""
    from benchmarks.measure.ablation import variant_calls

    calls = variant_calls(*to_device(_stacks(group), torch.device(device)), group["p"])
    return {v: calls[v] for v in group["compared"]}


def prepare_points(configs: list[dict], device: torch.device | str = "cpu", on_group=None) -> None:
    """The variants' paired timing (every variant in the same rounds over ``launches``
    processes: this one, then fresh ones); ``on_group(points)`` with the points of a group
    once its timing is complete (the runner's progress advances by their :func:`timing_cost`)."""
    from benchmarks.measure.paired import measure_groups

    for c in configs:
        mine = [x for x in configs if group(x) == group(c)]
        measure_groups(GROUP, [group(c)], rounds=c["rounds"], launches=c["launches"], device=device, here=True,
                       on_group=None if on_group is None else (lambda g, mine=mine: on_group(mine)))


LAUNCH_SECONDS = 8.0
"""A launch of the paired timing before its rounds, at the reduced size on one idle core:
an interpreter's start with torch and the suite imported, and the stacks built."""


def _call_seconds(config: dict) -> float:
    """About 20 ms per 8192 x 3072 module and call."""
    c = config
    return 0.02 * c["modules"] * c["m"] * c["n"] / (8192 * 3072)


def timing_cost(config: dict) -> float:
    """The share of :func:`cost` spent in the paired timing: the point's share of the
    fresh launches (:data:`LAUNCH_SECONDS` each, shared by the compared variants; launch 0 runs
    in this process) and its calls (a warm-up per launch and one per round)."""
    c = config
    return ((c["launches"] - 1) * LAUNCH_SECONDS / len(c["compared"])
            + _call_seconds(c) * c["launches"] * (c["rounds"] + 1))


def cost(config: dict) -> float:
    """The paired timing's (:func:`timing_cost`), the metrics' two calls and the resident-set
    check's two (in a child forked from the measuring server, :mod:`benchmarks.measure.rss`:
    0.3 s of fork and inputs)."""
    c = config
    return timing_cost(c) + 0.3 * c.get("rss", True) + 4 * _call_seconds(c)


def key(config: dict) -> str:
    return config["variant"]


def _stacks(c: dict):
    return cases.stacks(c["m"], c["n"], (c["client_rank"],) * c["clients"], c["modules"], 3)


def call(config: dict, device: torch.device | str = "cpu"):
    """The variant's zero-argument call on ``device``, returning ``(Bg, Ag)``."""
    from benchmarks.measure.ablation import variant_calls

    return variant_calls(*to_device(_stacks(config), torch.device(device)), config["p"])[config["variant"]]


@functools.lru_cache(maxsize=1)
def _reference(m, n, modules, clients, client_rank, p, device: str):
    """The float64 spectrum and the coordinate-SVD product every variant is compared with."""
    from fraq.reference import reference_svd

    c = dict(m=m, n=n, modules=modules, clients=clients, client_rank=client_rank, p=p, variant="adaptive-svd")
    B, A = _stacks(c)
    Bs, As = (t.cpu() for t in call(c, device)())
    return reference_svd(B, A), Bs, As


def metrics(config: dict, device: torch.device | str = "cpu") -> dict:
    """Peak memory and errors of one variant (everything but the latency)."""
    from benchmarks.measure import fidelity, peak_memory
    from fraq.reference import relative_error

    c, device = config, torch.device(device)
    fn = call(c, device)
    ref, Bsvd, Asvd = _reference(c["m"], c["n"], c["modules"], c["clients"], c["client_rank"], c["p"], str(device))
    Bg, Ag = (t.cpu() for t in fn())
    B, A = _stacks(c)
    f = fidelity(B, A, Bg, Ag, c["p"], reference=ref)
    from benchmarks.measure.rss import rss_growth

    rss = rss_growth(__name__, c, str(device)) if c.get("rss", True) else {}
    return dict(peak_bytes=peak_memory(fn, device=device).peak, **rss, gap_to_svd=relative_error(Bsvd, Asvd, Bg, Ag).tolist(),
                excess=f.excess.tolist(), excess_quadrature=f.excess_quadrature.tolist(), **f.first.as_dict())


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """One variant's result: its share of the variants' paired timing and :func:`metrics`."""
    from benchmarks.measure.paired import cached

    c = config
    timing = cached(GROUP, group(c), c["variant"], rounds=c["rounds"], launches=c["launches"], device=device)
    return dict(timing=timing, **metrics(c, device))
