"""FRAQ's pipelines against each other, FLoRA and FLoRIST: the evidence a device's pipeline default comes from.

Per preset (its whole model, or its first ``layers`` layers where the size says so), the
methods of :data:`METHODS` aggregate one round of the preset's clients (float32, TF32 as the
process has it): FRAQ's stepwise pipeline (every verdict read as it comes), its static
pipeline read per shape group (``reads="group"``) and per call (``reads="call"``: the groups
that share the stacked rank share one r x r stage, :func:`fraq._static.start_many`), FLoRA
(stacking alone: the floor of any exact method's host work) and FLoRIST (the paper's
comparison) at FRAQ's threshold, as published and at its best. Each method is named by its options, never by ``"auto"``, which is one pipeline
or the other per device (:data:`fraq._defaults.DEFAULTS`, the table whose CUDA entry this
comparison is the evidence for: a device's default changes only from a GPU's measurement).

One point per (preset, method); the methods of a preset are timed in the same paired rounds
(:mod:`benchmarks.measure.paired`: every method once a round, the order rotated,
synchronized on CUDA; :func:`prepare_points`), so each result keeps its own samples and the
analysis judges ratios round by round. Each result also carries, from one more warm call:

- ``ranks``: the output rank of every module, in the model's order (FLoRA's is the
  stacked rank), so the report can say whether FRAQ's pipelines agree;
- ``syncs``: the device synchronizations the call made (CUDA: the warnings of
  ``torch.cuda.set_sync_debug_mode("warn")``, counted; None off CUDA);
- ``kernels``, ``device_busy_s``, ``aten_ops``, ``wall_s``, ``top_kernels``: under torch's
  profiler, the call's kernels and the device time they took against its wall time (the
  host's share is the rest; CUDA only), and the :data:`TOP_KERNELS` kernels of most device
  time (on a CPU the aten ops of most self CPU time);
- ``host_reads``, ``ops``, ``groups``: host reads and non-view aten ops of one call as the
  method runs on this device, counted on the preset's modules at reduced sides
  (:func:`benchmarks.measure.overhead.per_group`, the same counts Tables 1-3 give); for
  FRAQ's rows also ``cuda_configuration``, the same counts with CUDA's basis backend
  (:data:`benchmarks.measure.overhead.CUDA_CONFIGURATION`), which any CPU can count;
- ``ran`` (FRAQ's rows): the basis backend and the pipeline one module's recompression
  took with the row's options here (:attr:`fraq.RecompressResult.info`): the static rows
  name the ``cholesky`` basis, whose static pass runs on any device; a batch whose
  verdicts fail would run stepwise, and the report says so.

Whether the static pass captures as a CUDA graph is the ``cuda_graphs`` experiment's
(:mod:`benchmarks.experiments.cuda_graphs`), measured after these in the GPU check.

Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["pipeline"]`` (``presets``, ``layers`` per
preset, ``rounds``); one result per (preset, method), ``<out>/pipeline/<preset>-<method>.json``.
``python -m benchmarks.pipeline_check`` runs these points on their own and prints the table.
"""

from __future__ import annotations

import functools
import json
import time
import warnings
from dataclasses import dataclass

import torch

from benchmarks.experiments import Experiment, Priority
from benchmarks.measure.timing import sync
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, gpu=(
    Priority(1, "FRAQ's pipelines against each other (stepwise, static read per group and per call), FLoRA and "
                "FLoRIST on both presets, whole: the evidence CUDA's pipeline and reads defaults come from"),))

__all__ = ["GROUP", "METHODS", "TOP_KERNELS", "Method", "call", "configs", "cost", "group", "group_calls", "key",
           "measure", "points", "prepare_points", "profile", "syncs", "timing_cost"]


@dataclass(frozen=True)
class Method:
    """One compared method: its key (the result's file name and the report's row) and its
    spec in :mod:`fraq.methods`' grammar."""

    key: str
    spec: str


METHODS = (
    Method("stepwise", "fraq:tau=0.95,pipeline=stepwise"),
    Method("static-group", "fraq:tau=0.95,backend=cholesky,pipeline=static,reads=group"),
    Method("static-call", "fraq:tau=0.95,backend=cholesky,pipeline=static,reads=call"),
    Method("flora", "flora"),
    Method("florist", "florist:tau=0.95"),
    Method("florist-qr", "florist:tau=0.95,kernel=qr"),
)
"""The compared methods, in the report's order: FRAQ's two pipelines, the stepwise one on the
device's default basis and the static one on the basis that has a static pass (``cholesky``,
CUDA's default basis), read per shape group and per call (the values of
:data:`fraq._defaults.DEFAULTS`' ``pipeline`` and ``reads`` a device chooses between), FLoRA
and FLoRIST at FRAQ's threshold (the same rank and output) as published and at its best
(on the QR kernel). On a CPU the static rows are CUDA's configuration run
there (the CPU's own default is the stepwise pipeline on the Householder basis)."""

_BY_KEY = {m.key: m for m in METHODS}


def configs(size: str, *, presets=None, methods=None, rounds: int | None = None, layers: int | None = None
            ) -> list[dict]:
    """The points of ``size``, of ``presets`` and ``methods`` (method keys of :data:`METHODS`)
    alone where given, with ``rounds`` or ``layers`` (every preset's) in place of the size's
    where given: :func:`points` and ``python -m benchmarks.pipeline_check``'s. A name that is
    not a preset or a method key raises ValueError naming it, before any work."""
    from fraq.presets import get_preset

    c = size_config(size, "pipeline")
    names = list(c["presets"] if presets is None else presets)
    for name in names:
        get_preset(name)  # a ValueError naming an unknown preset
    keys = [m.key for m in METHODS] if methods is None else list(methods)
    unknown = [k for k in keys if k not in _BY_KEY]
    if unknown or not keys:
        raise ValueError(f"methods(={keys!r}) must be a non-empty list of {[m.key for m in METHODS]}")
    rounds = c["rounds"] if rounds is None else rounds
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds(={rounds!r}) must be an integer >= 1")
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 1):
        raise ValueError(f"layers(={layers!r}) must be an integer >= 1 or None")
    out = []
    for name in names:
        base = dict(figure="pipeline", preset=name, layers=layers if layers is not None else c["layers"].get(name),
                    seed=0, rounds=rounds, launches=1, compared=keys)
        out += [dict(base, row=k, method=_BY_KEY[k].spec) for k in keys]
    return out


def points(size: str) -> list[dict]:
    """Per preset of the size, one point per method of :data:`METHODS`, all timed in one group."""
    return configs(size)


def key(config: dict) -> str:
    return f"{config['preset']}-{config['row']}"


def group(config: dict) -> dict:
    """The point's group: what every method of its preset shares."""
    return {k: v for k, v in config.items() if k not in ("row", "method")}


@functools.lru_cache(maxsize=1)
def _model(preset: str, layers: int | None, seed: int, device: str):
    from benchmarks.cases import build_model

    return build_model(preset, layers=layers, seed=seed, device=device)


def _aggregator(spec: str, **options):
    from fraq.aggregators import get_aggregator
    from fraq.methods import MethodSpec

    s = MethodSpec.parse(spec)
    return get_aggregator(s.name, **{**s.kwargs, **options})


def call(config: dict, device: torch.device | str = "cpu"):
    """The point's zero-argument call: its method's ``aggregate`` of one round of its preset's
    uploads (built once per preset in a process)."""
    c = config
    ups = _model(c["preset"], c["layers"], c["seed"], str(torch.device(device))).updates()
    agg = _aggregator(c["method"])
    return lambda: agg.aggregate(ups)


GROUP = "benchmarks.experiments.pipeline:group_calls"
"""The builder of a preset's calls (:func:`benchmarks.measure.paired.launched`)."""


def group_calls(group: dict, device: torch.device | str = "cpu") -> dict:
    """Every compared method's call on the same uploads."""
    return {k: call(dict(group, row=k, method=_BY_KEY[k].spec), device) for k in group["compared"]}


def _group_key(g: dict) -> str:
    return json.dumps(g, sort_keys=True, default=str, allow_nan=False)


def prepare_points(configs: list[dict], device: torch.device | str = "cpu", on_group=None) -> None:
    """Each preset's methods in the same paired rounds, in this process; ``on_group(points)``
    with a preset's points once its timing is complete."""
    from benchmarks.measure.paired import measure_groups

    for g in {_group_key(group(c)): group(c) for c in configs}.values():
        mine = [x for x in configs if group(x) == g]
        measure_groups(GROUP, [g], rounds=g["rounds"], launches=g["launches"], device=device, here=True,
                       on_group=None if on_group is None else (lambda _, mine=mine: on_group(mine)))


SECONDS_PER_WORK = {"stepwise": 1.5e-10, "static-group": 1.5e-10, "static-call": 1.5e-10, "flora": 1e-11,
                    "florist": 5e-10, "florist-qr": 3e-10}
"""Seconds per unit of (m + n) r^2 (r the stacked rank) of one call of each method on one
idle core: FRAQ about a third of FLoRIST's two thin SVDs (the ``florist_steps`` experiment's
rates), FLoRA a copy."""

POINT_SECONDS = 0.5
"""A point's host counts (two calls at reduced sides, four for FRAQ's rows), its profiled
call and its share of building the preset."""


def _stack_work(config: dict) -> float:
    """sum over the measured modules of (m + n) r^2, r the stacked rank."""
    from fraq.presets import get_preset

    preset = get_preset(config["preset"])
    layers = config["layers"]
    r = sum(preset.ranks)
    return sum((min(g.count, layers) if layers else g.count) * (g.m + g.n) * r**2 for g in preset.groups)


def timing_cost(config: dict) -> float:
    """The method's calls in the paired rounds: a warm-up and one per round."""
    return SECONDS_PER_WORK[config["row"]] * _stack_work(config) * (config["rounds"] + 1)


def cost(config: dict) -> float:
    """The paired timing's share (:func:`timing_cost`), the ranks', the synchronizations' and
    the profiled calls, and :data:`POINT_SECONDS`."""
    return timing_cost(config) + 3 * SECONDS_PER_WORK[config["row"]] * _stack_work(config) + POINT_SECONDS


def syncs(fn, device: torch.device) -> int | None:
    """Device synchronizations one call of ``fn`` makes (None off CUDA)."""
    if device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in seen)


def _device_time(event) -> float:
    """A profiler event's device time in microseconds (``device_time``; ``cuda_time`` in
    torch releases before it, read only there: it warns where both exist)."""
    return event.device_time if hasattr(event, "device_time") else getattr(event, "cuda_time", 0.0)


TOP_KERNELS = 10
"""Rows of a result's ``top_kernels``: the kernels (CUDA) or aten ops (CPU) that took the
most time in the profiled call, each name's calls and time summed."""


def _top(timed) -> list[dict]:
    """``(name, microseconds)`` pairs summed by name: the :data:`TOP_KERNELS` names of most
    time, most first, as ``{"name", "calls", "seconds"}``."""
    total: dict[str, list] = {}
    for name, us in timed:
        row = total.setdefault(name, [0, 0.0])
        row[0] += 1
        row[1] += us
    ranked = sorted(total.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    return [dict(name=name, calls=calls, seconds=us * 1e-6) for name, (calls, us) in ranked]


def profile(fn, device: torch.device) -> dict:
    """Kernels and their device time in one warm call of ``fn``, against its wall time."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with torch_profile(activities=acts) as prof:
        t0 = time.perf_counter()
        fn()
        sync(device)
        wall = time.perf_counter() - t0
    events = prof.events()
    if device.type == "cuda":
        kernels = [e for e in events if getattr(e, "device_type", None) is not None
                   and str(e.device_type).endswith("CUDA")]
        busy = sum(_device_time(e) for e in kernels) * 1e-6
        top = _top((e.name, _device_time(e)) for e in kernels)
    else:
        kernels, busy = [], None
        top = _top((e.name, e.self_cpu_time_total) for e in events if e.name.startswith("aten::"))
    return dict(wall_s=wall, kernels=len(kernels), device_busy_s=busy,
                aten_ops=sum(1 for e in events if e.name.startswith("aten::")),
                top_kernels=dict(by="device time" if device.type == "cuda" else "self CPU time of aten ops",
                                 rows=top))


def _counts(agg, preset, layers, device) -> dict:
    from benchmarks.measure.overhead import per_group

    c = per_group(agg, preset, layers=layers, device=device)
    return {"host_reads": c.host_reads, "ops": c.ops, "groups": c.groups}


def _ran(spec: str, model, device: torch.device) -> dict:
    """The basis backend and pipeline the row's FRAQ options take on this device, from one
    module's recompression (its first module's clients stacked)."""
    import fraq
    from fraq.methods import MethodSpec

    options = {k: v for k, v in MethodSpec.parse(spec).kwargs.items() if k in ("tau", "pipeline", "backend")}
    Bs, As = model.factors[next(iter(model.shapes))]
    B, A = fraq.stack(Bs, As, model.weights)
    res = fraq.recompress(B, A, **options)
    return {"backend": res.backend, "pipeline": res.info.get("pipeline")}


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """One method's result on its preset: its share of the preset's paired timing and one
    warm call's ranks, synchronizations, profile and host counts (module docstring)."""
    from benchmarks.measure.overhead import CUDA_CONFIGURATION, counted_preset
    from benchmarks.measure.paired import cached
    from fraq.methods import MethodSpec
    from fraq.presets import get_preset

    c, device = config, torch.device(device)
    timing = cached(GROUP, group(c), c["row"], rounds=c["rounds"], launches=c["launches"], device=device)
    model = _model(c["preset"], c["layers"], c["seed"], str(device))
    fn = call(c, device)
    res = fn()
    sync(device)
    ranks = {name: int(max(p) if isinstance(p, tuple) else p) for name, p in res.ranks.items()}
    del res
    preset = get_preset(c["preset"])
    spec = MethodSpec.parse(c["method"])
    out = dict(timing=timing, modules=len(model.shapes), modules_total=preset.modules, clients=preset.clients,
               stacked_rank=sum(preset.ranks), ranks=[ranks[n] for n in model.shapes], syncs=syncs(fn, device),
               **profile(fn, device), **_counts(_aggregator(c["method"]), preset, c["layers"], device),
               counted_on=counted_preset(preset).name, threads=torch.get_num_threads())
    if spec.name == "fraq":
        options = {"backend": CUDA_CONFIGURATION["backend"]}
        cuda = _counts(_aggregator(c["method"], **options), preset, c["layers"], device)
        out["cuda_configuration"] = dict(host_reads=cuda["host_reads"], ops=cuda["ops"], options=options)
        out["ran"] = _ran(c["method"], model, device)
    return out
