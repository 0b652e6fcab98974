"""The registry: one module per figure or table, each measured here and nowhere else.

Every experiment module exports

- ``points(size) -> list[dict]``: the configs of every result at a size of
  :data:`benchmarks.sizes.SIZES` (``tiny``, ``reduced``, ``paper``);
- ``key(config) -> str``: the result's file name (``<out>/<experiment>/<key>.json``);
- ``measure(config, device) -> dict``: one result;
- optionally ``prepare_points(configs, device)``: a measurement spanning several points, run
  once before the first of ``configs`` (the points this run measures) is measured: the
  paired timings of the methods compared at a point (:mod:`benchmarks.measure.paired`),
  whose samples must come from the same rounds, while each method keeps its own result
  file. ``measure`` of a point not prepared measures its group itself;
- optionally ``cost(config) -> float``: the point's estimated seconds on one idle core.
  The runner's progress bar advances by it and rescales it by the rate measured so far,
  so only the ratios between points matter; without it a point counts 1 s;
- optionally ``timing_cost(config) -> float``, the share of ``cost`` spent in the paired
  timing, with ``prepare_points(configs, device, on_group=fn)`` calling ``fn(points)``
  as each group's timing completes: the progress bar advances by those shares while the
  timings run, before the experiment's first point is written.

The runner (:mod:`benchmarks.run`) is one loop over :data:`EXPERIMENTS`; the asv classes
(``benchmarks/bench_*.py``) take their parameters from the same ``points`` and call the
same functions; the pytest-benchmark checks (``tests/bench``) run the ``tiny`` points.
Adding an experiment is a module with those three functions and a line here.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["DEFAULT", "DENSE_RATE", "EXPERIMENTS", "SCALE", "UNTIMED", "cost", "dense_seconds", "get", "timing_cost",
           "with_registered"]

EXPERIMENTS: dict[str, str] = {
    "table4": "table4",
    "fig4_cond": "fig4_cond",
    "fig4_rank": "fig4_rank",
    "fig1": "fig1",
    "fig3": "fig3",
    "clients": "clients",
    "clients_models": "clients_models",
    "backends": "backends",
    "backend_stages": "backend_stages",
    "peft": "peft_compare",
    "tables123": "tables123",
    "eig_precision": "eig_precision",
    "flexlora_precision": "flexlora_precision",
    "table4_steps": "table4_steps",
    "florist_steps": "florist_steps",
    "eigh_routes": "eigh_routes",
    "eigensolver": "eigensolver",
    "basis_routes": "basis_routes",
    "workspace": "workspace",
    "tf32": "tf32",
    "trained": "trained",
}
"""Every experiment (its results' directory name) and its module here, in the runner's
order (cheap first)."""

DEFAULT = ("table4", "table4_steps", "florist_steps", "fig3", "clients", "backends", "backend_stages", "peft",
           "tables123", "fig4_cond", "flexlora_precision", "fig4_rank", "fig1", "trained")
"""What ``make run`` reproduces, in the runner's order: the timed experiments, then the
:data:`UNTIMED` ones."""

UNTIMED = ("fig4_cond", "flexlora_precision", "fig4_rank", "fig1", "trained")
"""Experiments whose results hold nothing timed or sized by the machine (errors against
float64, ranks, parameter counts: deterministic at a given thread count), so nothing
running beside them changes them. The runner measures them after every other experiment
it was asked for, split between processes on a machine with a core free for each
(:func:`benchmarks.run.run`): a timed result records the 1-minute load average, and a
second busy process before it would mark it busy for a minute after."""


def get(name: str) -> ModuleType:
    """The module of experiment ``name``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment(={name!r}) is not one of {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"benchmarks.experiments.{EXPERIMENTS[name]}")


DENSE_RATE = 3e10
"""FLOPs per second of a dense LAPACK factorization (SVD, eigh) on one core here, for the
cost estimates: a 3072 x 3072 SVD (~10 d^3 FLOPs) in about 10 s."""


def dense_seconds(m: int, n: int, count: int = 1) -> float:
    """Estimated seconds of ``count`` dense reduced SVDs of m x n matrices, one core."""
    return count * 10.0 * m * n * min(m, n) / DENSE_RATE


SCALE: dict[str, float] = {"table4": 0.96, "table4_steps": 11, "fig4_cond": 0.3, "flexlora_precision": 1.4,
                           "fig4_rank": 0.32, "fig1": 0.21, "fig3": 1.8, "clients": 1.2, "backends": 1.4,
                           "backend_stages": 0.31, "peft": 1.4, "tables123": 0.37}
"""Per experiment, its measured seconds over the sum of its points' ``cost``, where they
differ: each module's model counts the work it names (FLOPs at :data:`DENSE_RATE`, calls,
launches) and misses what it does not (building inputs, traced metric calls, float64
references, Python around small calls), by a factor that differs between experiments;
the runner's time left is right from its first points only when every experiment's
estimates are in one proportion to its time. Measured by two runs of ``make run``'s
points on a 2-core Intel Xeon, beside one other job (the geometric mean of their
proportions, at the lighter-loaded run's level, so the minutes ``--estimate`` prints are an
idle machine's or somewhat more). Experiments that time at 2 threads (the backends) move
most with the load beside them."""


def cost(name: str, config: dict) -> float:
    """The estimated seconds of one point of experiment ``name``: its module's ``cost`` (else
    1), times the experiment's :data:`SCALE`."""
    fn = getattr(get(name), "cost", None)
    return SCALE.get(name, 1.0) * (float(fn(config)) if fn is not None else 1.0)


def timing_cost(name: str, config: dict) -> float:
    """The share of :func:`cost` spent in the point's paired timing (its module's
    ``timing_cost``, else 0), scaled as :func:`cost` is."""
    fn = getattr(get(name), "timing_cost", None)
    return SCALE.get(name, 1.0) * float(fn(config)) if fn is not None else 0.0


def with_registered(methods) -> list[str]:
    """``methods`` (a sweep's compared methods, :mod:`benchmarks.sizes`), each aggregator
    among them followed by its kernel variants (its class's ``kernel_variants``:
    ``flexlora`` by ``flexlora:kernel=fraq``, the same method on FRAQ's kernel), then every
    registered aggregator they do not name that has the per-module entry the sweeps time,
    ``aggregate_batch(Bs, As, *, rank, tau, weights, scales) -> (B_g, A_g, p)``
    (:mod:`benchmarks.measure.methods`), in registration order, with its variants. The
    package's such methods (FRAQ, FLoRIST, FlexLoRA) are named at every size, so what the
    last part adds is a method registered from outside the package
    (:mod:`fraq.aggregators.registry`): Fig. 3 and the clients sweep compare it with no
    change to the sizes."""
    from benchmarks.measure.methods import split_method
    from fraq.aggregators import AGGREGATORS

    def variants(method: str) -> list[str]:
        name, options = split_method(method)
        cls = AGGREGATORS.get(name)
        kernels = getattr(cls, "kernel_variants", ())  # an older fraq (benchmarks.regress) has none
        extra = [] if cls is None or options else [f"{name}:kernel={k}" for k in kernels]
        return [method] + [v for v in extra if v not in methods]

    methods = list(methods)
    named = {split_method(m)[0] for m in methods}
    rest = [name for name, cls in AGGREGATORS.items()
            if name not in named and callable(getattr(cls, "aggregate_batch", None))]
    return [v for m in methods + rest for v in variants(m)]
