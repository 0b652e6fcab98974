"""FRAQ against peft's own merge (``add_weighted_adapter``) on real ``PeftModel`` s.

Per point (a base model of :data:`benchmarks.peft_merge.MODELS` with K client adapters)
five merges of the same adapters, each adding one adapter to the same ``PeftModel``
(:class:`benchmarks.peft_merge.AdapterMerge`):

- ``peft-cat``: peft's exact concatenation (rank sum_k r_k);
- ``peft-svd`` (as published: peft's defaults), ``peft-svd-thin`` (at its best: the reduced
  SVD, and on CUDA the Jacobi driver) and ``fraq`` at the same rank p for every module;
- ``fraq`` at the energy threshold tau, and ``peft-svd`` at the per-module ranks FRAQ
  chose there, through ``rank_pattern``.

Measured like every other method: latency (the methods timed round-robin, one call of
each per round in a balanced order, so that drifting load hits all alike, the per-round
ratios pair up and no method always runs after the same one),
tensor peak memory above the inputs (:func:`benchmarks.measure.peak_memory`, on the
first call, whose adapter also gives the errors), each module's relative error against
the exact float64 aggregate and the excess over the float64 Eckart-Young optimum at its
rank (:mod:`fraq.reference`), output ranks and parameters. Removing a timed call's
adapter again is outside the timed region.

Sweep as data: :data:`benchmarks.sizes.SIZES` (``tiny`` for tests, ``reduced`` for
``make run``, ``paper`` adds the full RoBERTa-base and two LLaMA-3.2-3B-shaped layers,
whose dense 8192 x 3072 SVDs take peft about a minute per layer on one core).

Run: ``.venv/bin/python -m benchmarks.run peft [--size paper]``; one result file per
point, ``<out>/peft/<key>.json`` (:mod:`benchmarks.results`).
"""

from __future__ import annotations

import statistics
import time

import torch

from benchmarks.experiments import Experiment

EXPERIMENT = Experiment(default=True, scale=1.4)

__all__ = ["key", "measure", "points"]


def points(size: str) -> list[dict]:
    """The configs of a ``size`` run (:data:`benchmarks.sizes.SIZES` ``[size]["peft"]``).

    ``slow_repeats`` = 0 times peft's svd merge by its first call alone (the one that also
    gives its adapter, errors and peak memory), ``first_call_sample`` in its row: for a call
    of minutes (dense 8192 x 3072 SVDs) a warm-up changes nothing a timer sees, while the
    profiler that records the peak adds about 0.1 ms per op, a few hundred ops."""
    from benchmarks.sizes import size_config

    return [dict(figure="peft", **c) for c in size_config(size, "peft")["points"]]


def cost(config: dict) -> float:
    """peft's svd merge runs an SVD of every module's dense delta, twice per point (rank p
    and FRAQ's ranks), on its first call and its ``slow_repeats`` timed ones (none: the
    first call is the sample, :func:`points`); the rest is seconds per point."""
    from benchmarks.experiments import dense_seconds
    from benchmarks.peft_merge import MODELS
    from fraq.presets import PRESETS

    c = config
    spec = MODELS.get(c["model"])
    layers = c["layers"] or (spec.layers if spec else 1)
    shapes = [(g.m, g.n) for g in PRESETS[c["model"]].groups] if c["model"] in PRESETS else [(384, 384)] * 4
    per_layer = sum(dense_seconds(m, n) for m, n in shapes)
    return 10.0 + 2 * (c["slow_repeats"] + 1) * layers * per_layer


def key(config: dict) -> str:
    """The result file's name for ``config``."""
    layers = "all" if config["layers"] is None else config["layers"]
    return f"{config['model']}-L{layers}-p{config['p']}-tau{config['tau']:g}"


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """Build the point's clients, run every method (see the module docstring), return the result."""
    from benchmarks.measure import peak_memory, timed
    from benchmarks.measure.timing import balanced_order
    from benchmarks.peft_merge import AdapterMerge, MODELS, build_clients, fraq_ranks, module_fidelity

    device = torch.device(device)
    spec = MODELS[config["model"]]
    t0 = time.perf_counter()
    clients = build_clients(config["model"], layers=config["layers"], device=device)
    build_s = time.perf_counter() - t0
    stacks = clients.stacks()
    p, tau = config["p"], config["tau"]
    tau_ranks = fraq_ranks(clients, tau)
    # peft at its best beside its defaults at the one rank p (at FRAQ's per-module ranks peft's
    # rank_pattern path decomposes at the largest of them, the same kernels: its defaults only)
    methods = [AdapterMerge("peft-cat"), AdapterMerge("peft-svd", rank=p), AdapterMerge("peft-svd-thin", rank=p),
               AdapterMerge("fraq", rank=p), AdapterMerge("peft-svd", ranks=tau_ranks), AdapterMerge("fraq", tau=tau)]
    rows = []
    for meth in methods:
        made: list[str] = []
        t1 = time.perf_counter()
        peak = peak_memory(lambda meth=meth: made.append(meth(clients)), device=device)
        first_s = time.perf_counter() - t1
        fid = module_fidelity(stacks, clients.merged(made[0]))
        clients.delete()
        rows.append(dict(method=meth.name, setting=meth.setting, label=meth.label, peak_bytes=peak.peak,
                         first_call_s=first_s, ranks=fid["rank"], excess=fid["excess"],
                         relative_error=fid["relative_error"], **fid["summary"], samples_s=[]))
    repeats = {i: config["slow_repeats"] if m.name.startswith("peft-svd") else config["repeats"]
               for i, m in enumerate(methods)}
    for rnd in range(max(repeats.values())):
        for i in balanced_order(len(methods), rnd):  # each method after every other alike
            if rnd < repeats[i]:
                t = timed(lambda i=i: methods[i](clients), repeats=1, warmup=0, device=device)
                rows[i]["samples_s"].append(t.samples[0])
                clients.delete()
    for i, row in enumerate(rows):
        if repeats[i] == 0:  # a call of minutes: its first call is its one sample (:func:`points`)
            row.update(samples_s=[row["first_call_s"]], first_call_sample=True)
        s = row["samples_s"]
        row.update(median_s=statistics.median(s), min_s=min(s), max_s=max(s), n=len(s))
    shapes = sorted({tuple(layer.get_base_layer().weight.shape) for layer in clients.layers.values()})
    every = [tuple(layer.get_base_layer().weight.shape) for layer in clients.layers.values()]
    for meth, row in zip(methods, rows):
        row["flops_full"] = _model_flops(meth.name, meth.setting, every, int(sum(spec.ranks)), p)
    return dict(modules=len(clients.layers), shapes=[list(s) for s in shapes], clients=len(clients.adapters),
                client_ranks=[int(r) for r in spec.ranks], client_alphas=list(spec.alphas),
                data_sizes=clients.data_sizes, peft_weights=clients.peft_weights(), build_s=build_s,
                tau_ranks=sorted(tau_ranks.values()), threads=torch.get_num_threads(), rows=rows,
                peft_version=_version("peft"), transformers_version=_version("transformers"))


def _model_flops(name: str, setting: str, shapes: list[tuple[int, int]], r: int, p: int) -> float | None:
    """The routine-true FLOP model of one merge at the one rank ``p`` (setting ``rank=p``) over
    every module (``(m, n)``, the weight's out x in shape; r the stacked rank): peft's svd
    merge as published or thin (:func:`fraq.flops.peft_svd_flops`, its dense deltas, their
    sum and the m x n SVD) and FRAQ (:func:`fraq.aggregators.analytic_flops`, on the path
    ``recompress`` takes). None for the other rows (peft's cat forms no decomposition, and a
    per-module rank pattern runs peft at its largest rank, FRAQ at each module's)."""
    from benchmarks.measure.methods import default_path
    from fraq.aggregators import analytic_flops
    from fraq.flops import peft_svd_flops

    if setting != f"rank={p}":
        return None
    if name in ("peft-svd", "peft-svd-thin"):
        return float(sum(peft_svd_flops(m, n, r, p, full_matrices=name == "peft-svd") for m, n in shapes))
    if name == "fraq":
        return float(sum(analytic_flops("fraq", min(m, n), max(m, n), r, p, model="full",
                                        **default_path(min(m, n), max(m, n), r, p)) for m, n in shapes))
    return None


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)
