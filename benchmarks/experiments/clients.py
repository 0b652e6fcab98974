"""Fig. 3's third axis: the number of clients K, past the hidden size.

Cross-device rounds aggregate tens to hundreds of clients, so the stacked rank r = K r_k
passes the smaller side d of a projection (d = 768 at K = 96 clients of rank 8). The
paper's appendix keeps FRAQ exact there with s = min(d, r) and a cost linear in r past d,
never above forming the dense matrix; this sweep measures whether the code does. Each
point is one shape (m x n, m <= n, so d = m and D = n), one number of clients K of rank
``client_rank`` (r = K client_rank), one method, cutting by the energy rule at ``tau``
(every method the same rule, so each does the same job), on ``modules`` equal-shape
modules in one batched call:

- ``fraq`` and ``fraq:backend=<backend>`` (the exact backends the size lists), FLoRIST, and
  FlexLoRA: the dense path (form B A, a thin SVD, the same energy rule), which is also
  what a user falls back to;
- the same measurements as Fig. 3 (:func:`benchmarks.experiments.fig3.call` and
  :func:`~benchmarks.experiments.fig3.metrics`, which this module reuses): latency, tensor
  peak memory, counted and analytic FLOPs, and the float32 result's error above the
  float64 Eckart-Young optimum at its own rank;
- the energy rule checked against float64: ``rank_float64``, the rank the rule gives on
  the float64 spectrum of the same stack, and ``energy_kept``, the float64 energy fraction
  the method's rank holds (a method whose float32 total misses part of the spectrum stops
  early and keeps less than ``tau``).

Sizes: :data:`benchmarks.sizes.SIZES` ``[size]["clients"]``: ``shapes`` as ``[m, n, Ks]``
or ``[m, n, Ks, options]``, the options of that shape: ``rounds`` (per launch, in place of
the size's) and ``only`` (method -> the Ks it runs at, where a call of it takes a minute
or more; the sizes say why each cap is where it is). The methods of one K are timed
together in paired rounds over ``launches`` fresh processes (:mod:`benchmarks.measure.paired`);
with ``min_rounds`` the rounds stop once the comparisons the claims read are decided
(:func:`decides`).
FlexLoRA's largest-d limit of the 12-module Fig. 3 sweeps is not applied: the dense path
is the comparison this sweep exists for, and its points hold one or two modules.
:func:`ratios` times FRAQ against the dense path interleaved along the same points and fits
the growth exponents of FRAQ's time in K before and after r = d (``python -m
benchmarks.roofline --clients SIZE`` prints them against the project's targets).
"""

from __future__ import annotations

import math

import torch

from benchmarks.experiments import Experiment, Priority, fig3, with_registered
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, scale=1.2, gpu=(Priority(2, "the clients sweep"),))

__all__ = ["call", "cost", "decides", "energy_check", "growth", "key", "measure", "metrics", "points", "prepare_points",
           "ratios", "timing_cost"]

call = fig3.call
"""The timed call of a point (:func:`benchmarks.experiments.fig3.call`; the config's
``tau`` makes every method cut by the energy rule)."""


def points(size: str) -> list[dict]:
    """Every (shape, K, method) of the ``size`` sweep, as result configs (Fig. 3's fields,
    so :func:`call` and :func:`metrics` read them as they read Fig. 3's). Where the size sets
    ``min_rounds``, FRAQ and the dense path run every round at the points past r = d all the
    same: the claim on them (FRAQ no slower than the dense path at any of them,
    :mod:`analysis.sections.clients`) is judged round by round over the rounds they all have,
    and FRAQ and the dense path are close there, so one point's extra rounds would not enter
    it unless every point has them. In one launch that pair is the points' ``hold`` and the
    other methods leave the rounds once their own comparisons are decided
    (:func:`benchmarks.measure.paired.paired_rounds`); over several launches, whose rounds
    are concatenated, every method runs every round."""
    c = size_config(size, "clients")
    out = []
    for m, n, ks, *options in c["shapes"]:
        if m > n:
            raise ValueError(f"clients shape {m} x {n}: list it as m <= n (d = m, D = n)")
        opt = options[0] if options else {}
        rounds = opt.get("rounds", c["rounds"])
        for K in ks:
            compared = [x for x in with_registered(c["methods"]) if K in opt.get("only", {}).get(x, [K])]
            extra = {"decides": fig3.decides(compared)} if "min_rounds" in c else {}
            first = min(c["min_rounds"], rounds) if "min_rounds" in c else None
            if first is not None and K * c["client_rank"] >= m:  # past r = d: every round (:func:`points`)
                if c["launches"] == 1 and {"fraq", fig3.DENSE} <= set(compared):
                    extra["hold"] = [["fraq", fig3.DENSE]]
                else:
                    first = rounds
            for method in compared:
                out.append(dict(figure="clients", sweep="K", method=method, mode="batched", d=m, D=n, K=K,
                                r=K * c["client_rank"], p=None, tau=c["tau"], modules=c["modules"],
                                client_rank=c["client_rank"], rounds=rounds, launches=c["launches"],
                                compared=compared, **fig3.adaptive(dict(c, min_rounds=first)
                                                                   if first is not None else c), **extra))
    return out


decides = fig3.decides
"""The comparisons the claims on a point's timings read (:func:`benchmarks.experiments.fig3.decides`):
FRAQ against the dense path (where they cross, and FRAQ no slower past r = d) and each kernel
variant against its dense path."""


prepare_points = fig3.prepare_points
"""The paired timings of the points' groups: the methods at one (shape, K), interleaved
round by round over ``launches`` fresh processes (:func:`benchmarks.experiments.fig3.prepare_points`)."""


def key(config: dict) -> str:
    c = config
    return f"{c['method']}-{c['d']}x{c['D']}-K{c['K']}"


def _call_seconds_estimate(config: dict) -> float:
    """One call's estimated seconds on one idle core: the method's analytic FLOPs on the path
    it takes (:func:`fraq.aggregators.analytic_flops`, ``model="full"``) at the largest rank the
    energy rule can keep, min(d, r), at :data:`~benchmarks.experiments.DENSE_RATE`."""
    from benchmarks.experiments import DENSE_RATE
    from benchmarks.measure.methods import default_path, runs_backend, split_method
    from fraq.aggregators import analytic_flops

    c = config
    name, options = split_method(c["method"])
    backend = options.get("backend")
    d, D, r = c["d"], c["D"], c["r"]
    p = min(d, r)
    path = default_path(d, D, r, p) if runs_backend(c["method"]) else {}
    if "kernel" in options:  # a dense-SVD method on FRAQ's kernel
        path = dict(path, kernel=options["kernel"])
    try:
        flops = analytic_flops(name, d, D, r, p, model="full", backend=backend or "householder", **path)
    except ValueError:  # a backend without a FLOP model (or one that needs its step count), a method without one
        flops = analytic_flops(name if runs_backend(c["method"]) else "fraq", d, D, r, p, model="full",
                               **{k: v for k, v in path.items() if k != "kernel"})
    return c["modules"] * flops / DENSE_RATE


def cost(config: dict) -> float:
    """The point's estimated seconds on one idle core (the runner's progress and
    ``--estimate``): one call's (:func:`_call_seconds_estimate`) over its calls
    (:func:`benchmarks.experiments.fig3.call_seconds`)."""
    return fig3.call_seconds(_call_seconds_estimate(config), config)


def timing_cost(config: dict) -> float:
    """The share of :func:`cost` spent in the point's paired timing
    (:func:`benchmarks.experiments.fig3.timed_seconds`)."""
    return fig3.timed_seconds(_call_seconds_estimate(config), config)


def energy_check(S: torch.Tensor, ranks: list[int], tau: float) -> dict:
    """The energy rule on the float64 spectrum ``S`` (modules, s) against the ranks a
    method chose: ``rank_float64`` (per module, the smallest p whose leading sigma_i^2
    hold ``tau`` of the total), ``energy_kept`` (per module, the float64 energy fraction of
    the chosen rank) and its minimum over modules, ``energy_kept_min``."""
    e = S.double().square()
    frac = e.cumsum(-1) / e.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    rank64 = ((frac < tau).sum(-1) + 1).clamp(max=S.shape[-1])
    kept = [float(frac[i, p - 1]) if p > 0 else 0.0 for i, p in enumerate(ranks)]
    return dict(rank_float64=rank64.tolist(), energy_kept=kept, energy_kept_min=min(kept))


def metrics(config: dict, device: torch.device | str = "cpu") -> dict:
    """Fig. 3's metrics of the point (:func:`benchmarks.experiments.fig3.metrics`, without
    the kernel roofs, which only Table 5 reads, from Fig. 3's points) and the energy rule
    against float64 (:func:`energy_check`)."""
    c = config
    out = fig3.metrics(c, device, roofs=False)
    S = fig3.reference(c["d"], c["D"], c["r"], c["client_rank"], c["modules"])[2]
    out.update(energy_check(S, out["ranks"], c["tau"]))
    return out


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """One point's result: ``timing`` (the paired timing of its group,
    :func:`benchmarks.experiments.fig3.paired_timing`) and :func:`metrics`."""
    return dict(timing=fig3.paired_timing(config, device), **metrics(config, device))


# ----------------------------------------------------------------------------- interleaved ratios


def growth(ks: list[int], times: list[float]) -> float:
    """Least-squares exponent a of time ~ K^a (NaN with fewer than two distinct K)."""
    if len(set(ks)) < 2:
        return math.nan
    lx = [math.log(k) for k in ks]
    ly = [math.log(t) for t in times]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sxx


def ratios(size: str = "reduced", *, repeats: int = 5, method: str = "fraq", dense: str = "flexlora",
           shapes: list[str] | None = None, device: torch.device | str = "cpu", log=print) -> dict:
    """``method``'s latency over the dense path's at every (shape, K) of the ``size`` sweep,
    each pair timed round-robin (:func:`benchmarks.measure.round_robin`) so that a machine
    whose speed drifts slows both alike, at the current torch threads.

    ``shapes``: only these (``"768x3072"``), default all. Returns ``{"rows": [...],
    "shapes": [...]}``: a row per point (``m, n, K, r, ms, dense_ms, ratio``) and per shape
    the exponents of ``method``'s time in K up to r = d and from r = d on
    (``growth_below``, ``growth_above``), the largest ratio at r >= d (``worst_above``)
    and the ratios below r = d/2 (``below_half``). Each point's line goes to ``log``.
    """
    from benchmarks.measure import round_robin

    c = size_config(size, "clients")
    chosen = [(m, n, ks) for m, n, ks, *_ in c["shapes"] if shapes is None or f"{m}x{n}" in shapes]
    rows, summary = [], []
    for m, n, ks in chosen:
        for K in ks:
            base = dict(figure="clients", sweep="K", mode="batched", d=m, D=n, K=K, r=K * c["client_rank"], p=None,
                        tau=c["tau"], modules=c["modules"], client_rank=c["client_rank"])
            t = round_robin({x: call(dict(base, method=x), device) for x in (method, dense)}, repeats, device)
            ms, dense_ms = t[method].median * 1e3, t[dense].median * 1e3
            rows.append(dict(m=m, n=n, K=K, r=base["r"], ms=ms, dense_ms=dense_ms, ratio=ms / dense_ms))
            log(f"  {m}x{n}  K = {K:4d}  r = {base['r']:5d} ({base['r'] / m:4.2f} d)  {method} {ms:9.1f} ms  "
                f"{dense} {dense_ms:9.1f} ms  {method} / {dense} {ms / dense_ms:5.2f}")
        mine = [x for x in rows if (x["m"], x["n"]) == (m, n)]
        below = [x for x in mine if x["r"] <= m]
        above = [x for x in mine if x["r"] >= m]
        summary.append(dict(m=m, n=n, growth_below=growth([x["K"] for x in below], [x["ms"] for x in below]),
                            growth_above=growth([x["K"] for x in above], [x["ms"] for x in above]),
                            worst_above=max((x["ratio"] for x in above), default=math.nan),
                            below_half=[x["ratio"] for x in mine if 2 * x["r"] <= m]))
    return dict(size=size, method=method, dense=dense, tau=c["tau"], client_rank=c["client_rank"],
                modules=c["modules"], repeats=repeats, threads=torch.get_num_threads(), rows=rows, shapes=summary)
