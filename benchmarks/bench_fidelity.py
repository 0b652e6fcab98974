"""Float32 fidelity against float64 references: the paper's Fig. 4.

``RankFidelity`` (Fig. 4 left): LLaMA-3.2-3B LoRA-like updates, 8 clients of rank 8
(r = 64), cut to output rank p; mean relative error over the modules, its excess over the
float64 Eckart-Young optimum, and the orthogonality of the adapter's basis side.
``ConditionFidelity`` (Fig. 4 right): rank-64 aggregates with condition numbers 1 to
1e10, output rank 64, so any error is precision, not truncation.

Real LoRA updates instead of synthetic ones (the paper's Fig. 4 left uses trained
adapters): save one round's client adapters from the federated harness
(``python -m fraq.federated --set federated.save_adapters_round=T``) and point
``FRAQ_ADAPTERS`` at the file; ``RankFidelity`` then measures those modules
(:func:`benchmarks.cases.fidelity_modules`).

The numbers are computed once per class in ``setup_cache`` (asv stores them and hands
them to each ``track_``) on the ``FRAQ_BENCH_DEVICE``; a method or combination that
cannot run is recorded with its reason and skipped.
"""

from __future__ import annotations

import fraq
from benchmarks._suite import cached, skip
from benchmarks.cases import FLEXLORA_MAX_D, check_threads, conditioned, fidelity_modules
from benchmarks.device import DeviceUnavailable, checked, to_device

RANKS = [1, 4, 8, 16, 24, 32, 64]
KAPPAS = [1.0, 1e2, 1e4, 1e6, 1e8, 1e10]
COND_SHAPE, COND_RANK, COND_CLIENTS, COND_BATCH = (768, 768), 64, 8, 8
FIELDS = ("relative_error", "excess", "excess_quadrature", "optimal_error", "orthogonality")


def _methods():
    from benchmarks.measure.methods import method_names

    return method_names()


def _measure(method, Bs, As, B, A, S, p, d, device):
    """Fidelity summary of one method on one batch, or the reason it cannot run."""
    from benchmarks.measure.fidelity import fidelity
    from benchmarks.measure.methods import get_method

    if method == "flexlora" and d > FLEXLORA_MAX_D:
        return f"flexlora at d={d}: dense SVDs too slow above d={FLEXLORA_MAX_D}"
    try:
        fn = get_method(method)
    except NotImplementedError as exc:
        return str(exc)
    Bg, Ag, rank = fn(to_device(list(Bs), device), to_device(list(As), device), rank=p)
    rank = rank.cpu() if hasattr(rank, "cpu") else rank
    f = fidelity(B, A, Bg.cpu(), Ag.cpu(), rank, singular_values=S)
    return {k: float(getattr(f, k).mean()) for k in FIELDS}


def _device_or_reason():
    """(device, None), or (None, the reason this machine cannot run it)."""
    try:
        return checked(), None
    except DeviceUnavailable as exc:
        return None, str(exc)


class RankFidelity:
    """Fig. 4 left: error against output rank p on LLaMA-3.2-3B-shaped updates."""

    params = [_methods(), RANKS]
    param_names = ["method", "p"]
    timeout = 900.0

    def setup_cache(self):
        from fraq.reference import reference_svd

        check_threads()
        device, reason = _device_or_reason()
        if reason is not None:
            return {(m, p): reason for m in _methods() for p in RANKS}
        modules = []
        for _, Bs, As, m, n in fidelity_modules():
            B, A = fraq.stack(Bs, As)
            modules.append((Bs, As, B, A, reference_svd(B, A)[1], min(m, n)))
        results = {}
        for method in _methods():
            for p in RANKS:
                per = [_measure(method, Bs, As, B, A, S, p, d, device) for Bs, As, B, A, S, d in modules]
                reasons = [x for x in per if isinstance(x, str)]
                # Modules weighted equally: mean of the per-group means (groups are equal-sized).
                results[(method, p)] = reasons[0] if reasons else {k: sum(x[k] for x in per) / len(per)
                                                                   for k in per[0]}
        return results

    def setup(self, cache, method, p):
        if isinstance(cache[(method, p)], str):
            skip(cache[(method, p)])

    track_relative_error = cached("relative_error", "relative", "Mean ||P - BA||_F / ||BA||_F over the modules.")
    track_excess = cached("excess", "relative", "Mean relative error above the float64 Eckart-Young optimum.")
    track_excess_quadrature = cached("excess_quadrature", "relative",
                                     "sqrt(rel^2 - opt^2): the method's own error, which rel - opt squares away.")
    track_orthogonality = cached("orthogonality", "relative", "Mean ||Q^T Q - I||_F of the adapter's basis side.")
    track_optimal_error = cached("optimal_error", "relative", "Mean float64 Eckart-Young optimum at rank p.")


class ConditionFidelity:
    """Fig. 4 right: full-rank (p = 64) reconstruction against the condition number."""

    params = [_methods(), KAPPAS]
    param_names = ["method", "kappa"]
    timeout = 900.0

    def setup_cache(self):
        check_threads()
        device, reason = _device_or_reason()
        if reason is not None:
            return {(m, k): reason for m in _methods() for k in KAPPAS}
        results = {}
        for kappa in KAPPAS:
            Bs, As, S = conditioned(*COND_SHAPE, COND_RANK, kappa, clients=COND_CLIENTS, batch=COND_BATCH)
            B, A = fraq.stack([b.double() for b in Bs], [a.double() for a in As])
            for method in _methods():
                results[(method, kappa)] = _measure(method, Bs, As, B, A, S, COND_RANK, COND_SHAPE[0], device)
        return results

    def setup(self, cache, method, kappa):
        if isinstance(cache[(method, kappa)], str):
            skip(cache[(method, kappa)])

    track_relative_error = cached("relative_error", "relative", "Mean ||P - BA||_F / ||BA||_F at full output rank.")
    track_orthogonality = cached("orthogonality", "relative", "Mean ||Q^T Q - I||_F of the adapter's basis side.")
