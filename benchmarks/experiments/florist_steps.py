"""From FLoRIST to FRAQ, step by step: how much of the gap is the algorithm, how much the engineering.

FLoRIST (:class:`fraq.aggregators.FLoRIST`) and FRAQ recompress the same stacks to the same
output: a best rank-p approximation of the exact weighted aggregate, p by the same energy
rule. The rows here walk from FLoRIST as its public code runs to FRAQ, changing one thing at
a time (:data:`STEPS`, in this order):

1. ``published``: FLoRIST as its authors' code runs, a Python loop over modules, one module
   at a time (``aggregate(..., batched=False)``: every module its own group), its rank read
   on the host per module;
2. ``batched``: the same kernel batched per shape group (the method's default call);
3. ``qr``: FLoRIST on the QR kernel (``florist:kernel=qr``: FRAQ's basis backend on both
   stacks, the core's SVD batched);
4. ``fraq-stepwise``: FRAQ's stepwise pipeline (one QR on the smaller side, an r x r Gram
   eigenproblem; ``fraq:tau=0.9,pipeline=stepwise``);
5. ``fraq``: FRAQ as it runs by default on the device (``fraq:tau=0.9``; on a CPU the
   default is the stepwise pipeline, so rows 4 and 5 run the same code there).

Steps 1 -> 2 change the engineering (batching), 2 -> 3 the algorithm (two QRs in place of
two SVDs), 3 -> 4 the algorithm (one QR and a Gram in place of two QRs and an SVD), 4 -> 5
the engineering (the device's pipeline). Every row cuts at tau = 0.90, FLoRIST's default,
so every row gives the same rank per module and the same product to float32 rounding
(``tests/test_florist_steps.py``).

Per row: the latency (all five rows in the same paired rounds,
:mod:`benchmarks.measure.paired`), the counted FLOPs of one call
(:func:`benchmarks.measure.count_flops`, LAPACK formulas), the analytic FLOPs
(:func:`fraq.aggregators.analytic_flops`, ``model="full"``, at each module's rank; FRAQ's on
the path ``recompress`` takes, :func:`benchmarks.measure.methods.default_path`, Householder
basis), and the host's share of one call: host reads and non-view aten ops
(:func:`benchmarks.measure.overhead.per_group`, on the preset's modules at reduced sides,
as Tables 1-3 count them), as the row runs on the measuring device, and for the FRAQ rows
also in the CUDA configuration (:data:`benchmarks.measure.overhead.CUDA_CONFIGURATION`,
which any CPU can count). FLoRIST's QR kernel takes its basis and core routes from the
device its stacks are on and has no option to choose them, so its CUDA counts are a GPU
run's. A preset may be built on some of its layers (``layers``); the rows then report the
modules measured, never a time multiplied up.

Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["florist_steps"]``; one result per (preset,
row), ``<out>/florist_steps/<preset>-<row>.json``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, gpu=(Priority(3, "the steps from FLoRIST to FRAQ"),))

__all__ = ["GROUP", "STEPS", "Step", "aggregator", "call", "cost", "group", "group_calls", "key", "measure",
           "points", "prepare_points", "timing_cost"]

TAU = 0.90
"""FLoRIST's default energy threshold; FRAQ's rows cut at the same, so ranks and outputs compare."""


@dataclass(frozen=True)
class Step:
    """One row: its key, the method spec it runs, whether modules are batched per shape group,
    and what it changes from the row before."""

    key: str
    spec: str
    batched: bool
    what: str


STEPS = (
    Step("published", f"florist:tau={TAU:g}", False,
         "FLoRIST as its public code runs: a Python loop over modules, one host read per module"),
    Step("batched", f"florist:tau={TAU:g}", True, "engineering: batched per shape group"),
    Step("qr", f"florist:tau={TAU:g},kernel=qr", True, "algorithm: two QRs in place of two SVDs"),
    Step("fraq-stepwise", f"fraq:tau={TAU:g},pipeline=stepwise", True,
         "algorithm: one QR and a Gram eigenproblem in place of two QRs and an SVD"),
    Step("fraq", f"fraq:tau={TAU:g}", True, "engineering: the device's default pipeline"),
)
"""The rows, in the order the report walks them."""

_BY_KEY = {s.key: s for s in STEPS}


def aggregator(step: Step, **options):
    """The row's aggregator (its spec's options, then ``options`` over them)."""
    from fraq.aggregators import get_aggregator
    from fraq.methods import MethodSpec

    spec = MethodSpec.parse(step.spec)
    return get_aggregator(spec.name, **{**spec.kwargs, **options})


class _Call:
    """``agg.aggregate`` with the row's ``batched``: what :mod:`benchmarks.measure.overhead`
    counts (it calls ``aggregate(uploads, state)``)."""

    def __init__(self, agg, batched: bool):
        self.agg, self.batched = agg, batched

    def aggregate(self, updates, state=None):
        return self.agg.aggregate(updates, state, batched=self.batched)


def points(size: str) -> list[dict]:
    """Per preset of the size, one point per row (:data:`STEPS`), all timed in one group."""
    c = size_config(size, "florist_steps")
    out = []
    for preset in c["presets"]:
        layers = c.get("layers", {}).get(preset)
        base = dict(figure="florist_steps", preset=preset, layers=layers, tau=TAU, seed=0, rounds=c["rounds"],
                    launches=1, compared=[s.key for s in STEPS])
        out += [dict(base, row=s.key, spec=s.spec, batched=s.batched) for s in STEPS]
    return out


def key(config: dict) -> str:
    return f"{config['preset']}-{config['row']}"


def group(config: dict) -> dict:
    """The point's group: what every row of its preset shares."""
    return {k: v for k, v in config.items() if k not in ("row", "spec", "batched")}


@functools.lru_cache(maxsize=1)
def _model(preset: str, layers: int | None, seed: int, device: str):
    from benchmarks.cases import build_model

    return build_model(preset, layers=layers, seed=seed, device=device)


def call(config: dict, device: torch.device | str = "cpu"):
    """The row's zero-argument call on its preset's uploads (built once per preset here)."""
    c = config
    model = _model(c["preset"], c["layers"], c["seed"], str(torch.device(device)))
    ups = model.updates()
    step = _BY_KEY[c["row"]]
    agg = _Call(aggregator(step), step.batched)
    return lambda: agg.aggregate(ups)


GROUP = "benchmarks.experiments.florist_steps:group_calls"
"""The builder of the rows' calls (:func:`benchmarks.measure.paired.launched`)."""


def group_calls(group: dict, device: torch.device | str = "cpu") -> dict:
    """Every row's call on the same uploads."""
    return {k: call(dict(group, row=k), device) for k in group["compared"]}


def prepare_points(configs: list[dict], device: torch.device | str = "cpu", on_group=None) -> None:
    """Each preset's rows in the same paired rounds, in this process; ``on_group(points)`` with
    a preset's points once its timing is complete."""
    from benchmarks.measure.paired import measure_groups

    for g in {_key(group(c)): group(c) for c in configs}.values():
        mine = [x for x in configs if group(x) == g]
        measure_groups(GROUP, [g], rounds=g["rounds"], launches=g["launches"], device=device, here=True,
                       on_group=None if on_group is None else (lambda _, mine=mine: on_group(mine)))


def _key(g: dict) -> str:
    import json

    return json.dumps(g, sort_keys=True, default=str, allow_nan=False)


def _stack_work(config: dict) -> float:
    """sum over the measured modules of (m + n) r^2, r the stacked rank."""
    from fraq.presets import get_preset

    preset = get_preset(config["preset"])
    layers = config["layers"]
    r = sum(preset.ranks)
    return sum((min(g.count, layers) if layers else g.count) * (g.m + g.n) * r**2 for g in preset.groups)


SECONDS_PER_WORK = {"published": 5e-10, "batched": 5e-10, "qr": 2.5e-10, "fraq-stepwise": 1.5e-10, "fraq": 1.5e-10}
"""Seconds per unit of (m + n) r^2 of one call of each row, on one core at one thread, as the
reduced size measured them (RoBERTa-base whole, LLaMA-3.2-3B on 2 layers): FLoRIST's two
thin SVDs about 4 (d + D) r^2 FLOPs, its QR kernel about half, FRAQ about a third."""

POINT_SECONDS = 0.6
"""A row's host counts (:func:`benchmarks.measure.overhead.per_group`: a model at reduced
sides and three calls; twice for the FRAQ rows) and its share of building the preset."""


def timing_cost(config: dict) -> float:
    """The row's calls in the paired rounds: a warm-up and one per round."""
    return SECONDS_PER_WORK[config["row"]] * _stack_work(config) * (config["rounds"] + 1)


def cost(config: dict) -> float:
    """The paired timing's share (:func:`timing_cost`), the counted FLOPs' call, the ranks'
    call and :data:`POINT_SECONDS`."""
    one = SECONDS_PER_WORK[config["row"]] * _stack_work(config)
    return timing_cost(config) + 2 * one + POINT_SECONDS


def _analytic(name: str, kernel: str | None, shapes: dict, ranks: dict, r: int) -> float:
    """The analytic FLOPs of one call (:func:`fraq.aggregators.analytic_flops`, ``model="full"``)."""
    from benchmarks.measure.methods import default_path
    from fraq.aggregators import analytic_flops

    total = 0.0
    for module, p in ranks.items():
        m, n = shapes[module]
        p = min(int(p), r, m, n)
        extra = default_path(m, n, r, p) if name == "fraq" else {"kernel": kernel}
        total += analytic_flops(name, m, n, r, p, model="full", **extra)
    return total


def _counts(agg, batched: bool, preset, layers, device) -> dict:
    from benchmarks.measure.overhead import per_group

    c = per_group(_Call(agg, batched), preset, layers=layers, device=device)
    return {"host_reads": c.host_reads, "ops": c.ops, "groups": c.groups, "reads_by_kind": c.reads_by_kind}


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """One row's result: its share of the rows' paired timing, the ranks it gives per module,
    counted and analytic FLOPs of one call, and its host reads and non-view ops per call."""
    from benchmarks.measure import count_flops
    from benchmarks.measure.overhead import CUDA_CONFIGURATION, counted_preset
    from benchmarks.measure.paired import cached
    from fraq.methods import MethodSpec
    from fraq.presets import get_preset

    c, device = config, torch.device(device)
    step = _BY_KEY[c["row"]]
    timing = cached(GROUP, group(c), c["row"], rounds=c["rounds"], launches=c["launches"], device=device)
    model = _model(c["preset"], c["layers"], c["seed"], str(device))
    fn = call(c, device)
    res = fn()
    ranks = {name: int(p) for name, p in res.ranks.items()}
    del res
    flops = count_flops(fn)
    spec = MethodSpec.parse(step.spec)
    preset = get_preset(c["preset"])
    counts = _counts(aggregator(step), step.batched, preset, c["layers"], device)
    out = dict(timing=timing, modules=len(model.shapes), modules_total=preset.modules,
               stacked_rank=sum(preset.ranks), ranks=[ranks[n] for n in model.shapes],
               flops_counted=flops.total, flops_uncounted=list(flops.uncounted),
               flops_analytic=_analytic(spec.name, spec.kwargs.get("kernel"), model.shapes, ranks, sum(preset.ranks)),
               host_reads=counts["host_reads"], ops=counts["ops"], groups=counts["groups"],
               reads_by_kind=counts["reads_by_kind"], counted_on=counted_preset(preset).name,
               threads=torch.get_num_threads())
    if spec.name == "fraq":  # FRAQ's options as "auto" resolves them on CUDA, countable anywhere
        options = dict(CUDA_CONFIGURATION, pipeline="stepwise") if c["row"] == "fraq-stepwise" else CUDA_CONFIGURATION
        cuda = _counts(aggregator(step, **options), step.batched, preset, c["layers"], device)
        out["cuda_configuration"] = dict(host_reads=cuda["host_reads"], ops=cuda["ops"], options=dict(options))
    return out
