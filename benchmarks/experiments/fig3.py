"""Fig. 3 and Table 5: every method at every point of the r and d sweeps, four metrics.

FRAQ, FLoRIST and FlexLoRA aggregate the same clients' factors (stacking included) for
``modules`` square d x d modules to a rank-p adapter, in one batched call (``batched``)
or one module at a time (``unbatched``, the paper's dashed curves), along the total
stacked rank r at d = ``d_fixed`` (``sweep="r"``, Fig. 3a) and along the hidden size d
at r = ``r_fixed`` (``sweep="d"``, Fig. 3b). p is fixed, so every method does the same
job at every point. At each point:

- ``timing``: latency of the call, the methods of one (sweep, d, r, mode) timed together
  in paired rounds over ``launches`` fresh processes (:mod:`benchmarks.measure.paired`:
  ``round``, ``launch``, ``loops`` and a ``group`` id per result, so that the analysis
  judges each ratio round by round); with ``min_rounds``, until the comparisons the
  claims read one by one are decided (:func:`decides`);
- ``peak_bytes``: tensor peak memory above the inputs;
- ``counted_flops`` (batched; LAPACK included), ``analytic_flops_table5`` (the paper's
  formula) and ``analytic_flops_full`` (the pipeline the code runs);
- the limits (batched, one torch thread; :mod:`benchmarks.measure.kernels`): ``roof_s``,
  the call's roofline (each kernel alone at its shapes, the larger of its FLOP and bytes
  terms, summed), and ``gemm_bound_s``, the counted FLOPs at the large-GEMM rate; at the
  methods the size names where it names some (``roof_methods``: FRAQ's at ``reduced``,
  :func:`roofs`), at every method's otherwise;
- ``rss_cold`` / ``rss_warm`` (batched points of the d sweep, CPU): the resident set's
  growth over a first and a second call in a process that has run nothing else
  (:func:`benchmarks.measure.rss.rss_growth`), the cross-check of ``peak_bytes``;
- fidelity: the float32 result's relative Frobenius error against a float64 reference of
  the same stack, the float64 Eckart-Young optimum at p, and the error above it
  (``excess``, and ``excess_quadrature`` = sqrt(rel^2 - opt^2), the part a truncating
  rank does not square away; :mod:`benchmarks.measure.fidelity`), means over modules.

Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["fig3"]``; a method's limits (FlexLoRA's
largest d) come from its :class:`~benchmarks.measure.methods.MethodTraits`. The asv classes
``bench_recompress.RankSweep`` / ``HiddenSweep`` and the pytest-benchmark checks call the
same :func:`call` and :func:`metrics`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.experiments import Experiment, Priority, with_registered
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, scale=1.8,
                        gpu=(Priority(1, "Fig. 3: the r and d sweeps, every method (qr-svd and rsvd included)"),))

__all__ = ["DENSE", "GROUP", "call", "cost", "decides", "group", "group_calls", "key", "measure", "metrics",
           "paired_timing", "points", "prepare_points", "reference", "roofs", "timed_calls", "timed_seconds",
           "timing_cost"]

MODES = ("batched", "unbatched")


def points(size: str) -> list[dict]:
    """Every (sweep, d, r, method, mode) of the ``size`` sweeps, as result configs."""
    from benchmarks.measure.methods import traits

    c = size_config(size, "fig3")
    grid = [("r", c["d_fixed"], r) for r in c["ranks"]] + [("d", d, c["r_fixed"]) for d in c["dims"]]
    out = []
    for sweep, d, r in grid:
        compared = [m for m in with_registered(c["methods"]) if traits(m).skip_reason(d) is None]
        for mode in MODES:  # one group's points in a row: the runner measures the group once
            for method in compared:
                out.append(dict(figure="fig3", sweep=sweep, method=method, mode=mode, d=d, D=d, r=r,
                                p=min(c["p"], r, d), modules=c["modules"], client_rank=c["client_rank"],
                                rounds=c["rounds"], launches=c["launches"], compared=compared,
                                rss=c.get("rss", True), roof_sample=c.get("roof_sample", ROOF_SAMPLE),
                                **adaptive(c), **roofs(c, method),
                                **({"decides": decides(compared)} if "min_rounds" in c else {})))
    return out


def adaptive(size_config: dict) -> dict:
    """``{"min_rounds": n}`` where the size sets it (the rounds stop once every comparison of
    a group is decided, after at least n of them: :func:`benchmarks.measure.paired.paired_rounds`),
    else nothing, so a size without it keeps its configs as they are."""
    return {"min_rounds": size_config["min_rounds"]} if "min_rounds" in size_config else {}


DENSE = "flexlora"
"""The dense path the sweeps' claims compare FRAQ with (FlexLoRA's time growing faster
with d, :mod:`analysis.sections.fig3`; FRAQ no slower past r = d, :mod:`analysis.sections.clients`)."""


def decides(compared: list[str]) -> list[list[str]]:
    """The comparisons at one point that claims read one by one, as pairs of its methods:
    FRAQ against the dense path (:data:`DENSE`) and each kernel variant against its dense
    path (``flexlora:kernel=fraq`` against ``flexlora``: :mod:`analysis.kernel_variants`).
    With ``min_rounds`` the rounds stop once these are decided
    (:func:`benchmarks.measure.paired.paired_rounds`). The claim over every point ("FRAQ is
    the fastest method": the smallest ratio over points, round by round) is judged over the
    rounds all points have (:func:`analysis.verdicts.judge`), so rounds past ``min_rounds``
    at some points would not enter it; a pair no claim reads alone (FRAQ against a method
    nearly as fast: its other backends, the textbook baselines at small r) would hold every
    method of the point, FlexLoRA's dense SVD included, to the most rounds."""
    from benchmarks.measure.methods import split_method

    out = [["fraq", DENSE]] if {"fraq", DENSE} <= set(compared) else []
    for m in compared:
        name, options = split_method(m)
        if options.get("kernel", "dense") != "dense" and set(options) == {"kernel"} and name in compared:
            out.append([name, m])
    return out


def roofs(size_config: dict, method: str) -> dict:
    """``{"roofs": bool}`` where the size names the methods whose batched points carry the
    kernel roofs (``roof_methods``), else nothing (every batched point carries them). No
    verdict reads the roofs; Table 5's *time / kernels' own time* column shows them, and timing every
    kernel of every method's call alone is most of a sweep's time on one core (some 10,000
    kernels at ``reduced``), so the runner's default size times FRAQ's only."""
    named = size_config.get("roof_methods")
    return {} if named is None else {"roofs": method in named}


def expected_rounds(config: dict) -> float:
    """Rounds a point's timing is expected to take in all: ``launches`` x ``rounds``, or with
    ``min_rounds``, halfway between it and ``rounds`` per launch (a decided comparison stops
    at ``min_rounds``, an open one runs to ``rounds``), a quarter of the way where the
    rounds wait on ``decides`` alone (comparisons with the dense path, rarely open); every
    round for a method of a ``hold`` pair (:func:`benchmarks.experiments.clients.points`)."""
    c = config
    if any(c["method"] in pair for pair in c.get("hold") or ()):  # a held pair runs every round
        return c["launches"] * c["rounds"]
    share = 0.25 if "decides" in c else 0.5
    per_launch = c["min_rounds"] + share * (c["rounds"] - c["min_rounds"]) if c.get("min_rounds") else c["rounds"]
    return c["launches"] * per_launch


ROOF_SAMPLE = 2e-3
"""Seconds of one looped sample of a kernel timed alone for the roofs
(:data:`benchmarks.measure.kernels.MIN_SAMPLE`); the ``tiny`` size, a test of the flow,
takes a tenth. The resident-set check (``rss``) is off at ``tiny``: it starts a measuring
server, and ``tests/test_rss.py`` checks it on its own."""

GROUP = "benchmarks.experiments.fig3:group_calls"
"""The builder of a group's calls in every launch (:func:`benchmarks.measure.paired.launched`)."""


def group(config: dict) -> dict:
    """The point's group: its config without what is the method's own (``method``, the methods
    being ``compared``, and ``roofs``, which the timing does not read)."""
    return {k: v for k, v in config.items() if k not in ("method", "roofs")}


def group_calls(group: dict, device: torch.device | str = "cpu") -> dict:
    """Every compared method's timed call (:func:`call`) at the group's point."""
    return {m: call(dict(group, method=m), device) for m in group["compared"]}


def prepare_points(configs: list[dict], device: torch.device | str = "cpu", target: str = GROUP,
                   on_group: Callable[[list[dict]], None] | None = None) -> None:
    """The paired timings of every group of ``configs``, in ``launches`` launches for all of
    them; ``on_group(points)`` with a group's points once its timing is complete (the
    runner's progress advances by their :func:`timing_cost`)."""
    import json

    from benchmarks.measure.paired import measure_groups

    members: dict[str, list[dict]] = {}
    for c in configs:
        members.setdefault(json.dumps(group(c), sort_keys=True, default=str, allow_nan=False), []).append(c)
    done = None if on_group is None else \
        (lambda g: on_group(members.get(json.dumps(g, sort_keys=True, default=str, allow_nan=False), [])))
    for (rounds, launches, min_rounds), groups in _by_plan(configs).items():
        measure_groups(target, groups, rounds=rounds, launches=launches, device=device, min_rounds=min_rounds,
                       on_group=done)


def _by_plan(configs: list[dict]) -> dict:
    out: dict = {}
    for c in configs:
        out.setdefault((c["rounds"], c["launches"], c.get("min_rounds")), []).append(group(c))
    return out


def paired_timing(config: dict, device: torch.device | str = "cpu", target: str = GROUP) -> dict:
    """The point's method's share of its group's paired timing (its group measured here if not prepared)."""
    from benchmarks.measure.paired import cached

    return cached(target, group(config), config["method"], rounds=config["rounds"], launches=config["launches"],
                  device=device, min_rounds=config.get("min_rounds"))


def timed_calls(config: dict) -> int:
    """Calls of the point's method for its timing: a warm-up per launch and one per round
    (the rounds expected: :func:`expected_rounds`)."""
    return round(config["launches"] + expected_rounds(config))


LAUNCH_SECONDS = 2.5
"""An interpreter's start with torch and the suite imported, on one idle core: paid
``launches`` times per experiment (every group of a run is measured in the same launches),
so left out of the points' costs."""


def timed_seconds(seconds: float, config: dict) -> float:
    """The share of :func:`call_seconds` spent in the point's paired timing: each expected
    round at least :data:`~benchmarks.measure.paired.MIN_SAMPLE` plus 5 ms, and a warm-up
    per launch."""
    from benchmarks.measure.paired import MIN_SAMPLE

    c = config
    return expected_rounds(c) * (max(seconds, MIN_SAMPLE) + 0.005) + c["launches"] * (seconds + 0.005)


def call_seconds(seconds: float, config: dict, metric_calls: int = 3) -> float:
    """A point's estimated seconds from its method's seconds per call: each timed round at
    least :data:`~benchmarks.measure.paired.MIN_SAMPLE` (a faster call is looped to it) plus
    5 ms, each warm-up, and each of the metrics' ``metric_calls`` calls (result, peak
    memory, FLOP count: traced, so 50 ms of overhead each)."""
    return timed_seconds(seconds, config) + metric_calls * (seconds + 0.05)


def _call_seconds_estimate(config: dict) -> float:
    """One call's estimated seconds: the method's analytic FLOPs (Table 5's; FRAQ's order for
    a method without a FLOP model, the textbook baselines) at about
    :data:`~benchmarks.experiments.DENSE_RATE`."""
    from benchmarks.experiments import DENSE_RATE
    from benchmarks.measure.methods import split_method
    from fraq.aggregators import analytic_flops

    c = config
    name, options = split_method(c["method"])
    kernel = {"kernel": options["kernel"]} if "kernel" in options else {}
    try:
        flops = c["modules"] * analytic_flops(name, c["d"], c["D"], c["r"], c["p"], model="table5", **kernel)
    except ValueError:  # a method without a FLOP model (the textbook baselines): FRAQ's order
        flops = c["modules"] * analytic_flops("fraq", c["d"], c["D"], c["r"], c["p"], model="table5")
    return flops / DENSE_RATE


def timing_cost(config: dict) -> float:
    """The share of :func:`cost` spent in the point's paired timing (:func:`timed_seconds`)."""
    return timed_seconds(_call_seconds_estimate(config), config)


def cost(config: dict) -> float:
    """The method's analytic FLOPs (:func:`fraq.aggregators.analytic_flops`) per call at about
    :data:`~benchmarks.experiments.DENSE_RATE`, over its calls (:func:`call_seconds`); a batched
    point adds its roofs (each kernel replayed up to three times more, and about 10 ms of
    looped samples per kernel for some 60 kernels), and a batched point of the d sweep the
    resident-set check's child (:mod:`benchmarks.measure.rss`: 0.3 s of fork and inputs, and
    two calls)."""
    c = config
    seconds = _call_seconds_estimate(c)
    roofs = 4 * seconds + 0.6 if c["mode"] == "batched" and c.get("roofs", True) else 0.0
    rss = 0.3 + 2 * seconds if c["mode"] == "batched" and c["sweep"] == "d" and c.get("rss", True) else 0.0
    return call_seconds(seconds, c) + roofs + rss


def key(config: dict) -> str:
    c = config
    return f"{c['sweep']}-{c['method']}-{c['mode']}-d{c['d']}-r{c['r']}"


def _clients(c: dict) -> tuple[tuple, tuple]:
    return cases.clients(c["d"], c["D"], cases.sweep_ranks(c["r"], c["client_rank"]), c["modules"])


def _cut(config: dict) -> dict:
    """How a point's output rank is chosen: the energy rule at ``tau`` when the config has
    one (the clients sweep, :mod:`benchmarks.experiments.clients`), else the fixed ``p``."""
    return dict(tau=config["tau"]) if config.get("tau") is not None else dict(rank=config["p"])


def call(config: dict, device: torch.device | str = "cpu"):
    """The timed call of a point: a zero-argument callable, inputs already on ``device``,
    returning ``(Bg, Ag, p)`` per module batch (batched) or a list of them (unbatched)."""
    from benchmarks.measure.methods import clients_as_batch, get_method

    c = config
    fn = get_method(c["method"])
    Bs, As = to_device(_clients(c), torch.device(device))
    Bs, As, cut = list(Bs), list(As), _cut(c)
    if c["mode"] == "batched":
        return lambda: fn(Bs, As, **cut)
    per = [clients_as_batch(Bs, As, i) for i in range(c["modules"])]
    return lambda: [fn(b, a, **cut) for b, a in per]


def _adapter(out, mode: str):
    """(Bg, Ag, p) on the CPU for the whole batch, from what :func:`call` returned."""
    if mode == "batched":
        Bg, Ag, p = out
    else:
        Bg = torch.stack([o[0] for o in out])
        Ag = torch.stack([o[1] for o in out])
        p = torch.stack([torch.as_tensor(o[2]) for o in out])
    return Bg.cpu(), Ag.cpu(), (p.cpu() if isinstance(p, torch.Tensor) else p)


@functools.lru_cache(maxsize=2)
@functools.lru_cache(maxsize=2)
def reference(d: int, D: int, r: int, client_rank: int, modules: int):
    """The exact stacks and their float64 singular values (shared by every method at a point:
    kept for the next calls, since a point's methods are measured one after another, and the
    float64 SVD of a 768 x 3072 aggregate takes seconds). Read-only: no caller writes them."""
    import fraq
    from fraq.reference import reference_svd

    Bs, As = cases.clients(d, D, cases.sweep_ranks(r, client_rank), modules)
    B, A = fraq.stack(list(Bs), list(As))
    return B, A, reference_svd(B, A)[1]


def metrics(config: dict, device: torch.device | str = "cpu", *, roofs: bool = True) -> dict:
    """Everything but the latency: peak memory, FLOPs (counted and analytic), fidelity and
    each module's output rank (``ranks``); at a batched point also the counted FLOPs and,
    with ``roofs`` (and the point's own ``roofs`` where its size sets one, :func:`roofs`),
    the call's limits (:func:`_roofs`: every kernel replayed alone, for
    Table 5's "time / kernels' own time"; the clients sweep, which no table reads them from, leaves
    them out)."""
    from benchmarks.measure import fidelity

    c, device = config, torch.device(device)
    fn = call(c, device)
    result, peak, fc = _one_call(fn, device, count=c["mode"] == "batched")
    Bg, Ag, p = _adapter(result, c["mode"])
    del result
    B, A, S = reference(c["d"], c["D"], c["r"], c["client_rank"], c["modules"])
    f = fidelity(B, A, Bg, Ag, p, singular_values=S)
    ranks = torch.as_tensor(p).reshape(-1).expand(c["modules"]).tolist()
    out = dict(ranks=ranks, peak_bytes=peak.peak,
               relative_error=float(f.relative_error.mean()), optimal_error=float(f.optimal_error.mean()),
               excess=float(f.excess.mean()), excess_quadrature=float(f.excess_quadrature.mean()),
               excess_quadrature_max=float(f.excess_quadrature.max()))
    if fc is not None:
        out.update(counted_flops=fc.total, uncounted=list(fc.uncounted),
                   **(_roofs(fn, device, c.get("roof_sample", ROOF_SAMPLE)) if roofs and c.get("roofs", True) else {}))
        if c["sweep"] == "d" and c.get("rss", True):  # the memory row of the figure: the tensor peak cross-checked by the resident set
            from benchmarks.measure.rss import rss_growth

            out.update(rss_growth(__name__, c, str(device)))
    out.update(_analytic(c, ranks, device))
    return out


def _one_call(fn, device: torch.device, *, count: bool):
    """One call of ``fn`` at one torch thread that gives its result, its peak tensor memory
    (:func:`benchmarks.measure.peak_memory`) and, with ``count``, its counted FLOPs
    (:func:`benchmarks.measure.count_flops`, whose dispatch mode then wraps the memory
    measurement; None without): a point's metrics from one call where three calls gave them.
    The FLOP counter's mode leaves the peak and net bytes exactly as they are without it, and
    on the CPU a process's first call peaks exactly as a later one (``tests/test_fig3_metrics.py``);
    on CUDA the first call in a process allocates cuBLAS's and cuSOLVER's workspaces through
    torch's allocator, so one call runs first there. The result is the one-thread call's."""
    from benchmarks.measure import count_flops, peak_memory, threads

    if device.type != "cpu":
        fn()
    box = []

    def kept():
        box.append(fn())
        return box[-1]

    held = {}

    def measured():
        held["peak"] = peak_memory(kept, device=device)

    with threads(1):
        fc = count_flops(measured) if count else measured()
    return box[0], held["peak"], fc


def _roofs(fn, device: torch.device, sample: float = ROOF_SAMPLE) -> dict:
    """The call's limits at one torch thread (:func:`benchmarks.measure.kernels.kernel_roofs`,
    the kernel table of this machine): ``roof_s`` (its roofline), its FLOP and bytes terms,
    and ``gemm_bound_s`` (counted FLOPs over the large-GEMM rate measured once per process)."""
    from benchmarks.measure import threads
    from benchmarks.measure.kernels import RateTable, kernel_roofs, table_path

    with threads(1):
        r = kernel_roofs(fn, device, table=RateTable(table_path(device)), gemm_rate=_gemm_rate(str(device)),
                         min_sample=sample)
    return dict(roof_s=r.roof, flop_roof_s=r.flop_roof, bytes_roof_s=r.bytes_roof, gemm_bound_s=r.gemm_bound,
                gemm_rate=r.gemm_rate, kernel_count=len(r.kernels), roof_threads=1)


@functools.lru_cache(maxsize=4)
def _gemm_rate(device: str) -> float:
    from benchmarks.measure import gemm_rate, threads

    with threads(1):
        return gemm_rate(2048, device=device)


def _analytic(c: dict, ranks: list[int], device: torch.device) -> dict:
    """The point's analytic FLOPs summed over its modules' output ranks: Table 5's formula
    (the paper's, Householder only) and the pipeline the code runs (a method running FRAQ's
    basis backends counts the backend it ran, ``fraq:backend=<backend>`` that backend); NaN where
    a model has no entry (Table 5 for another backend, a backend without a FLOP model or
    with a step count)."""
    from benchmarks.measure.methods import default_backend, default_path, runs_backend, split_method
    from fraq.aggregators import analytic_flops

    method, options = split_method(c["method"])
    named = options.get("backend")
    kernel = {"kernel": options["kernel"]} if "kernel" in options else {}  # a dense-SVD method on FRAQ's kernel
    fraq_ = runs_backend(c["method"])
    backend = (named or default_backend(device)) if fraq_ else None
    d, D, r = c["d"], c["D"], c["r"]

    def total(full: bool, **kw) -> float:
        try:  # the full model follows the path recompress takes at each module's (d, D, r, p)
            return float(sum(analytic_flops(method, d, D, r, pp, **kw, **kernel, **(default_path(d, D, r, pp)
                                                                                     if full and fraq_ else {}))
                             for pp in ranks))
        except ValueError:
            return math.nan

    table5 = total(False, model="table5") if backend in (None, "householder") else math.nan
    full = total(True, model="full", backend=backend or "householder")
    return dict(backend=backend, analytic_flops_table5=table5, analytic_flops_full=full)


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """One point's result: ``timing`` (:func:`paired_timing`) and :func:`metrics`."""
    return dict(timing=paired_timing(config, device), **metrics(config, device))
