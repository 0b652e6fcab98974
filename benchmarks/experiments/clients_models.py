"""Whole models with many clients: time and peak memory of FRAQ, FLoRIST and FlexLoRA.

A cross-device round aggregates hundreds of clients: the RoBERTa-base preset's shapes with
128 and 512 clients of rank 8 (r = 1024 and 4096, past d = 768) and LLaMA-3.2-3B's with
64 (r = 512). Each job is one model preset with K clients of one rank
(:func:`preset_with`), every module, and each method runs its whole-model aggregation
(:meth:`fraq.aggregators.Aggregator.aggregate`, batched by module shape, stacking
included), as Tables 1-3 do (:mod:`benchmarks.experiments.tables123`, whose ``prepare``
and ``sample`` this module reuses).

- **Memory first.** Before the inputs are built, :func:`estimate` bounds the job's memory
  (the clients' factors, their stacks, each method's workspace and outputs) and
  compares it with the memory available now (:func:`available_bytes`). A job whose inputs
  do not fit, or a method of which not even one module fits, is not run, and a method
  whose whole-model call would not fit is extrapolated from one module per shape: one
  line says so with the estimate, instead of an out-of-memory kill.
- **Time.** Each method is first timed on one module per distinct shape, weighted by the
  number of modules of that shape. When that estimate is above the size's ``budget_s``
  the method's latency is that extrapolation, labelled ``extrapolated``; otherwise the
  whole model is timed. Methods are timed round-robin, ``repeats`` rounds.
- **Peak memory.** Tensor peak above the inputs (:func:`benchmarks.measure.peak_memory`)
  of one call of what was timed: the whole model, or, for an extrapolated method, the
  largest one-module call (``peak_scope`` says which), beside the estimate.

Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["clients_models"]``: ``jobs`` (preset,
clients, layers: every layer when None, else the first ``layers``, latency extrapolated
to the whole model and labelled), ``methods``, ``tau``, ``repeats``, ``budget_s``.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys

import torch

from benchmarks.experiments import Experiment
from benchmarks.sizes import size_config

EXPERIMENT = Experiment()

__all__ = ["available_bytes", "estimate", "key", "measure", "points", "preset_with"]

F32 = 4
"""Bytes per float32 element: every input, stack and workspace here is float32."""

MARGIN = 1.5
"""The workspace models below count each method's large tensors once; the temporaries
around them (LAPACK's copies and work arrays, the aggregators' per-client outputs) came to
at most about a third more in the measured peaks, so the models are taken 1.5 times."""


def points(size: str) -> list[dict]:
    """One config per job (preset, K) of the ``size`` configuration."""
    c = size_config(size, "clients_models")
    return [dict(table="clients_models", preset=j["preset"], clients=j["clients"], client_rank=c["client_rank"],
                 layers=j.get("layers"), methods=list(c["methods"]), tau=c["tau"], repeats=c["repeats"],
                 budget_s=c["budget_s"], seed=0) for j in c["jobs"]]


def key(config: dict) -> str:
    return f"{config['preset']}-K{config['clients']}"


def preset_with(name: str, clients: int, client_rank: int):
    """Preset ``name``'s modules with ``clients`` clients of rank ``client_rank`` (its own
    LoRA alpha, so the same scale)."""
    from fraq.presets import get_preset

    base = get_preset(name)
    alpha = base.alphas[0] * client_rank / base.ranks[0]
    return dataclasses.replace(base, name=f"{name} ({clients} clients of rank {client_rank})",
                               ranks=(client_rank,) * clients, alphas=(alpha,) * clients)


def available_bytes() -> int:
    """Memory available to a new allocation now: ``MemAvailable`` of /proc/meminfo (what the
    kernel can hand out without swapping), else the free physical pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _workspace(method: str, m: int, n: int, r: int, count: int) -> int:
    """Upper bound on a method's float32 workspace for ``count`` m x n matrices of stacked
    rank r processed together, outputs at full rank s = min(m, n, r) included. The model
    follows what the method's aggregator declares it does: a dense matrix per module
    (``dense_factorization``), FRAQ's basis and Gram (``basis_backend``), else thin SVDs
    of both stacks (FLoRIST)."""
    from fraq.aggregators import AGGREGATORS

    cls = AGGREGATORS[method]
    d, D = min(m, n), max(m, n)
    s = min(d, r)
    out = (m + n) * s
    if cls.dense_factorization:
        # the dense d x D products of one chunk (<= 1 GiB of them), their thin SVDs' U, Vh and
        # LAPACK work (about one more dense matrix)
        chunk = max(1, min(count, 2**30 // (m * n * F32)))
        return F32 * (chunk * (2 * m * n + (m + n) * d) + count * out)
    if cls.basis_backend:
        # recompress runs a batch chunk by chunk (CHUNK_BYTES of working set, at least one
        # matrix); per matrix the oriented copies of both stacks, an r x r (factored) or
        # s x s Gram with its eigenvectors, H = R Y (s x D)
        one = F32 * ((d + D) * r + 2 * r * r + s * D)
        return max(1, min(count, _chunk_bytes() // one)) * one + F32 * count * out
    # thin SVDs of both stacks (a copy of each, U and Vh) and the small core's SVD
    return F32 * count * (2 * (m + n) * r + 2 * s * r + 3 * s * s + out)


def _chunk_bytes() -> int:
    """recompress's chunk working set (:data:`fraq._parallel.CHUNK_BYTES`; 16 MiB in a fraq
    without it, an older commit measured by ``benchmarks.regress``)."""
    try:
        from fraq.internals import CHUNK_BYTES
    except ImportError:
        return 16 * 2**20
    return CHUNK_BYTES


def estimate(preset, methods: list[str], layers: int | None = None) -> dict:
    """Bytes a job on ``preset`` (its first ``layers`` layers; all when None) needs:
    ``factors`` (the clients' uploads, the inputs), ``stacks`` (twice that: an aggregator
    gathers the uploads of one shape into batches and stacks them weighted), per method ``workspace`` (the largest shape's batch, :func:`_workspace`, times
    :data:`MARGIN`) and
    ``peak`` (stacks + workspace: the tensor peak above the inputs of a whole-model call),
    and ``one_module_peak`` (the same for the largest single-module call)."""
    r = sum(preset.ranks)
    shapes: dict[tuple[int, int], int] = {}  # the aggregators batch every module of one shape together
    for g in preset.groups:
        shapes[(g.m, g.n)] = shapes.get((g.m, g.n), 0) + (g.count if layers is None else min(layers, g.count))
    groups = [(m, n, c) for (m, n), c in shapes.items()]
    factors = sum(c * (m + n) * r for m, n, c in groups) * F32
    stacks = 2 * factors
    work = {mt: int(MARGIN * max(_workspace(mt, m, n, r, c) for m, n, c in groups)) for mt in methods}
    one = {mt: max(2 * F32 * (m + n) * r + int(MARGIN * _workspace(mt, m, n, r, 1)) for m, n, _ in groups)
           for mt in methods}
    return dict(factors=factors, stacks=stacks, workspace=work, peak={mt: stacks + w for mt, w in work.items()},
                one_module_peak=one)


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def _method(name: str, tau: float):
    """The table row of aggregator ``name``, cutting at ``tau`` when it takes one (FlexLoRA
    truncates each client at its own rank instead)."""
    import inspect

    from benchmarks.experiments.tables123 import TableRow
    from fraq.aggregators import AGGREGATORS
    from fraq.methods import MethodSpec

    takes_tau = "tau" in inspect.signature(AGGREGATORS[name].__init__).parameters
    return TableRow(MethodSpec.of(name, {"tau": tau} if takes_tau else {}))


def measure(config: dict, device: torch.device | str = "cpu", log=None) -> dict:
    """Time and peak memory of every method on one job, or the one-line reason a job or a
    method was not run (its estimate against the memory available), which also goes to
    ``log`` (default: a line on stderr)."""
    from benchmarks.cases import build_model
    from benchmarks.experiments.tables123 import prepare, sample
    from benchmarks.measure import Timing, peak_memory

    c = config
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    preset = preset_with(c["preset"], c["clients"], c["client_rank"])
    full = estimate(preset, c["methods"])
    est = estimate(preset, c["methods"], c["layers"])  # what is built here
    avail = available_bytes()
    head = dict(preset=c["preset"], clients=c["clients"], client_rank=c["client_rank"], stacked_rank=sum(preset.ranks),
                modules=preset.modules, layers=c["layers"] or "all", estimate=est, estimate_full_model=full,
                available_bytes=avail, load_average_1min=[os.getloadavg()[0]])
    need = est["factors"] + est["stacks"]
    if need > avail:
        reason = (f"{c['preset']} with {c['clients']} clients of rank {c['client_rank']} needs about {_gib(need)} "
                  f"(factors {_gib(est['factors'])}, stacks {_gib(est['stacks'])}) before any method's workspace, "
                  f"{_gib(avail)} available: not run")
        log(f"clients_models: {reason}")
        return dict(head, skipped=reason, rows=[])
    model = build_model(preset, layers=c["layers"], seed=c["seed"], device=device)
    rows, jobs = [], []
    for name in c["methods"]:
        method = _method(name, c["tau"])
        free = available_bytes()
        if est["one_module_peak"][name] > free:
            reason = (f"{method.label} on {c['preset']} with {c['clients']} clients needs about "
                      f"{_gib(est['one_module_peak'][name])} above its inputs for one module, {_gib(free)} "
                      "available: not run")
            log(f"clients_models: {reason}")
            rows.append(dict(method=method.label, name=name, skipped=reason))
            continue
        job = prepare(model, method, subset=True)
        sample(job, device)
        guess = job.samples.pop()
        free = available_bytes()
        if guess <= c["budget_s"] and est["peak"][name] <= free:
            job = prepare(model, method, subset=False)
        elif guess <= c["budget_s"]:
            reason = (f"the whole model needs about {_gib(est['peak'][name])} above its inputs (stacks "
                      f"{_gib(est['stacks'])}, workspace {_gib(est['workspace'][name])}), {_gib(free)} available")
            log(f"clients_models: {method.label} on {c['preset']} with {c['clients']} clients: {reason}: "
                "extrapolated from one module per shape")
            job.row["extrapolated"] += f" ({reason})"
        job.row["one_module_per_shape_s"] = guess
        jobs.append(job)
        rows.append(job.row)
    for _ in range(c["repeats"]):
        for job in jobs:
            sample(job, device)
        head["load_average_1min"].append(os.getloadavg()[0])
    for job in jobs:
        name, whole = job.method.name, "parts" not in job.row
        job.row["latency"] = Timing(tuple(job.samples), torch.get_num_threads(), str(device)).as_dict()
        job.row["peak_bytes"] = max(peak_memory(fn, device=device).peak for fn, _ in job.calls)
        job.row["peak_scope"] = ("largest one-module call" if not whole else "whole model" if c["layers"] is None
                                 else f"first {c['layers']} layer(s)")
        job.row["estimated_peak_bytes"] = est["peak"][name] if whole else est["one_module_peak"][name]
        job.row["estimated_peak_bytes_full_model"] = full["peak"][name]
    del model, jobs
    gc.collect()
    return dict(head, rows=rows, tau=c["tau"], repeats=c["repeats"], budget_s=c["budget_s"], device=str(device))
