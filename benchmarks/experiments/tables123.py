"""Downlink and server latency of every aggregator, in the shape of the paper's Tables 1-3.

The rows (which aggregators, with which options, on which uploads, and how a dense method
is timed on a preset) are :mod:`benchmarks.experiments.table_rows`'; this module times them.

For the three presets (RoBERTa-base q/k/v; LLaMA-3.2-3B, seven projections; the same
with heterogeneous ranks 4..64) it builds seeded LoRA-like client factors
(:func:`fraq.synthetic.lora_clients`), runs each aggregator through
:meth:`fraq.aggregators.Aggregator.aggregate` (batched by module shape) and reports per
method: parameters and bytes sent per client, that as a percentage of the uncompressed
FLoRA stack, and the server's aggregation latency (median and interquartile range).
Accuracy is the federated harness's job; each row records how exact its aggregate is,
the worst module's certificate (:meth:`fraq.aggregators.AggregationResult.certificate`:
``certificate_error``, ``certificate_bound``, ``certificate_rounding_level``,
``certificate_module``), computed on the warm-up call's result outside the timed calls
(over the measured modules: one per shape where a row is extrapolated).

A method that factorizes a dense matrix per module (its aggregator's
``dense_factorization``: FlexLoRA's SVD of the m x n aggregate, FLoRG's eigensolver) takes
minutes per whole-LLaMA aggregation on a CPU. Where a preset's dense work, the sum of
m n min(m, n) over its modules, is above :data:`DENSE_WORK` (LLaMA-3.2-3B), such a method
is timed on one module of every distinct shape and its latency extrapolated, each shape's
time times its number of modules; ``quick`` (every size but ``paper``) does so for every
preset whose one-module-per-shape work is at most :data:`QUICK_DENSE_WORK` (RoBERTa-base)
and skips the rest (LLaMA), and runs the LLaMA presets on 2 of their 28 layers (latency
times 14). Every extrapolated row says from how many of how many modules
(``modules_measured``, ``modules_total``). Its downlink is extrapolated alike, which is
exact where it depends only on shapes and ranks (FlexLoRA, FLoRG, FedSVD; not
FedMomentum's, whose residual rank follows each module's spectrum). Timed on one module
per shape, such a method is its own point
(``<preset>-<method>.json``), timed ``slow_rounds`` times (the size's) after a warm-up
call, so a long run resumes between methods and the table says how many samples each row
has; where the size says ``first_call_sample``, the warm-up call is the first of those
samples (its latency record says ``first_call_sample``): each of its calls takes seconds,
against first-call costs (allocating and touching a few hundred MB, MKL's workspaces) of
milliseconds, and a second warm-up would add a minute per row. Not for a method whose
first round skips a step (``partial_first_round``: FLoRG's Procrustes alignment): its
warm-up is not the call timed. A size may build a preset on fewer layers (``layers``,
latency times the layers' ratio, stated in each row's ``extrapolated``): the
heterogeneous preset's stacked rank (232) makes one whole-model call of every method
minutes.

The rows of a point are timed in paired rounds over ``launches`` processes, this one (whose
rows are prepared and warm) and ``launches`` - 1 fresh ones (:mod:`benchmarks.measure.paired`):
each row's latency carries ``round``, ``launch``,
``loops`` and the point's ``group`` id, and the analysis judges ratios between rows of
one point round by round.

A method whose dense SVD also runs on FRAQ's kernel (its class's ``kernel_variants``:
FlexLoRA, FedSVD, FedMomentum) has a row on each kernel, ``flexlora`` and
``flexlora:kernel=fraq`` (labelled ``flexlora (kernel=fraq)``), timed in the same paired rounds; the kernel row also carries
``agreement`` (:func:`kernel_agreement`): its updates against the dense row's on the same
uploads, on the modules the dense row is measured on.

Every measured row also carries the host's share of its call
(:mod:`benchmarks.measure.overhead`), counted for the row as it runs on the measuring
device, with the options ``"auto"`` resolves there (on a CPU, FRAQ's CPU basis and
stepwise pipeline; FRAQ's counts in the CUDA
configuration, which any CPU can take, are :mod:`benchmarks.bench_host`'s and
``python -m benchmarks.measure.overhead``'s): ``host_reads_per_group`` (device
synchronisations) and ``ops_per_group`` (non-view aten ops, kernel launches on a GPU) per
shape group, on the row's modules at reduced sides (``host_counted_on``), and
``python_ms_16x16``, the row's call on every module at 16 x 16 factors, where the math
is free, at one thread.

Where the size gives a ``roof_sample`` (``tiny``, ``reduced``) and the device is a CPU,
every row but a dense per-module factorization on its dense kernel also carries the call's
roofline (:func:`call_roofs`: ``roof_s``, each kernel the call runs timed alone at its
shapes at this machine's rates, weighted as its latency is), the quantity Table 5's *time /
kernels' own time* divides by; the analysis's kernel-rate check reads it. On a GPU no row
does: the budgeted GPU call times whole models, and the check is a CPU's.

Run: ``.venv/bin/python -m benchmarks.run tables123 [--size paper]``. Inputs come from
:func:`benchmarks.cases.build_model`; one result file per preset,
``<out>/tables123/<preset>.json`` (:mod:`benchmarks.results`), and one per method timed
on one module per shape. Latencies are
:meth:`benchmarks.measure.Timing.as_dict` payloads (seconds); the paper's numbers are
``analysis/paper.json``'s, read by the analysis alone.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch

from benchmarks.cases import Model, build_model
from benchmarks.experiments import Experiment, Priority
from benchmarks.measure import timed
from benchmarks.sizes import size_config
from benchmarks.experiments.table_rows import (SHAPE_ONLY, TableRow, dense_plan, module_shapes,
                                               row_aggregator, row_applicable, row_fields, row_uploads, select_rows,
                                               table_rows)
from fraq.methods import MethodSpec
from fraq.presets import get_preset

EXPERIMENT = Experiment(default=True, scale=0.37, gpu=(
    Priority(0, "Tables 1-3's headline rows on every preset, whole: FLoRA, FLoRIST as published and on its QR kernel "
                "at both tau, FRAQ at both tau", part="shared"),
    Priority(5, "Tables 1-3's other rows (FlexLoRA, FLoRG, FedSVD, FedMomentum, FedIT, ...)"),
))

__all__ = ["host_cost", "kernel_agreement", "key", "measure", "method_job", "model_for", "points", "run_preset"]


@dataclass
class Job:
    """One row's timed calls: (call, multiplier) pairs whose weighted times add to one sample.

    A full-model row has one call with multiplier 1 (or layers-extrapolation factor); a
    one-module-per-shape row has one call per shape, weighted by the number of modules of
    that shape. ``row`` holds the downlink figures from the first (warm-up) calls.
    """

    method: TableRow
    calls: list[tuple[object, float]]
    row: dict
    first_s: float
    samples: list[float] = field(default_factory=list)
    first_parts: list[float] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)
    """Seconds of the preparation's steps (the warm-up calls, the certificates, the host
    counts), for the point's log: where a point's time went when a budget cuts it."""

    def timed_calls(self):
        """The calls as one paired sample (:class:`~benchmarks.measure.paired.Weighted`), with
        the warm-up's times: the warm-up is the calibration call."""
        from benchmarks.measure.paired import Weighted

        return Weighted(self.calls, seconds=self.first_parts or None)


def prepare(model: Model, method: TableRow, *, subset: bool, timing_only: bool = False,
            roof_sample: float | None = None) -> Job:
    """Inputs, the warm-up call (its result gives the downlink), and the calls to time.

    ``timing_only``: the inputs, the warm-up call and the calls to time alone, for a fresh
    launch that only times them (:func:`group_calls`): the row's record (downlink, the
    certificate, FLOPs, the host's share) is the first process's, and recomputing it in each
    launch costs about a second per row (:data:`HOST_COST_SECONDS`).

    For FLoRG the warm-up's state is passed on, so the timed calls include the
    Procrustes step of a steady-state round (``partial_first_round``).

    ``roof_sample`` (seconds of one looped kernel sample; None: no roofs): the row's
    roofline, :func:`call_roofs` of the calls to time, on a CPU only.
    """
    agg = row_aggregator(method)
    full_layers = max(g.count for g in model.preset.groups)
    row = {"method": method.label, "spec": str(method), "name": method.name, "options": method.options,
           **row_fields(method),
           "threads": torch.get_num_threads()}
    total = model.preset.modules
    if subset:
        pieces = [([name], count, (m, n)) for (m, n), (name, count) in model.one_per_shape().items()]
        flora = model.preset.stack_params()
        row["modules_measured"] = len(pieces)
        row["extrapolated"] = (f"from {len(pieces)} of {total} modules (one of every shape), each shape's time "
                               f"and downlink times its number of modules")
        row["parts"] = [{"shape": list(shape), "module": names[0], "count": count} for names, count, shape in pieces]
    else:
        scale = full_layers / model.layers
        pieces = [(None, scale, None)]
        flora = model.flora_params()
        row["modules_measured"] = len(model.shapes)
        if scale != 1:
            row["extrapolated"] = (f"from {model.layers} of {full_layers} layers ({len(model.shapes)} of {total} "
                                   f"modules), times {scale:g}")
    row["modules_total"] = total
    calls, params, params_max, nbytes, first_s, ranks, parts_s = [], 0.0, 0.0, 0.0, 0.0, [], []
    worst: dict = {}
    certificate_s = 0.0
    flops = {"table5": 0.0, "full": 0.0}
    for names, count, _ in pieces:
        ups, state = row_uploads(model, agg, method, names)
        t0 = time.perf_counter()
        res = agg.aggregate(ups, state)
        parts_s.append(time.perf_counter() - t0)
        first_s += parts_s[-1]
        if timing_only:
            if agg.partial_first_round:
                state = res.state
            del res
            calls.append((lambda agg=agg, ups=ups, state=state: agg.aggregate(ups, state), count))
            continue
        t0 = time.perf_counter()
        worst = _worst(worst, res.certificate(ups).summary())  # outside the timed region
        certificate_s += time.perf_counter() - t0
        if agg.partial_first_round:
            state = res.state
        per_client = res.downlink_params()
        mult = count if subset else 1
        params += mult * statistics.mean(per_client)
        params_max += mult * max(per_client)
        nbytes += mult * statistics.mean(res.downlink_bytes())
        ranks += [r for r in res.ranks.values() if isinstance(r, int)]
        for m in flops:
            flops[m] += count * _model_flops(method.name, model, res.ranks, m, kernel=method.options.get("kernel"))
        del res
        calls.append((lambda agg=agg, ups=ups, state=state: agg.aggregate(ups, state), count))
    if timing_only:
        return Job(method, calls, row, first_s, first_parts=parts_s)
    row.update(modules=len(model.shapes), downlink_params=params, downlink_params_max=params_max,
               downlink_bytes=nbytes, flora_params=flora, downlink_pct=100.0 * params / flora,
               downlink_pct_max=100.0 * params_max / flora, first_call_s=first_s,
               flops_table5=flops["table5"], flops_full=flops["full"], **worst)
    if ranks and not subset:
        row["rank_mean"] = statistics.mean(ranks)
        row["rank_range"] = [min(ranks), max(ranks)]
    t0 = time.perf_counter()
    row.update(host_cost(model, agg, method, pieces[0][0] if subset else None))
    steps = {"warm-up": first_s, "certificate": certificate_s, "host counts": time.perf_counter() - t0}
    device = next(iter(model.factors.values()))[1][0].device
    if roof_sample is not None and device.type == "cpu":
        t0 = time.perf_counter()
        why = roof_skipped(method)
        row.update({"roof_skipped": why} if why else call_roofs(calls, device, roof_sample))
        steps["roofs"] = time.perf_counter() - t0
    return Job(method, calls, row, first_s, first_parts=parts_s, steps=steps)


ROOF_SAMPLES = 3
"""Samples of each kernel timed alone for a row's roofline (:func:`call_roofs`), the best kept:
fewer than Fig. 3's 5 (:data:`benchmarks.measure.kernels.SAMPLES`), since a point's rows hold
some 300-700 distinct kernels and the heterogeneous preset's largest take a tenth of a second
each; the machine's table keeps each kernel's best over runs, so the floor still tightens."""


def roof_skipped(method: TableRow) -> str | None:
    """Why the row carries no roofline, or None: a dense per-module factorization on its dense
    kernel (FlexLoRA's SVD of the m x n aggregate, FLoRG's n x n eigensolver, as published) is
    not timed kernel by kernel. Each of its kernels takes a tenth of a second to seconds and
    would be run again four times (:data:`ROOF_SAMPLES`), and such a row is extrapolated from
    one module per shape wherever Tables 1-3 time it below the paper size."""
    if row_aggregator(method).dense_factorization and method.options.get("kernel", "dense") == "dense":
        return ("a dense per-module factorization on its dense kernel: its kernels (seconds each) are not timed "
                "alone, and the row is extrapolated from one module per shape")
    return None


def call_roofs(calls: list[tuple[object, float]], device: torch.device | str, sample: float) -> dict:
    """The roofline of a row's timed calls (:func:`benchmarks.measure.kernels.kernel_roofs` at one
    torch thread, on this machine's table of kernel times, each distinct kernel timed once per
    process: ``once``), weighted as the latency is: ``roof_s``, the sum over the calls of each
    call's roof times its multiplier (a layer-extrapolated row's layers ratio, a per-shape row's
    modules of that shape), so that ``roof_s`` of two rows divide as their latencies do;
    ``roof_kernels``, the kernels the calls ran (unweighted); ``roof_threads`` (1: the dispatch
    mode sees the calling thread alone, :mod:`fraq._parallel`'s fan-out none)."""
    from benchmarks.measure import threads
    from benchmarks.measure.kernels import kernel_roofs, process_table

    total, kernels = 0.0, 0
    with threads(1):
        for fn, mult in calls:
            r = kernel_roofs(fn, device, table=process_table(device), min_sample=sample, samples=ROOF_SAMPLES,
                             once=True, gemm=False)
            total += mult * r.roof
            kernels += len(r.kernels)
    return {"roof_s": total, "roof_kernels": kernels, "roof_threads": 1}


def _worst(a: dict, b: dict) -> dict:
    """Of two :meth:`fraq.aggregators.Certificate.summary` records, the one with the larger bound
    (null, a certificate that cannot judge, counts as the largest)."""
    def bound(s):
        return math.inf if s["certificate_bound"] is None else s["certificate_bound"]

    return b if not a or bound(b) > bound(a) else a


PYTHON_REPEATS = 5
"""Calls (after one warm-up) whose median is a row's ``python_ms_16x16``: a whole RoBERTa
call at 16 x 16 factors is about 10 ms, so a row's timing costs well under 0.1 s."""


def host_cost(model: Model, agg, method: TableRow, names=None) -> dict:
    """The host's share of the row's call (:mod:`benchmarks.measure.overhead`), on the
    model's device and layers: ``host_reads_per_group`` and ``ops_per_group`` (non-view
    aten ops) of its modules ``names`` (default all) at reduced sides
    (:func:`~benchmarks.measure.overhead.counted_preset`, ``host_counted_on``), and
    ``python_ms_16x16``, the median time of its call on every module at 16 x 16 factors
    (the math free, the time Python's), at one thread."""
    from benchmarks.measure.overhead import counted_preset, per_group, python_ms

    def inputs(names):
        def of(m: Model):
            ups, state = row_uploads(m, agg, method, names)
            if agg.partial_first_round:  # a steady-state round, as timed (:func:`prepare`)
                state = agg.aggregate(ups, state).state
            return ups, state
        return of

    device = next(iter(model.factors.values()))[1][0].device
    layers = model.layers if model.layers < max(g.count for g in model.preset.groups) else None
    counts = per_group(agg, model.preset, inputs=inputs(names), layers=layers, device=device)
    ms = python_ms({str(method): agg}, model.preset, repeats=PYTHON_REPEATS, layers=layers, device=device,
                   inputs={str(method): inputs(None)})
    small = counted_preset(model.preset)
    where = "one module per shape" if names is not None else f"{model.layers} layers"
    return {"host_reads_per_group": counts.host_reads_per_group, "ops_per_group": counts.ops_per_group,
            "python_ms_16x16": ms[str(method)],
            "host_counted_on": f"{small.name}: {where}, {counts.groups} shape groups, sides "
                               f"{sorted({(g.m, g.n) for g in small.groups})}"}


def _model_flops(name: str, model: Model, ranks: dict, which: str, *, kernel: str | None = None) -> float:
    """The analytic FLOPs (:func:`fraq.aggregators.analytic_flops`, ``which`` = ``"table5"``, the
    paper's formulas, or ``"full"``, the routines the code calls) of one aggregation of the
    modules in ``ranks`` (module -> output rank; a per-client method's tuple of client ranks
    counts as the largest, the rank its one SVD is cut at), each at its shape and the
    preset's stacked rank, on the row's ``kernel`` where it names one; NaN for a method
    without a FLOP model or a model without the row (Table 5 has rows for
    :data:`fraq.flops.TABLE5_METHODS` on their published paths only). FRAQ's
    full model follows the path ``recompress`` takes
    (:func:`benchmarks.measure.methods.default_path`).

    The full model counts each module at the largest output rank of the modules of its shape
    in the call: a shape is one batched group, and its rank-dependent steps (FRAQ's R_p and
    Q U_p, FLoRIST's recovery products) run at the group's largest rank, the columns past a
    module's own masked (``p.max()`` in :func:`fraq.recompress`). Table 5's formula keeps each
    module's own rank, as the paper writes it."""
    from benchmarks.measure.methods import default_path
    from fraq.aggregators import AGGREGATORS
    from fraq.aggregators import analytic_flops
    from fraq.flops import TABLE5_METHODS

    if AGGREGATORS[name].flop_model is None or (which == "table5" and (kernel not in (None, "dense")
                                                                      or name not in TABLE5_METHODS)):
        return float("nan")
    path_kernel = {} if kernel is None else {"kernel": kernel}
    r = sum(model.preset.ranks)
    own = {module: max(p) if isinstance(p, tuple) else int(p) for module, p in ranks.items()}
    largest: dict = {}
    for module, p in own.items():
        largest[model.shapes[module]] = max(p, largest.get(model.shapes[module], 0))
    total = 0.0
    for module, p in own.items():
        m, n = model.shapes[module]
        p = largest[(m, n)] if which == "full" else p
        path = default_path(m, n, r, p) if AGGREGATORS[name].basis_backend and which == "full" else {}
        total += analytic_flops(name, m, n, r, min(p, r, m, n), model=which, **path, **path_kernel)
    return total


def sample(job: Job, device: torch.device | str = "cpu") -> None:
    """One latency sample of ``job``: its calls timed one after another, weighted."""
    total = 0.0
    for fn, mult in job.calls:
        total += mult * timed(fn, repeats=1, warmup=0, device=device).samples[0]
    job.samples.append(total)


def _layers(name: str, quick: bool, layers: int | None = None) -> int | None:
    """The layers a preset is built on: ``layers`` when given, else 2 of a LLaMA preset when
    ``quick``, else all (None)."""
    if layers is not None:
        return layers
    return 2 if (quick and name.startswith("llama")) else None


def model_for(name: str, *, quick: bool, seed: int = 0, device: torch.device | str = "cpu",
              layers: int | None = None) -> Model:
    """Preset ``name``'s uploads as measured: on ``layers`` layers (:func:`_layers`)."""
    return build_model(get_preset(name), layers=_layers(name, quick, layers), seed=seed, device=device)


def method_job(name: str, model: Model, method: TableRow, *, quick: bool, timing_only: bool = False,
               roof_sample: float | None = None) -> Job | str:
    """The prepared :class:`Job` of one row on preset ``name`` (one warm-up call; with
    ``timing_only`` its calls alone; with ``roof_sample`` its roofline: :func:`prepare`), or the
    reason it is not measured."""
    problem = row_applicable(method, model.preset)
    if problem:
        return f"not applicable: {problem}"
    plan = dense_plan(model.preset, quick=quick) if row_aggregator(method).dense_factorization else "full"
    if plan == "skip":
        return (f"measured at --size paper only: a dense per-module factorization of {name}'s modules takes "
                "about a minute per sample even on one module per shape; --size paper times it on one module per shape")
    return prepare(model, method, subset=plan == "per-shape", timing_only=timing_only, roof_sample=roof_sample)


def kernel_agreement(model: Model, method: TableRow, *, quick: bool) -> dict:
    """A kernel variant's row against its dense row (the same options without ``kernel``) on
    the same uploads (:func:`benchmarks.measure.kernel_agreement.agreement`), on the modules
    the dense row is measured on (:func:`dense_plan`: all of them, or one of every shape),
    with ``reference`` (the dense row's label) and ``modules_compared_on``; where the dense
    row is not measured at this size, only ``skipped`` and the reason."""
    from benchmarks.measure.kernel_agreement import agreement

    dense_row = TableRow(MethodSpec(method.name, tuple((k, v) for k, v in method.spec.options if k != "kernel")))
    dense = row_aggregator(dense_row)
    plan = dense_plan(model.preset, quick=quick)
    if plan == "skip":
        return {"reference": dense_row.label, "skipped": "the dense path is not measured at this size"}
    names = None if plan == "full" else [name for name, _ in model.one_per_shape().values()]
    ups, state = row_uploads(model, dense, dense_row, names)
    out = agreement(ups, dense.aggregate(ups, state), row_aggregator(method).aggregate(ups, state))
    where = "every module" if names is None else f"one module of every shape ({len(names)})"
    return dict(out, reference=dense_row.label, modules_compared_on=where)


GROUP = "benchmarks.experiments.tables123:group_calls"
"""The builder of a point's timed calls in every launch (:func:`benchmarks.measure.paired.launched`)."""


def group_calls(group: dict, device: torch.device | str = "cpu") -> dict:
    """Row spec -> its timed calls (a :class:`~benchmarks.measure.paired.Weighted` list: one
    sample is the calls' times weighted by their modules), for every measured row of ``group``
    (``preset``, ``quick``, ``seed``, ``methods``: row specs, ``layers``), on a model built here."""
    rows = select_rows(table_rows(get_preset(group["preset"])), group["methods"], group["preset"])
    model = model_for(group["preset"], quick=group["quick"], seed=group["seed"], device=device,
                      layers=group.get("layers"))
    out = {}
    for method in rows:
        job = method_job(group["preset"], model, method, quick=group["quick"], timing_only=True)
        if not isinstance(job, str):
            out[str(method)] = job.timed_calls()
    return out


def run_preset(name: str, *, quick: bool, seed: int = 0, rounds: int | None = None, launches: int = 1, methods=None,
               log=print, device: torch.device | str = "cpu", layers: int | None = None,
               first_call_sample: bool = False, roof_sample: float | None = None) -> dict:
    """Measure ``methods`` (row specs in :mod:`fraq.methods`' grammar, ``fraq:tau=0.95``:
    :func:`~benchmarks.experiments.table_rows.select_rows`; default every row) on preset
    ``name``; returns the JSON-ready record, each row with its ``spec`` (the row's text) and
    ``method`` (its label, :func:`~benchmarks.experiments.table_rows.row_label`).

    Methods are timed in paired rounds, one sample of each per round (a call under 1 ms
    looped to 1 ms), ``rounds`` rounds in each of ``launches`` launches (fresh processes
    beyond the first: :mod:`benchmarks.measure.paired`), so that a change in the machine's
    load hits every method of a round alike and the ratios between them are judged round by
    round. Every row's ``latency`` carries the rounds, launches and group id, the record
    the load average before and after. ``layers``: build the preset on this many layers
    (latency extrapolated to all, stated in each row). ``first_call_sample`` (one launch
    only): each row's warm-up call is its round 0 and ``rounds`` - 1 rounds follow, each
    row's latency saying ``first_call_sample``: for calls of seconds (the dense methods on
    one module per shape), where the first call's own costs are within the calls' spread.
    ``roof_sample``: each row's roofline as well, on a CPU (:func:`prepare`).
    """
    from benchmarks.measure.paired import launched, merged, paired_rounds
    preset = get_preset(name)
    rows_all = table_rows(preset)
    selected = rows_all if methods is None else select_rows(rows_all, list(methods), name)
    layers = _layers(name, quick, layers)
    rounds = rounds or (3 if quick else 5)
    if first_call_sample and launches != 1:
        raise ValueError(f"first_call_sample needs launches=1 (got launches={launches}): a fresh launch's warm-up "
                         "is untimed")
    t0 = time.perf_counter()
    model = model_for(name, quick=quick, seed=seed, device=device, layers=layers)
    log(f"  built {len(model.shapes)} modules x {preset.clients} clients in {time.perf_counter() - t0:.1f} s")
    rows: list[dict] = []
    jobs: list[Job] = []
    for method in selected:
        job = method_job(name, model, method, quick=quick, roof_sample=roof_sample)
        if isinstance(job, str):
            rows.append({"method": method.label, "spec": str(method), "name": method.name, **row_fields(method),
                         "skipped": job})
            log(f"  {method.label:<22} skipped: {job[:60]}")
            continue
        if method.options.get("kernel", "dense") != "dense":
            t1 = time.perf_counter()
            job.row["agreement"] = kernel_agreement(model, method, quick=quick)
            job.steps["agreement"] = time.perf_counter() - t1
        rows.append(job.row)
        jobs.append(job)
        steps = ", ".join(f"{k} {v:.2f} s" for k, v in job.steps.items())
        log(f"  {method.label:<22} {job.row['downlink_pct']:7.2f}%  {steps}  (+{time.perf_counter() - t0:.1f} s)")
    load = [os.getloadavg()[0]]
    log(f"  timing {len(jobs)} rows: {rounds} rounds x {launches} launch(es)  (+{time.perf_counter() - t0:.1f} s)")
    if jobs and launches == 1 and first_call_sample:  # the warm-ups are round 0
        timing = merged([_after_first_calls(jobs, rounds, device)], device=device)
        for timing_row in timing.values():
            timing_row["first_call_sample"] = True
    elif jobs and launches == 1:  # this process: the jobs built above
        timing = merged([paired_rounds({str(j.method): j.timed_calls() for j in jobs}, rounds, device=device)],
                        device=device)
    elif jobs:  # launch 0 here, on the jobs built above; then fresh processes, each building the model again
        here = paired_rounds({str(j.method): j.timed_calls() for j in jobs}, rounds, device=device)
        group = dict(preset=name, quick=quick, seed=seed, methods=[str(j.method) for j in jobs], layers=layers)
        for job in jobs:
            job.calls = []
        del model
        gc.collect()
        timing = launched(GROUP, [group], rounds=rounds, launches=launches, device=device, first=here)[0]
    load.append(os.getloadavg()[0])
    log(f"  {rounds} rounds x {launches} launch(es), load average {load[-1]:.1f}  (+{time.perf_counter() - t0:.1f} s)")
    for job in jobs:
        job.row["latency"] = timing[str(job.method)]
    del jobs
    gc.collect()
    return {"preset": name, "clients": preset.clients, "ranks": list(preset.ranks), "alphas": list(preset.alphas),
            "modules": preset.modules, "quick": quick, "seed": seed, "layers": layers or "all",
            "dtype": "float32", "batched": True, "rounds": rounds, "launches": launches, "load_average_1min": load,
            "rows": rows, "device": str(device)}


def _after_first_calls(jobs: list[Job], rounds: int, device) -> dict:
    """:func:`~benchmarks.measure.paired.paired_rounds`' record of ``jobs`` with each job's
    warm-up call (its parts' times weighted as a sample's) as round 0 and ``rounds`` - 1
    timed rounds after it, one loop per part (a part this slow is never looped)."""
    from benchmarks.measure.paired import MIN_SAMPLE, paired_rounds

    if torch.device(device).type != "cpu":
        raise ValueError(f"first_call_sample times the warm-up on the host's clock: a CPU's only (device={device})")
    for j in jobs:
        if row_aggregator(j.method).partial_first_round:
            raise ValueError(f"first_call_sample: {j.method}'s first round skips a step of the rounds timed "
                             "(partial_first_round), so its warm-up is no sample")
        if min(j.first_parts) < MIN_SAMPLE:
            raise ValueError(f"first_call_sample: {j.method}'s warm-up has a part of {min(j.first_parts):.2g} s, under "
                             f"one sample's {MIN_SAMPLE:g} s (such a call is looped, and its first call is no sample)")
    calls = {str(j.method): j.timed_calls() for j in jobs}
    out = paired_rounds(calls, rounds - 1, device=device) if rounds > 1 else \
        {k: dict(samples=[], loops=[1] * len(c), round=[], launch=[]) for k, c in calls.items()}
    for j in jobs:
        rec = out[str(j.method)]
        rec["samples"].insert(0, sum(w * s for (_, w), s in zip(j.calls, j.first_parts)))
        rec["round"], rec["launch"] = list(range(len(rec["samples"]))), [0] * len(rec["samples"])
    return out


def points(size: str) -> list[dict]:
    """Per preset of the ``size`` configuration: one point with every row timed in paired
    rounds (``rounds`` per launch, ``launches`` launches; ``layers`` of the preset where the
    size gives them), and one point per dense method timed on one module per shape
    (:func:`dense_plan`), ``slow_rounds`` rounds in this process: a call of it takes a
    minute, and each launch would add a warm-up call. Where the size says ``dense_alone``
    (a GPU's), every dense method is a point of its own, timed as its plan says, and these
    points come after every preset's shared one. Where it names ``headline`` methods, a
    preset's shared point holds only their rows and the preset's other rows are a point
    ``others`` of their own, after every preset's shared point: a budget that cuts the part
    keeps the paper's headline comparison (FRAQ against FLoRA and FLoRIST) on every preset.
    A point's ``methods`` are its rows' specs (``fraq:tau=0.95``); where the size gives a
    ``roof_sample``, every point carries it (its rows' rooflines: :func:`call_roofs`)."""
    c = size_config(size, "tables123")
    out, others, later, timed = [], [], [], {}  # timed: (row spec, module shapes) -> the point timing it alone
    for name in c["presets"]:
        preset = get_preset(name)
        alone = []
        if not c["quick"] and (c.get("dense_alone") or dense_plan(preset, quick=False) == "per-shape"):
            alone = [m for m in table_rows(preset)
                     if row_aggregator(m).dense_factorization and row_applicable(m, preset) is None]
        shared = [m for m in table_rows(preset) if m not in alone]
        rest = [m for m in shared if "headline" in c and m.name not in c["headline"]]
        base = dict(table="tables123", preset=name, quick=c["quick"], seed=0,
                    **({"roof_sample": c["roof_sample"]} if "roof_sample" in c else {}))
        point = dict(base, rounds=c["rounds"], launches=c["launches"], layers=c.get("layers", {}).get(name))
        out.append(dict(point, methods=[str(m) for m in shared if m not in rest], part="shared"))
        if rest:
            others.append(dict(point, methods=[str(m) for m in rest], part="others"))
        for m in alone:
            same = timed.get((str(m), module_shapes(preset)))
            if same is not None and str(m) in SHAPE_ONLY:  # the same work: timed once, serving both tables
                same["serves"].append(name)
                continue
            point = dict(base, methods=[str(m)], rounds=c["slow_rounds"], launches=1, part=m.name, layers=None,
                         serves=[], **({"first_call_sample": True} if c.get("first_call_sample")
                                       and not row_aggregator(m).partial_first_round else {}))
            timed[(str(m), module_shapes(preset))] = point
            (later if c.get("dense_alone") else out).append(point)
    return out + others + later


HOST_COST_SECONDS = 1.0
"""A row's :func:`host_cost`: three calls at reduced sides and six at 16 x 16 factors."""

BUILD_SECONDS = 10.0
"""Building a preset's client factors, on one idle core (the largest, LLaMA's)."""


def calls(config: dict) -> int:
    """Calls of each row per point: a warm-up here (the downlink; it calibrates the loops of
    this process's rounds; with ``first_call_sample`` it is the first round), the rounds, and a
    warm-up in each fresh process."""
    c = config
    return (0 if c.get("first_call_sample") else 1) + c["launches"] * c["rounds"] + (c["launches"] - 1)


def cost(config: dict) -> float:
    """A dense method on one module per shape: its SVDs per call (:func:`calls`); a paired
    point: every method's work per call, about 2.4e-9 s per unit of (m + n) r^2 summed over
    the measured modules (r the stacked rank: FLoRIST's and FRAQ's QRs and products; 15 s a
    call for LLaMA's 196 modules at r = 64, minutes at the heterogeneous preset's r = 232),
    plus the dense methods where they run on the whole model, plus each row's host counts
    (:data:`HOST_COST_SECONDS`), plus a model build (:data:`BUILD_SECONDS`) here and in
    each fresh process, plus the rows' rooflines where the point has a ``roof_sample``
    (:func:`roofs_cost`)."""
    c = config
    preset = get_preset(c["preset"])
    n = calls(c)
    shapes = {(g.m, g.n) for g in preset.groups}
    if c.get("part", "shared") not in ("shared", "others"):
        served = len(c.get("serves") or [])  # a build and one call (the downlink) per preset served
        if dense_plan(preset, quick=c["quick"]) == "full":  # timed on the whole model
            return BUILD_SECONDS + n * sum(g.count * _dense_seconds(c["part"], g.m, g.n) for g in preset.groups)
        return (1 + served) * BUILD_SECONDS + (n + served) * sum(_dense_seconds(c["part"], m, n_) for m, n_ in shapes)
    full = max(g.count for g in preset.groups)
    layers = _layers(c["preset"], c["quick"], c.get("layers"))
    fraction = 1.0 if layers is None else min(layers, full) / full
    builds = c["launches"]  # here, and in each fresh process
    out = builds * BUILD_SECONDS + n * fraction * 2.4e-9 * sum(g.count * (g.m + g.n) for g in preset.groups) * \
        sum(preset.ranks) ** 2
    dense = [m.name for m in select_rows(table_rows(preset), c["methods"], c["preset"])
             if row_aggregator(m).dense_factorization and row_applicable(m, preset) is None]
    out += len(c["methods"]) * HOST_COST_SECONDS
    if c.get("roof_sample") is not None:
        out += roofs_cost(c, fraction * 2.4e-9 * sum(g.count * (g.m + g.n) for g in preset.groups)
                          * sum(preset.ranks) ** 2)
    plan = dense_plan(preset, quick=c["quick"])
    for name in dense:
        if plan == "per-shape":
            out += n * sum(_dense_seconds(name, m, n_) for m, n_ in shapes)
        elif plan == "full":
            out += n * fraction * sum(g.count * _dense_seconds(name, g.m, g.n) for g in preset.groups)
    return out


ROOF_KEYS = 20
"""Distinct kernels (op, shapes, strides) a roofed row adds to its point, per square root of the
preset's distinct module shapes, twice that where the client ranks differ (their rank-dependent
shapes): counted on the reduced presets, 301 over RoBERTa-base's 16 roofed rows (one shape),
533 over LLaMA-3.2-3B's 14 (four shapes, two layers), 678 over the heterogeneous preset's 8."""

ROOF_KEY_SECONDS = 0.001
"""A kernel's fixed cost in a roofline beside the :data:`ROOF_SAMPLES` looped samples of the
point's ``roof_sample`` each: its first timed call, its arguments copied where it writes them,
and the dispatch mode's bookkeeping."""

ROOF_SHARE = 0.4
"""The share of a point's call work (the rows' kernels) timed anew by its rooflines: rows at
two thresholds of one method share the stacks' factorizations (FRAQ at tau = 0.80 and 0.95,
FLoRIST's three QR-kernel rows), which ``once`` times once."""


def roofs_cost(config: dict, work: float) -> float:
    """The rooflines of a point's rows (:func:`call_roofs`), from ``work``, the seconds of one
    call of every row (:func:`cost`'s model): each row's call run once more under the dispatch
    mode (``work``), each kernel not yet timed run once and then :data:`ROOF_SAMPLES` times
    (``(1 + ROOF_SAMPLES) * ROOF_SHARE * work``), and each distinct kernel's samples of at
    least ``roof_sample`` plus its fixed cost (:data:`ROOF_KEYS`, :data:`ROOF_KEY_SECONDS`).
    An estimate of a first run in a process; a long kernel's samples are its own time, which
    the work term counts."""
    c = config
    preset = get_preset(c["preset"])
    rows = [m for m in select_rows(table_rows(preset), c["methods"], c["preset"])
            if roof_skipped(m) is None and row_applicable(m, preset) is None
            and (not row_aggregator(m).dense_factorization or dense_plan(preset, quick=c["quick"]) != "skip")]
    shapes = len({(g.m, g.n) for g in preset.groups})
    keys = ROOF_KEYS * len(rows) * math.sqrt(shapes) * (2 if len(set(preset.ranks)) > 1 else 1)
    per_key = ROOF_SAMPLES * c["roof_sample"] + ROOF_KEY_SECONDS
    return (1 + (1 + ROOF_SAMPLES) * ROOF_SHARE) * work + keys * per_key


def _dense_seconds(name: str, m: int, n: int) -> float:
    """One module's dense factorization, on one idle core: FlexLoRA's SVD of the m x n
    aggregate (:func:`~benchmarks.experiments.dense_seconds`), FLoRG's eigensolver of its
    n x n Gram (syevd with vectors, 14 n^3 / 3 FLOPs, :mod:`fraq._routine_flops`) at
    :data:`~benchmarks.experiments.DENSE_RATE`."""
    from benchmarks.experiments import DENSE_RATE, dense_seconds

    return 14 * n**3 / 3 / DENSE_RATE if name == "florg" else dense_seconds(m, n)


def key(config: dict) -> str:
    """The point's file name: its preset, then its part (a method timed alone: its registry
    name, and its kernel where it runs one, ``llama-3.2-3b-flexlora-rsvd``)."""
    part = config.get("part", "shared")
    if part == "shared":
        return config["preset"]
    kernel = dict(MethodSpec.parse(config["methods"][0]).options).get("kernel") if part != "others" else None
    return f"{config['preset']}-{part}" + (f"-{kernel}" if kernel else "")


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """The downlink and latency of the point's rows on its preset (:func:`run_preset`).

    Off the CPU, the point logs its steps on stderr (each row's preparation, the rounds), with
    the seconds since it began: a GPU call is budgeted, and a point its budget cuts writes
    nothing, so the log is what says where its time went. On the CPU it logs nothing (the
    runner's progress line is the output there)."""
    c = config
    quiet = torch.device(device).type == "cpu"
    log = (lambda s: None) if quiet else (lambda s: print(f"[{key(c)}]{s}", file=sys.stderr, flush=True))
    rec = run_preset(c["preset"], quick=c["quick"], seed=c["seed"], rounds=c["rounds"], launches=c["launches"],
                     methods=c["methods"], log=log, device=device, layers=c.get("layers"),
                     first_call_sample=c.get("first_call_sample", False), roof_sample=c.get("roof_sample"))
    served = {}
    for other in c.get("serves") or []:  # :data:`SHAPE_ONLY`: the other preset's row, this latency
        model = model_for(other, quick=c["quick"], seed=c["seed"], device=device)
        rows_of = table_rows(model.preset)
        served[other] = []
        for r in rec["rows"]:
            (method,) = select_rows(rows_of, [r["spec"]], other)
            job = method_job(other, model, method, quick=c["quick"])  # one call: its downlink
            row = dict(job.row, latency=r["latency"], timed_on=c["preset"])
            row["extrapolated"] = (f"{row['extrapolated']}; latency timed on {c['preset']}'s modules of the same "
                                   "shapes (the dense factorization's time does not depend on the client ranks)")
            served[other].append(row)
        del model
        gc.collect()
    if served:
        rec["served"] = served
    return rec
