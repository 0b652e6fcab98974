"""Downlink and server latency of every aggregator, in the shape of the paper's Tables 1-3.

For the three presets (RoBERTa-base q/k/v; LLaMA-3.2-3B, seven projections; the same
with heterogeneous ranks 4..64) it builds seeded LoRA-like client factors
(:func:`fraq.synthetic.lora_clients`), runs each aggregator through
:meth:`fraq.aggregators.Aggregator.aggregate` (batched by module shape) and reports per
method: parameters and bytes sent per client, that as a percentage of the uncompressed
FLoRA stack, and the server's aggregation latency (median and interquartile range).
Accuracy is the federated harness's job.

Where a method takes minutes per aggregation here (FlexLoRA's dense SVDs and FLoRG's
dense eigensolver on LLaMA: 8192 x 3072 and 3072 x 3072 matrices, tens of seconds each
on 2 cores), one module of every distinct shape is timed and the total extrapolated,
linearly in the number of modules of that shape, and labelled ``extrapolated``. Its
downlink is exact: it depends only on shapes and ranks. ``quick`` (every size but
``paper``) runs the LLaMA presets on 2 of 28 layers (latency extrapolated x 14, labelled)
and skips FlexLoRA and FLoRG there.

Run: ``.venv/bin/python -m benchmarks.run tables123 [--size paper]``. Inputs come from
:func:`benchmarks.cases.build_model`; one result file per preset,
``<out>/tables123/<preset>.json`` (:mod:`benchmarks.results`). Latencies are
:meth:`benchmarks.measure.Timing.as_dict` payloads (seconds); the paper's numbers are
``analysis/paper.json``'s, read by the analysis alone.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from dataclasses import dataclass, field

import torch

from benchmarks.cases import Model, build_model, lora_a2_inputs
from benchmarks.measure import Timing, timed
from benchmarks.sizes import size_config
from fraq.aggregators import ClientUpdate, get_aggregator
from fraq.presets import Preset, get_preset

__all__ = ["METHODS", "key", "measure", "method_job", "model_for", "points", "run_preset"]


@dataclass(frozen=True)
class Method:
    """One table row: a registry name, its options, and the preset rule for special cases."""

    label: str
    name: str
    options: dict = field(default_factory=dict)


def _methods(preset: Preset) -> list[Method]:
    hetero = len(set(preset.ranks)) > 1
    florist_tau = 0.85 if hetero else 0.90  # the FLoRIST paper's thresholds
    return [
        Method("flora", "flora"),
        Method("fedex-lora", "fedex-lora"),
        Method("fedit", "fedit"),
        Method("lora-a2 (B round)", "lora-a2", {"round": 1}),
        Method("lora-a2 (A round)", "lora-a2", {"round": 2}),
        Method("flexlora", "flexlora"),
        Method("florg", "florg"),
        Method(f"florist (tau={florist_tau:.2f})", "florist", {"tau": florist_tau}),
        Method("fraq (tau=0.80)", "fraq", {"tau": 0.80}),
        Method("fraq (tau=0.95)", "fraq", {"tau": 0.95}),
    ]


METHODS = _methods
"""preset -> the rows measured for it."""


def _aggregator(method: Method):
    """The row's aggregator (``round`` is the table's option: which LoRA-A^2 round is timed)."""
    return get_aggregator(method.name, **{k: v for k, v in method.options.items() if k != "round"})


def _inputs(model: Model, agg, method: Method, names):
    """The uploads of modules ``names`` as the method's clients send them, and the state
    the timed round starts from."""
    if agg.single_matrix:
        return model.florg_updates(names), None
    if agg.alternating_freeze:
        return lora_a2_inputs(model, names, method.options.get("round", 1))
    return model.updates(names), None


@dataclass
class Job:
    """One row's timed calls: (call, multiplier) pairs whose weighted times add to one sample.

    A full-model row has one call with multiplier 1 (or layers-extrapolation factor); a
    one-module-per-shape row has one call per shape, weighted by the number of modules of
    that shape. ``row`` holds the downlink figures from the first (warm-up) calls.
    """

    method: Method
    calls: list[tuple[object, float]]
    row: dict
    first_s: float
    samples: list[float] = field(default_factory=list)


def prepare(model: Model, method: Method, *, subset: bool) -> Job:
    """Inputs, the warm-up call (its result gives the downlink), and the calls to time.

    For FLoRG the warm-up's state is passed on, so the timed calls include the
    Procrustes step of a steady-state round (``partial_first_round``).
    """
    agg = _aggregator(method)
    full_layers = max(g.count for g in model.preset.groups)
    row = {"method": method.label, "name": method.name, "options": method.options,
           "threads": torch.get_num_threads()}
    if subset:
        pieces = [([name], count, (m, n)) for (m, n), (name, count) in model.one_per_shape().items()]
        flora = model.preset.stack_params()
        row["extrapolated"] = (f"from one module per distinct shape ({len(pieces)} modules), times the number of "
                               f"modules of that shape")
        row["parts"] = [{"shape": list(shape), "module": names[0], "count": count} for names, count, shape in pieces]
    else:
        scale = full_layers / model.layers
        pieces = [(None, scale, None)]
        flora = model.flora_params()
        if scale != 1:
            row["extrapolated"] = f"from {model.layers} of {full_layers} layers, times {scale:g}"
    calls, params, params_max, nbytes, first_s, ranks = [], 0.0, 0.0, 0.0, 0.0, []
    for names, count, _ in pieces:
        ups, state = _inputs(model, agg, method, names)
        t0 = time.perf_counter()
        res = agg.aggregate(ups, state)
        first_s += time.perf_counter() - t0
        if agg.partial_first_round:
            state = res.state
        per_client = res.downlink_params()
        mult = count if subset else 1
        params += mult * statistics.mean(per_client)
        params_max += mult * max(per_client)
        nbytes += mult * statistics.mean(res.downlink_bytes())
        ranks += [r for r in res.ranks.values() if isinstance(r, int)]
        del res
        calls.append((lambda agg=agg, ups=ups, state=state: agg.aggregate(ups, state), count))
    row.update(modules=len(model.shapes), downlink_params=params, downlink_params_max=params_max,
               downlink_bytes=nbytes, flora_params=flora, downlink_pct=100.0 * params / flora,
               downlink_pct_max=100.0 * params_max / flora, first_call_s=first_s)
    if ranks and not subset:
        row["rank_mean"] = statistics.mean(ranks)
        row["rank_range"] = [min(ranks), max(ranks)]
    return Job(method, calls, row, first_s)


def sample(job: Job, device: torch.device | str = "cpu") -> None:
    """One latency sample of ``job``: its calls timed one after another, weighted."""
    total = 0.0
    for fn, mult in job.calls:
        total += mult * timed(fn, repeats=1, warmup=0, device=device).samples[0]
    job.samples.append(total)


def _applicable(method: Method, preset: Preset) -> str | None:
    """The aggregator's own error for the preset's client ranks, found on 4 x 4 stand-ins
    named after the preset's first module."""
    agg = _aggregator(method)
    A0 = {r: torch.ones(r, 4) for r in set(preset.ranks)}
    probe = f"layers.0.{preset.groups[0].name}"
    ups = [ClientUpdate({probe: (None if agg.single_matrix else torch.zeros(4, r), A0[r])}, scale=s)
           for r, s in zip(preset.ranks, preset.scales)]
    try:
        agg.aggregate(ups)
    except ValueError as exc:
        return str(exc)
    return None


def model_for(name: str, *, quick: bool, seed: int = 0, device: torch.device | str = "cpu") -> Model:
    """Preset ``name``'s uploads as measured: the LLaMA presets on 2 of their layers when ``quick``."""
    return build_model(get_preset(name), layers=2 if (quick and name.startswith("llama")) else None, seed=seed,
                       device=device)


def method_job(name: str, model: Model, method: Method, *, quick: bool) -> Job | str:
    """The prepared :class:`Job` of one row on preset ``name`` (one warm-up call), or the
    reason it is not measured."""
    problem = _applicable(method, model.preset)
    if problem:
        return f"not applicable: {problem}"
    slow = name.startswith("llama") and _aggregator(method).dense_factorization
    if slow and quick:
        return ("quick mode: dense per-module SVD / eigensolver on 8192 x 3072 and 3072 x 3072 matrices take tens "
                "of seconds each here; --size paper runs the one-module-per-shape extrapolation")
    return prepare(model, method, subset=slow)


def run_preset(name: str, *, quick: bool, seed: int = 0, repeats: int | None = None, log=print,
               device: torch.device | str = "cpu") -> dict:
    """Measure every method on preset ``name``; returns the JSON-ready record.

    Methods are timed round-robin, one call of each per round, so that a change in the
    machine's load during the run hits every method alike and the ratios between them
    stay meaningful. A method whose warm-up call took over 20 s is timed in the first 3
    rounds only.
    """
    preset = get_preset(name)
    llama = name.startswith("llama")
    layers = 2 if (quick and llama) else None
    repeats = repeats or (3 if quick else 5)
    t0 = time.perf_counter()
    model = model_for(name, quick=quick, seed=seed, device=device)
    log(f"  built {len(model.shapes)} modules x {preset.clients} clients in {time.perf_counter() - t0:.1f} s")
    rows: list[dict] = []
    jobs: list[Job] = []
    for method in _methods(preset):
        job = method_job(name, model, method, quick=quick)
        if isinstance(job, str):
            rows.append({"method": method.label, "name": method.name, "skipped": job})
            log(f"  {method.label:<22} skipped: {job[:60]}")
            continue
        rows.append(job.row)
        jobs.append(job)
        log(f"  {method.label:<22} {job.row['downlink_pct']:7.2f}%  warm-up {job.first_s:.2f} s")
    load = [os.getloadavg()[0]]
    for i in range(repeats):
        t0 = time.perf_counter()
        for job in jobs:
            if i < 3 or job.first_s <= 20.0:
                sample(job, device)
        load.append(os.getloadavg()[0])
        log(f"  round {i + 1}/{repeats}: {time.perf_counter() - t0:.0f} s, load average {load[-1]:.1f}")
    for job in jobs:
        job.row["latency"] = Timing(tuple(job.samples), torch.get_num_threads(), str(device)).as_dict()
    del model, jobs
    gc.collect()
    return {"preset": name, "clients": preset.clients, "ranks": list(preset.ranks), "alphas": list(preset.alphas),
            "modules": preset.modules, "quick": quick, "seed": seed, "layers": layers or "all",
            "dtype": "float32", "batched": True, "repeats": repeats, "load_average_1min": load, "rows": rows,
            "device": str(device)}


def points(size: str) -> list[dict]:
    """One point per preset of the ``size`` configuration."""
    c = size_config(size, "tables123")
    return [dict(table="tables123", preset=name, quick=c["quick"], repeats=c["repeats"], seed=0)
            for name in c["presets"]]


def key(config: dict) -> str:
    return config["preset"]


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """Every method's downlink and latency on one preset (:func:`run_preset`)."""
    return run_preset(config["preset"], quick=config["quick"], seed=config["seed"], repeats=config["repeats"],
                      log=lambda s: None, device=device)
