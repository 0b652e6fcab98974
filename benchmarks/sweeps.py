"""The sweeps behind Figs. 1, 3, 4 and Tables 4-5 as data, and their jobs for the runner.

A sweep is data (:data:`CONFIGS`: ``reduced`` for ``make run``, ``paper`` for the
paper's sizes where feasible, ``tiny`` for tests). :func:`jobs` turns one into
``(experiment, key, config, measure)`` jobs whose inputs come from
:mod:`benchmarks.cases` and whose measurements are :mod:`benchmarks.measure`'s;
:mod:`benchmarks.run` runs them and writes one result file per result
(:mod:`benchmarks.results`). Timings run at the runner's thread count (1 by default),
float32, on the runner's device (``--device`` / ``FRAQ_BENCH_DEVICE``); the float64
references always run on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from benchmarks import cases
from benchmarks.device import to_device

__all__ = ["CONFIGS", "DTYPE", "METHODS", "jobs"]

DTYPE = cases.DTYPE
METHODS = ("fraq", "florist", "flexlora")

CONFIGS: dict[str, dict] = {
    # About 1 minute on 2 cores (with the backends experiment). FlexLoRA's dense SVDs limit what is feasible.
    "reduced": dict(
        fig3=dict(modules=2, client_rank=8, p=8, d_fixed=768, r_fixed=80,
                  ranks=[16, 32, 64, 128, 256], dims=[256, 512, 768, 1536, 3072],
                  flexlora_max_d=cases.FLEXLORA_MAX_D, flexlora_ranks=[16, 64, 256], repeats=5, slow_repeats=3),
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


# ----------------------------------------------------------------------------- jobs


def jobs(mode: str, device: torch.device | str = "cpu") -> Iterator[tuple[str, str, dict, Callable[[], dict]]]:
    """(experiment, key, config, measure) for every result of the ``mode`` sweep, cheap first.

    ``measure()`` returns one result dict, or ``{"many": [(key, config, result), ...]}``
    when one job's shared setup (float64 references, generated inputs) serves several.
    """
    if mode not in CONFIGS:
        raise ValueError(f"mode(={mode!r}) is not one of {sorted(CONFIGS)}")
    device = torch.device(device)
    cfg = CONFIGS[mode]
    yield from _table4_jobs(cfg["table4"], device)
    yield from _fig4_cond_jobs(cfg["fig4_cond"], device)
    yield from _fig4_rank_jobs(cfg["fig4_rank"], device)
    yield from _fig1_jobs(cfg["fig1"])
    yield from _fig3_jobs(cfg["fig3"], device)


def _timing(fn, repeats: int, warmup: int, device) -> dict:
    from benchmarks.measure import timed

    return timed(fn, repeats=repeats, warmup=warmup, device=device).as_dict()


def _cpu(*ts):
    return tuple(t.cpu() if isinstance(t, torch.Tensor) else t for t in ts)


# --- Fig. 3 and Table 5: runtime, peak memory, counted and analytic FLOPs


def _fig3_point(method: str, d: int, r: int, mode: str, c: dict, device) -> dict:
    from benchmarks.measure import count_flops, peak_memory
    from benchmarks.measure.methods import clients_as_batch, default_backend, default_factored, get_method
    from fraq.flops import analytic_flops

    Bs, As = to_device(cases.clients(d, d, cases.sweep_ranks(r, c["client_rank"]), c["modules"]), device)
    Bs, As = list(Bs), list(As)
    p = min(c["p"], r, d)
    fn = get_method(method)
    if mode == "batched":
        call = lambda: fn(Bs, As, rank=p)  # noqa: E731
    else:
        per = [clients_as_batch(Bs, As, i) for i in range(c["modules"])]
        call = lambda: [fn(b, a, rank=p) for b, a in per]  # noqa: E731
    slow = method == "flexlora"
    res = dict(timing=_timing(call, c["slow_repeats"] if slow else c["repeats"], 0 if slow else 1, device),
               peak_bytes=peak_memory(call, device=device).peak)
    if mode == "batched":
        fc = count_flops(call)
        res.update(counted_flops=fc.total, uncounted=list(fc.uncounted))
    # The code's model counts the backend "fraq" ran; Table 5 is the paper's (Householder).
    backend = default_backend(device)
    res.update(backend=backend if method == "fraq" else None,
               analytic_flops_table5=c["modules"] * analytic_flops(method, d, d, r, p, model="table5"),
               analytic_flops_full=c["modules"] * analytic_flops(method, d, d, r, p, backend=backend, model="full",
                                                                 factored=method == "fraq" and default_factored()))
    return res


def _fig3_jobs(c: dict, device):
    points = [("r", c["d_fixed"], r) for r in c["ranks"]] + [("d", d, c["r_fixed"]) for d in c["dims"]]
    for sweep, d, r in points:
        for method in METHODS:
            if method == "flexlora" and (d > c["flexlora_max_d"] or (sweep == "r" and r not in c["flexlora_ranks"])):
                continue
            for mode in ("batched", "unbatched"):
                config = dict(figure="fig3", sweep=sweep, method=method, mode=mode, d=d, D=d, r=r,
                              p=min(c["p"], r, d), modules=c["modules"], client_rank=c["client_rank"])
                yield ("fig3", f"{sweep}-{method}-{mode}-d{d}-r{r}", config,
                       lambda method=method, d=d, r=r, mode=mode: _fig3_point(method, d, r, mode, c, device))


# --- Fig. 4 left: relative error against output rank, per module


def _fig4_rank_all(c: dict, device) -> list[tuple[str, dict, dict]]:
    import fraq
    from benchmarks.measure import fidelity
    from benchmarks.measure.methods import get_method

    out = []
    for group, Bs, As, m, n in cases.fidelity_modules(c["preset"], c["layers"]):
        B, A = fraq.stack(Bs, As)
        Bd, Ad = to_device(Bs, device), to_device(As, device)
        for method in METHODS:
            if method == "flexlora" and min(m, n) > c["flexlora_max_d"]:
                continue
            for p in c["ranks"]:
                Bg, Ag, rank = _cpu(*get_method(method)(Bd, Ad, rank=p))
                f = fidelity(B, A, Bg, Ag, rank)
                config = dict(figure="fig4_rank", preset=c["preset"], group=group, m=m, n=n, method=method, p=p,
                              layers=int(B.shape[0]), clients=len(Bs))
                out.append((f"{group}-{method}-p{p}", config,
                            dict(relative_error=f.relative_error.tolist(), optimal_error=f.optimal_error.tolist(),
                                 orthogonality=f.orthogonality.tolist())))
    return out


def _fig4_rank_jobs(c: dict, device):
    # One job: the inputs are generated once and every (method, p) result written on its own.
    yield ("fig4_rank", "*", dict(figure="fig4_rank", **c), lambda: {"many": _fig4_rank_all(c, device)})


# --- Fig. 4 right: error against condition number at full output rank


def _fig4_cond_point(c: dict, method: str, kappa: float, device) -> dict:
    import fraq
    from benchmarks.measure import fidelity
    from benchmarks.measure.methods import get_method

    Bs, As, _ = cases.conditioned(*c["shape"], c["rank"], kappa, clients=c["clients"], batch=c["batch"])
    B, A = fraq.stack([b.double() for b in Bs], [a.double() for a in As])
    Bg, Ag, rank = _cpu(*get_method(method)(to_device(Bs, device), to_device(As, device), rank=c["rank"]))
    f = fidelity(B, A, Bg, Ag, rank)
    return dict(relative_error=f.relative_error.tolist(), optimal_error=f.optimal_error.tolist(),
                orthogonality=f.orthogonality.tolist())


def _fig4_cond_jobs(c: dict, device):
    for kappa in c["kappas"]:
        for method in METHODS:
            config = dict(figure="fig4_cond", method=method, kappa=kappa, m=c["shape"][0], n=c["shape"][1],
                          rank=c["rank"], clients=c["clients"], batch=c["batch"])
            yield ("fig4_cond", f"{method}-k{kappa:.0e}", config,
                   lambda method=method, kappa=kappa: _fig4_cond_point(c, method, kappa, device))


# --- Table 4: the ablation variants


def _table4_all(c: dict, device) -> dict:
    import fraq
    from benchmarks.measure import fidelity, peak_memory
    from benchmarks.measure.ablation import PAPER_TABLE4, variant_calls
    from fraq.reference import relative_error

    B, A = fraq.stack(*cases.clients(c["m"], c["n"], (c["client_rank"],) * c["clients"], c["modules"], seed=3))
    calls = variant_calls(*to_device((B, A), device), c["p"])
    Bsvd, Asvd = _cpu(*calls["adaptive-svd"]())
    many = []
    for name, call in calls.items():
        Bg, Ag = _cpu(*call())
        config = dict(figure="table4", variant=name, **c)
        paper_ms, paper_mib = PAPER_TABLE4.get(name, (None, None))
        many.append((name, config, dict(
            timing=_timing(call, c["repeats"], 1, device), peak_bytes=peak_memory(call, device=device).peak,
            gap_to_svd=relative_error(Bsvd, Asvd, Bg, Ag).tolist(),
            excess=fidelity(B, A, Bg, Ag, c["p"]).excess.tolist(), paper_ms=paper_ms, paper_mib=paper_mib)))
    return {"many": many}


def _table4_jobs(c: dict, device):
    yield ("table4", "*", dict(figure="table4", **c), lambda: _table4_all(c, device))


# --- Fig. 1: downlink per client against clients and local rank


def _fig1_point(c: dict, K: int, rk: int) -> list[tuple[str, dict, dict]]:
    from fraq.aggregators import get_aggregator
    from benchmarks.experiments.aggregators import build_model
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
