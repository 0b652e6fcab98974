"""Float32 fidelity against float64 references: the paper's Fig. 4.

``RankFidelity`` (Fig. 4 left): LLaMA-3.2-3B LoRA-like updates, 8 clients of rank 8
(r = 64), cut to output rank p; mean relative error over the modules, its excess over the
float64 Eckart-Young optimum, and the orthogonality of the adapter's basis side.
``ConditionFidelity`` (Fig. 4 right): rank-64 aggregates with condition numbers 1 to
1e10, output rank 64, so any error is precision, not truncation.

Real LoRA updates instead of synthetic ones (the paper's Fig. 4 left uses trained
adapters): save one round's client adapters from the federated harness
(``python -m fraq.federated --set federated.save_adapters_round=T``) and point
``FRAQ_ADAPTERS`` at the file; ``RankFidelity`` then measures those modules.

The numbers are computed once per class in ``setup_cache`` (asv stores them and hands
them to each ``track_``); a method or combination that cannot run is recorded with its
reason and skipped.
"""

from __future__ import annotations

import torch

from benchmarks.common import DTYPE, check_threads, clients, skip

FIDELITY_LAYERS = 2
"""Layers of LLaMA-3.2-3B whose 7 projections are measured (14 of the 196 modules: every
shape is represented, and the float64 references stay a few seconds)."""

RANKS = [1, 4, 8, 16, 24, 32, 64]
KAPPAS = [1.0, 1e2, 1e4, 1e6, 1e8, 1e10]
COND_SHAPE, COND_RANK, COND_BATCH = (768, 768), 64, 8
FLEXLORA_MAX_D = 768


def _methods():
    from fraq.measure.methods import method_names

    return method_names()


def _measure(method, Bs, As, B, A, S, p, d):
    """Fidelity summary of one method on one batch, or the reason it cannot run."""
    from fraq.measure.fidelity import fidelity
    from fraq.measure.methods import get_method

    if method == "flexlora" and d > FLEXLORA_MAX_D:
        return f"flexlora at d={d}: dense SVDs too slow above d={FLEXLORA_MAX_D}"
    try:
        fn = get_method(method)
        Bg, Ag, rank = fn(list(Bs), list(As), rank=p)
    except NotImplementedError as exc:
        return str(exc)
    f = fidelity(B, A, Bg, Ag, rank, singular_values=S)
    return {k: float(getattr(f, k).mean()) for k in
            ("relative_error", "excess", "excess_quadrature", "optimal_error", "orthogonality")}


def _adapter_modules(path):
    """(Bs, As, B, A, S, d) per module shape of a saved federated round (``FRAQ_ADAPTERS``)."""
    import fraq
    from fraq.federated.adapters import load_client_adapters
    from fraq.reference import reference_svd

    saved = load_client_adapters(path)
    K = len(saved.updates)
    a = fraq.normalized_weights(saved.weights, K)
    out = []
    for (m, n, _ranks, scales), (Bs, As, _names) in saved.stacks(DTYPE).items():
        # The methods stack with uniform weights and unit scales, so each client's data
        # weight and LoRA scale go into its factors: sqrt(K a_k) B_k, sqrt(K a_k) s_k A_k.
        Bs = [b * (K * ak) ** 0.5 for b, ak in zip(Bs, a)]
        As = [x * ((K * ak) ** 0.5 * sk) for x, ak, sk in zip(As, a, scales)]
        B, A = fraq.stack(Bs, As)
        out.append((Bs, As, B, A, reference_svd(B, A)[1], min(m, n)))
    return out


def _llama_modules():
    """(Bs, As, B, A, S, d) per LLaMA-3.2-3B projection shape, FIDELITY_LAYERS of each;
    S the float64 singular values of the exact aggregate. With ``FRAQ_ADAPTERS`` set, the
    saved real client adapters instead."""
    import os

    import fraq
    from fraq.presets import PRESETS
    from fraq.reference import reference_svd

    if os.environ.get("FRAQ_ADAPTERS"):
        return _adapter_modules(os.environ["FRAQ_ADAPTERS"])
    preset = PRESETS["llama-3.2-3b"]
    out = []
    for i, g in enumerate(preset.groups):
        Bs, As = clients(g.m, g.n, tuple(preset.ranks), FIDELITY_LAYERS, 100 + i)
        B, A = fraq.stack(list(Bs), list(As))
        out.append((Bs, As, B, A, reference_svd(B, A)[1], min(g.m, g.n)))
    return out


class RankFidelity:
    """Fig. 4 left: error against output rank p on LLaMA-3.2-3B-shaped updates."""

    params = [_methods(), RANKS]
    param_names = ["method", "p"]
    timeout = 900.0

    def setup_cache(self):
        check_threads()
        modules = _llama_modules()
        results = {}
        for method in _methods():
            for p in RANKS:
                per = [_measure(method, Bs, As, B, A, S, p, d) for Bs, As, B, A, S, d in modules]
                reasons = [x for x in per if isinstance(x, str)]
                if reasons:
                    results[(method, p)] = reasons[0]
                else:
                    # Modules weighted equally: mean of the per-group means (groups are equal-sized).
                    results[(method, p)] = {k: sum(x[k] for x in per) / len(per) for k in per[0]}
        return results

    def setup(self, cache, method, p):
        if isinstance(cache[(method, p)], str):
            skip(cache[(method, p)])

    def track_relative_error(self, cache, method, p):
        return cache[(method, p)]["relative_error"]

    track_relative_error.unit = "relative"

    def track_excess(self, cache, method, p):
        return cache[(method, p)]["excess"]

    track_excess.unit = "relative"

    def track_excess_quadrature(self, cache, method, p):
        """sqrt(rel^2 - opt^2): the method's own error, which rel - opt squares away."""
        return cache[(method, p)]["excess_quadrature"]

    track_excess_quadrature.unit = "relative"

    def track_orthogonality(self, cache, method, p):
        return cache[(method, p)]["orthogonality"]

    track_orthogonality.unit = "relative"

    def track_optimal_error(self, cache, method, p):
        return cache[(method, p)]["optimal_error"]

    track_optimal_error.unit = "relative"


def _conditioned(kappa: float):
    """COND_BATCH rank-64 aggregates with singular values geometric from 1 to 1/kappa:
    ([B], [A], B, A, S) with S the exact singular values."""
    from fraq.synthetic import spectrum_matrix

    sv = torch.logspace(0, -torch.log10(torch.tensor(kappa)).item(), COND_RANK, dtype=torch.float64)
    pairs = [spectrum_matrix(*COND_SHAPE, sv, seed=s, dtype=DTYPE) for s in range(COND_BATCH)]
    B = torch.stack([b for b, _ in pairs])
    A = torch.stack([a for _, a in pairs])
    return [B], [A], B, A, sv.expand(COND_BATCH, COND_RANK)


class ConditionFidelity:
    """Fig. 4 right: full-rank (p = 64) reconstruction against the condition number."""

    params = [_methods(), KAPPAS]
    param_names = ["method", "kappa"]
    timeout = 900.0

    def setup_cache(self):
        check_threads()
        results = {}
        for kappa in KAPPAS:
            Bs, As, B, A, S = _conditioned(kappa)
            for method in _methods():
                results[(method, kappa)] = _measure(method, Bs, As, B, A, S, COND_RANK, COND_SHAPE[0])
        return results

    def setup(self, cache, method, kappa):
        if isinstance(cache[(method, kappa)], str):
            skip(cache[(method, kappa)])

    def track_relative_error(self, cache, method, kappa):
        return cache[(method, kappa)]["relative_error"]

    track_relative_error.unit = "relative"

    def track_orthogonality(self, cache, method, kappa):
        return cache[(method, kappa)]["orthogonality"]

    track_orthogonality.unit = "relative"
