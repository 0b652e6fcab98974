"""The reduced and paper sweeps behind Figs. 1, 3, 4 and Tables 4-5, written as results files.

A sweep is data (:data:`CONFIGS`); running it calls the project's measurement layer
(:mod:`fraq.measure`: ``time_call``, ``peak_memory``, ``count_flops``, ``fidelity``,
``analytic_flops``, the Table 4 variants, methods by name) and the aggregators' downlink
accounting, and writes one JSON per result with its config, the machine record, versions
and git sha (:func:`write_result`). Nothing here computes a measurement itself; the
figures are drawn from the files by :mod:`analysis.figures` and :mod:`analysis.tables`.

Every timing runs at :data:`THREADS` torch thread(s) (1 by default: on 2-core machines
shared with other jobs, 2-thread LAPACK calls have been seen to slow 100x), float32.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

__all__ = ["CONFIGS", "THREADS", "DTYPE", "jobs", "run_job", "write_result", "versions"]

THREADS = int(os.environ.get("FRAQ_ANALYSIS_THREADS", "1"))
DTYPE = torch.float32
METHODS = ("fraq", "florist", "flexlora")

CONFIGS: dict[str, dict] = {
    # Under 10 minutes on 2 shared cores. FlexLoRA's dense SVDs limit what is feasible.
    "reduced": dict(
        fig3=dict(modules=2, client_rank=8, p=8, d_fixed=768, r_fixed=80,
                  ranks=[16, 32, 64, 128, 256], dims=[256, 512, 768, 1536, 3072],
                  flexlora_max_d=768, flexlora_ranks=[16, 64, 256], repeats=5, slow_repeats=3),
        fig4_rank=dict(preset="llama-3.2-3b", layers=1, ranks=[1, 2, 4, 8, 16, 24, 32, 48, 64],
                       flexlora_max_d=0),
        fig4_cond=dict(shape=[768, 768], rank=64, clients=8, batch=2, kappas=[1, 1e2, 1e4, 1e6, 1e8, 1e10]),
        table4=dict(m=8192, n=3072, modules=4, clients=8, client_rank=8, p=8, repeats=7),
        fig1=dict(preset="llama-3.2-3b", layers=1, clients=[2, 4, 8, 16], client_ranks=[4, 8, 16],
                  taus=[0.80, 0.90, 0.95]),
    ),
    # Seconds: small shapes for the tests and the notebooks' CI run (not the paper's shapes).
    "tiny": dict(
        fig3=dict(modules=2, client_rank=8, p=4, d_fixed=64, r_fixed=16, ranks=[8, 16], dims=[32, 64],
                  flexlora_max_d=64, flexlora_ranks=[8, 16], repeats=3, slow_repeats=3),
        fig4_rank=dict(preset="roberta-base", layers=1, ranks=[2, 8, 40, 80], flexlora_max_d=0),
        fig4_cond=dict(shape=[64, 64], rank=16, clients=4, batch=2, kappas=[1, 1e5, 1e10]),
        table4=dict(m=256, n=128, modules=2, clients=4, client_rank=4, p=4, repeats=3),
        fig1=dict(preset="roberta-base", layers=1, clients=[2, 4], client_ranks=[4, 8], taus=[0.80, 0.90, 0.95]),
    ),
    # The paper's sizes where this machine allows; estimated 1.5-2 hours on 2 cores (not yet run end to end).
    "paper": dict(
        fig3=dict(modules=12, client_rank=8, p=8, d_fixed=768, r_fixed=80,
                  ranks=[16, 32, 64, 128, 256, 512], dims=[256, 512, 768, 1024, 2048, 4096],
                  flexlora_max_d=1024, flexlora_ranks=[16, 32, 64, 128, 256, 512], repeats=7, slow_repeats=3),
        fig4_rank=dict(preset="llama-3.2-3b", layers=28, ranks=[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64],
                       flexlora_max_d=1024),
        fig4_cond=dict(shape=[768, 768], rank=64, clients=8, batch=8, kappas=[10.0**k for k in range(11)]),
        table4=dict(m=8192, n=3072, modules=56, clients=8, client_rank=8, p=8, repeats=7),
        fig1=dict(preset="llama-3.2-3b", layers=4, clients=[2, 4, 8, 16, 32], client_ranks=[4, 8, 16, 32],
                  taus=[0.80, 0.90, 0.95]),
    ),
}


def versions() -> dict:
    import numpy
    import scipy

    import fraq

    return {"fraq": getattr(fraq, "__version__", "unknown"), "torch": torch.__version__, "numpy": numpy.__version__,
            "scipy": scipy.__version__, "python": platform.python_version()}


def write_result(out: Path, experiment: str, key: str, config: dict, result: dict) -> Path:
    """One result file: ``out/<experiment>/<key>.json`` with config, result, machine and versions."""
    from fraq.measure import machine_record

    machine = machine_record()
    rec = dict(experiment=experiment, config=config, result=result, machine=machine, versions=versions(),
               git_sha=machine.get("git_sha"), dtype=str(DTYPE).removeprefix("torch."),
               threads=torch.get_num_threads(), loadavg=os.getloadavg()[0],
               created=time.strftime("%Y-%m-%dT%H:%M:%S"))
    path = out / experiment / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1, default=str))
    return path


# ----------------------------------------------------------------------------- jobs


def jobs(mode: str) -> Iterator[tuple[str, str, dict, Callable[[], dict]]]:
    """(experiment, key, config, measure) for every result of the ``mode`` sweep, cheap first."""
    cfg = CONFIGS[mode]
    yield from _table4_jobs(cfg["table4"])
    yield from _fig4_cond_jobs(cfg["fig4_cond"])
    yield from _fig4_rank_jobs(cfg["fig4_rank"])
    yield from _fig1_jobs(cfg["fig1"])
    yield from _fig3_jobs(cfg["fig3"])


def run_job(out: Path, job) -> list[Path]:
    """Run one job at :data:`THREADS` threads and write its result file(s).

    A job whose measurement shares expensive setup across several results (float64
    references, generated inputs) returns ``{"many": [(key, config, result), ...]}``.
    """
    from fraq.measure.timing import threads

    experiment, key, config, measure = job
    with threads(THREADS):  # the record's thread count is the one the measurement ran at
        result = measure()
        if "many" in result:
            return [write_result(out, experiment, k, cf, r) for k, cf, r in result["many"]]
        return [write_result(out, experiment, key, config, result)]


def _timing(fn, repeats: int, warmup: int) -> dict:
    from fraq.measure import time_call

    return time_call(fn, repeats=repeats, warmup=warmup).as_dict()


# --- Fig. 3 and Table 5: runtime, peak memory, counted and analytic FLOPs


def _fig3_point(method: str, d: int, r: int, mode: str, c: dict) -> dict:
    from fraq.measure import count_flops, peak_memory
    from fraq.flops import analytic_flops
    from fraq.measure.methods import clients_as_batch, get_method
    from fraq.synthetic import lora_clients

    ranks = [c["client_rank"]] * (r // c["client_rank"]) + ([r % c["client_rank"]] if r % c["client_rank"] else [])
    Bs, As = lora_clients(d, d, ranks, batch=(c["modules"],), seed=0, dtype=DTYPE)
    p = min(c["p"], r, d)
    fn = get_method(method)
    if mode == "batched":
        call = lambda: fn(Bs, As, rank=p)  # noqa: E731
    else:
        per = [clients_as_batch(Bs, As, i) for i in range(c["modules"])]
        call = lambda: [fn(b, a, rank=p) for b, a in per]  # noqa: E731
    slow = method == "flexlora"
    res = dict(timing=_timing(call, c["slow_repeats"] if slow else c["repeats"], 0 if slow else 1),
               peak_bytes=peak_memory(call).peak)
    if mode == "batched":
        fc = count_flops(call)
        res.update(counted_flops=fc.total, uncounted=list(fc.uncounted))
    res.update({f"analytic_flops_{m}": c["modules"] * analytic_flops(method, d, d, r, p, model=m)
                for m in ("table5", "full")})
    return res


def _fig3_jobs(c: dict):
    points = [("r", c["d_fixed"], r) for r in c["ranks"]] + [("d", d, c["r_fixed"]) for d in c["dims"]]
    for sweep, d, r in points:
        for method in METHODS:
            if method == "flexlora" and (d > c["flexlora_max_d"] or (sweep == "r" and r not in c["flexlora_ranks"])):
                continue
            for mode in ("batched", "unbatched"):
                config = dict(figure="fig3", sweep=sweep, method=method, mode=mode, d=d, D=d, r=r,
                              p=min(c["p"], r, d), modules=c["modules"], client_rank=c["client_rank"])
                yield ("fig3", f"{sweep}-{method}-{mode}-d{d}-r{r}", config,
                       lambda method=method, d=d, r=r, mode=mode: _fig3_point(method, d, r, mode, c))


# --- Fig. 4 left: relative error against output rank, per module


def _preset_modules(name: str, layers: int, seed: int = 100):
    """(group name, m, n, Bs, As) per module group of a preset, ``layers`` of each, float32."""
    from fraq.presets import get_preset
    from fraq.synthetic import lora_clients

    preset = get_preset(name)
    for i, g in enumerate(preset.groups):
        Bs, As = lora_clients(g.m, g.n, preset.ranks, batch=(min(layers, g.count),), seed=seed + i, dtype=DTYPE)
        yield g.name, g.m, g.n, Bs, As


def _fig4_rank_all(c: dict) -> list[tuple[str, dict, dict]]:
    import fraq
    from fraq.measure import fidelity
    from fraq.measure.methods import get_method

    out = []
    for group, m, n, Bs, As in _preset_modules(c["preset"], c["layers"]):
        B, A = fraq.stack(Bs, As)
        for method in METHODS:
            if method == "flexlora" and min(m, n) > c["flexlora_max_d"]:
                continue
            for p in c["ranks"]:
                Bg, Ag, rank = get_method(method)(Bs, As, rank=p)
                f = fidelity(B, A, Bg, Ag, rank)
                config = dict(figure="fig4_rank", preset=c["preset"], group=group, m=m, n=n, method=method, p=p,
                              layers=int(B.shape[0]), clients=len(Bs))
                out.append((f"{group}-{method}-p{p}", config,
                            dict(relative_error=f.relative_error.tolist(), optimal_error=f.optimal_error.tolist(),
                                 orthogonality=f.orthogonality.tolist())))
    return out


def _fig4_rank_jobs(c: dict):
    # One job: the inputs are generated once and every (method, p) result written on its own.
    yield ("fig4_rank", "*", dict(figure="fig4_rank", **c), lambda: {"many": _fig4_rank_all(c)})


# --- Fig. 4 right: error against condition number at full output rank


def _conditioned(c: dict, kappa: float, seed: int):
    """8 clients' factors of a rank-64 aggregate with singular values log-spaced 1..1/kappa,
    rotated so the ill-conditioning is not aligned with the factors' columns."""
    from fraq.synthetic import spectrum_matrix

    m, n = c["shape"]
    k, K = c["rank"], c["clients"]
    sv = torch.logspace(0, -math.log10(kappa), k, dtype=torch.float64) if kappa > 1 else torch.ones(k, dtype=torch.float64)
    Bs, As = [], []
    for b in range(c["batch"]):
        B, A = spectrum_matrix(m, n, sv, seed=seed + b)
        g = torch.Generator().manual_seed(seed + 1000 + b)
        mix, _ = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=torch.float64))
        Bs.append(B @ mix)
        As.append(mix.mT @ A)
    B, A = torch.stack(Bs), torch.stack(As)  # (batch, m, k), (batch, k, n)
    w = k // K
    # Client j holds columns j*w..(j+1)*w of the factors, scaled by K so the uniform-weight
    # stack K^-1 sum_j B_j A_j is B A.
    return ([(K * B[..., j * w:(j + 1) * w]).to(DTYPE) for j in range(K)],
            [A[..., j * w:(j + 1) * w, :].contiguous().to(DTYPE) for j in range(K)])


def _fig4_cond_point(c: dict, method: str, kappa: float) -> dict:
    import fraq
    from fraq.measure import fidelity
    from fraq.measure.methods import get_method

    Bs, As = _conditioned(c, kappa, seed=11)
    B, A = fraq.stack([b.double() for b in Bs], [a.double() for a in As])
    Bg, Ag, rank = get_method(method)(Bs, As, rank=c["rank"])
    f = fidelity(B, A, Bg, Ag, rank)
    return dict(relative_error=f.relative_error.tolist(), optimal_error=f.optimal_error.tolist(),
                orthogonality=f.orthogonality.tolist())


def _fig4_cond_jobs(c: dict):
    for kappa in c["kappas"]:
        for method in METHODS:
            config = dict(figure="fig4_cond", method=method, kappa=kappa, m=c["shape"][0], n=c["shape"][1],
                          rank=c["rank"], clients=c["clients"], batch=c["batch"])
            yield ("fig4_cond", f"{method}-k{kappa:.0e}", config,
                   lambda method=method, kappa=kappa: _fig4_cond_point(c, method, kappa))


# --- Table 4: the ablation variants


def _table4_all(c: dict) -> dict:
    from fraq.measure import fidelity, peak_memory
    from fraq.measure.ablation import VARIANTS, ablation_variant
    from fraq.reference import relative_error
    from fraq.synthetic import lora_clients
    import fraq

    Bs, As = lora_clients(c["m"], c["n"], [c["client_rank"]] * c["clients"], batch=(c["modules"],), seed=3,
                          dtype=DTYPE)
    B, A = fraq.stack(Bs, As)
    calls = {name: (lambda o=o, s=s: ablation_variant(B, A, c["p"], orientation=o, spectral=s))
             for name, (o, s) in VARIANTS.items()}
    calls["library"] = lambda: (lambda res: (res.B, res.A))(fraq.recompress(B, A, rank=c["p"]))
    Bsvd, Asvd = calls["adaptive-svd"]()
    many = []
    for name, call in calls.items():
        Bg, Ag = call()
        config = dict(figure="table4", variant=name, **c)
        many.append((name, config, dict(
            timing=_timing(call, c["repeats"], 1), peak_bytes=peak_memory(call).peak,
            gap_to_svd=relative_error(Bsvd, Asvd, Bg, Ag).tolist(),
            excess=fidelity(B, A, Bg, Ag, c["p"]).excess.tolist())))
    return {"many": many}


def _table4_jobs(c: dict):
    yield ("table4", "*", dict(figure="table4", **c), lambda: _table4_all(c))


# --- Fig. 1: downlink per client against clients and local rank


def _fig1_point(c: dict, K: int, rk: int) -> list[tuple[str, dict, dict]]:
    from fraq.aggregators import get_aggregator
    from fraq.experiments.aggregators import build_model
    from fraq.presets import Preset, get_preset

    base = get_preset(c["preset"])
    preset = Preset(base.name, base.groups, ranks=(rk,) * K, alphas=(2.0 * rk,) * K)
    model = build_model(preset, layers=c["layers"])
    updates = model.updates()
    full_layers = max(g.count for g in base.groups)
    scale = full_layers / model.layers
    out = []
    methods = [("flora", {}, None)] + [("fraq", {"tau": t}, t) for t in c["taus"]]
    for name, opts, tau in methods:
        res = get_aggregator(name, **opts).aggregate(updates)
        params = res.downlink_params(0)
        config = dict(figure="fig1", preset=c["preset"], method=name, tau=tau, clients=K, client_rank=rk,
                      layers_measured=model.layers, layers_full=full_layers)
        out.append((f"{name}-tau{tau}-K{K}-r{rk}", config,
                    dict(downlink_params_measured=int(params), downlink_params_full=float(params * scale),
                         flora_params_measured=int(model.flora_params()),
                         ranks=[int(v) if isinstance(v, int) else list(v) for v in res.ranks.values()])))
    return out


def _fig1_jobs(c: dict):
    for K in c["clients"]:
        for rk in c["client_ranks"]:
            yield ("fig1", "*", dict(figure="fig1", clients=K, client_rank=rk),
                   lambda K=K, rk=rk: {"many": _fig1_point(c, K, rk)})
