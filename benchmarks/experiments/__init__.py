"""The registry: one module per figure or table, each measured here and nowhere else.

Every experiment module exports

- ``EXPERIMENT``: an :class:`Experiment`, what the module declares about itself: whether
  ``make run`` reproduces it, whether its results hold anything timed, its cost estimates'
  :attr:`~Experiment.scale`, and its priorities in a GPU call (:class:`Priority`);
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

:data:`EXPERIMENTS` is the one list, a line per experiment; :data:`DEFAULT`, :data:`UNTIMED`
and :data:`SCALE` (and the GPU check's priorities, :func:`priorities`) are read from the
modules' declarations, in its order, the first time one of them is read (the modules import
torch; this package alone does not). The runner (:mod:`benchmarks.run`) is one loop over
them; the asv classes (``benchmarks/bench_*.py``) take their parameters from the same
``points`` and call the same functions; the pytest-benchmark checks (``tests/bench``) run
the ``tiny`` points. Adding an experiment is a module with those names, a line here and,
for the report, a section (:mod:`analysis.sections`)::

    # benchmarks/experiments/my_sweep.py
    from benchmarks.experiments import Experiment, Priority

    EXPERIMENT = Experiment(default=True, gpu=(Priority(5, "my sweep"),))

    def points(size): ...
    def key(config): ...
    def measure(config, device): ...

    # here, in EXPERIMENTS
    "my_sweep": "my_sweep",
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from types import ModuleType

__all__ = ["DEFAULT", "DENSE_RATE", "EXPERIMENTS", "SCALE", "UNTIMED", "Experiment", "Priority", "cost", "declared",
           "dense_seconds", "get", "priorities", "timing_cost", "with_registered"]


@dataclass(frozen=True)
class Priority:
    """Where an experiment's points stand in a GPU call (:mod:`benchmarks.gpu_check.plan`):
    ``level`` 0 to 3 the paper's claims, 4 the checks measured once per fingerprint, 5 the
    rest (a lower level is measured first); ``part``: the points whose config's ``part`` is
    this (tables123's ``shared``), None for every point; ``what``: the plan's words for them.
    A point takes the lowest level among its experiment's priorities that match it."""

    level: int
    what: str
    part: str | None = None

    def __post_init__(self):
        if isinstance(self.level, bool) or not isinstance(self.level, int) or self.level < 0:
            raise ValueError(f"level(={self.level!r}) must be an integer >= 0")
        if not isinstance(self.what, str) or not self.what:
            raise ValueError(f"what(={self.what!r}) must be a non-empty string")
        if self.part is not None and not isinstance(self.part, str):
            raise ValueError(f"part(={self.part!r}) must be a string or None")


@dataclass(frozen=True)
class Experiment:
    """What an experiment module declares about itself, as its ``EXPERIMENT``.

    Attributes:
        default: ``make run`` reproduces it (:data:`DEFAULT`).
        untimed: its results hold nothing timed or sized by the machine (errors against
            float64, ranks, parameter counts: deterministic at a given thread count), so
            nothing running beside it changes them (:data:`UNTIMED`).
        scale: its measured seconds over the sum of its points' ``cost`` (:data:`SCALE`).
        gpu: its priorities in a GPU call; none: the GPU campaign does not measure it.
    """

    default: bool = False
    untimed: bool = False
    scale: float = 1.0
    gpu: tuple[Priority, ...] = ()

    def __post_init__(self):
        for name in ("default", "untimed"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}(={getattr(self, name)!r}) must be True or False")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) \
                or not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale(={self.scale!r}) must be a finite number > 0")
        if not isinstance(self.gpu, tuple) or not all(isinstance(p, Priority) for p in self.gpu):
            raise ValueError(f"gpu(={self.gpu!r}) must be a tuple of Priority")


EXPERIMENTS: dict[str, str] = {
    "table4": "table4",
    "table4_steps": "table4_steps",
    "florist_steps": "florist_steps",
    "pipeline": "pipeline",
    "fig3": "fig3",
    "clients": "clients",
    "clients_models": "clients_models",
    "backends": "backends",
    "backend_stages": "backend_stages",
    "peft": "peft_compare",
    "tables123": "tables123",
    "eig_precision": "eig_precision",
    "eigensolver": "eigensolver",
    "eigh_routes": "eigh_routes",
    "basis_routes": "basis_routes",
    "workspace": "workspace",
    "tf32": "tf32",
    "cuda_graphs": "cuda_graphs",
    "fig4_cond": "fig4_cond",
    "flexlora_precision": "flexlora_precision",
    "fig4_rank": "fig4_rank",
    "fig1": "fig1",
    "trained": "trained",
}
"""Every experiment (its results' directory name) and its module here, in the runner's
order: ``make run``'s timed experiments (cheap first), the others, then the untimed ones,
which the runner measures after every other it was asked for (:mod:`benchmarks.untimed`).
Within one GPU priority level the GPU check takes experiments in this order too."""


def _derived(what: str):
    """:data:`DEFAULT`, :data:`UNTIMED` or :data:`SCALE`, read from the modules' declarations."""
    if what == "DEFAULT":
        return tuple(n for n in EXPERIMENTS if declared(n).default)
    if what == "UNTIMED":
        return tuple(n for n in EXPERIMENTS if declared(n).untimed)
    return {n: float(declared(n).scale) for n in EXPERIMENTS}


def __getattr__(name: str):
    """:data:`DEFAULT`, :data:`UNTIMED` and :data:`SCALE`, derived once, the first time one is
    read (reading them imports every experiment module, and torch with them):

    - ``DEFAULT``: what ``make run`` reproduces (``Experiment.default``), in the registry's
      order: the timed experiments, then the :data:`UNTIMED` ones;
    - ``UNTIMED``: the experiments whose results hold nothing timed or sized by the machine
      (``Experiment.untimed``). The runner measures them after every other experiment it
      was asked for, split between processes on a machine with a core free for each
      (:mod:`benchmarks.untimed`): a timed result records the 1-minute load average, and a
      second busy process before it would mark it busy for a minute after;
    - ``SCALE``: per experiment, its measured seconds over the sum of its points' ``cost``
      (``Experiment.scale``, 1 where they agree): each module's model counts the work it
      names (FLOPs at :data:`DENSE_RATE`, calls, launches) and misses what it does not
      (building inputs, traced metric calls, float64 references, Python around small calls),
      by a factor that differs between experiments; the runner's time left is right from its
      first points only when every experiment's estimates are in one proportion to its time.
      Measured by two runs of ``make run``'s points on a 2-core Intel Xeon, beside one other
      job (the geometric mean of their proportions, at the lighter-loaded run's level, so the
      minutes ``--estimate`` prints are an idle machine's or somewhat more). Experiments that
      time at 2 threads (the backends) move most with the load beside them.
    """
    if name in ("DEFAULT", "UNTIMED", "SCALE"):
        value = _derived(name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def declared(name: str) -> Experiment:
    """What experiment ``name``'s module declares about itself (its ``EXPERIMENT``)."""
    spec = getattr(get(name), "EXPERIMENT", None)
    if not isinstance(spec, Experiment):
        raise TypeError(f"experiment(={name!r}): its module {EXPERIMENTS[name]!r} declares no EXPERIMENT "
                        f"(an Experiment), but {spec!r}")
    return spec


def priorities() -> tuple[tuple[int, str, str | None, str], ...]:
    """``(level, experiment, part or None, what)`` of every experiment's GPU priorities
    (``Experiment.gpu``), by level and, within one, in the registry's order: the table the
    GPU check plans from (:data:`benchmarks.gpu_check.plan.PRIORITIES`)."""
    rows = [(p.level, name, p.part, p.what) for name in EXPERIMENTS for p in declared(name).gpu]
    return tuple(sorted(rows, key=lambda row: row[0]))


def cost(name: str, config: dict) -> float:
    """The estimated seconds of one point of experiment ``name``: its module's ``cost`` (else
    1), times the experiment's ``scale`` (:data:`SCALE`)."""
    fn = getattr(get(name), "cost", None)
    return declared(name).scale * (float(fn(config)) if fn is not None else 1.0)


def timing_cost(name: str, config: dict) -> float:
    """The share of :func:`cost` spent in the point's paired timing (its module's
    ``timing_cost``, else 0), scaled as :func:`cost` is."""
    fn = getattr(get(name), "timing_cost", None)
    return declared(name).scale * float(fn(config)) if fn is not None else 0.0


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
