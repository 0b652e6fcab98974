"""Float32 fidelity against float64 references: the paper's Fig. 4.

``RankFidelity`` (Fig. 4 left): LLaMA-3.2-3B LoRA-like updates, 8 clients of rank 8
(r = 64), cut to output rank p; mean relative error over the modules, its excess over the
float64 Eckart-Young optimum, and the orthogonality of the adapter's basis side.
``ConditionFidelity`` (Fig. 4 right): rank-64 aggregates with condition numbers 1 to
1e10, output rank 64, so any error is precision, not truncation.

The numbers are computed once per class in ``setup_cache`` (asv stores them and hands
them to each ``track_``); a method or combination that cannot run is recorded with its
reason and skipped.
"""

from __future__ import annotations

import torch

from benchmarks.common import DTYPE, check_threads, skip

FIDELITY_LAYERS = 4
"""Layers of LLaMA-3.2-3B whose 7 projections are measured (28 of the 196 modules; every
shape is represented, and the float64 references stay a few seconds)."""

RANKS = [1, 2, 4, 8, 16, 24, 32, 48, 64]
KAPPAS = [1.0, 1e2, 1e4, 1e6, 1e8, 1e10]
COND_SHAPE, COND_RANK, COND_BATCH = (768, 768), 64, 8
FLEXLORA_MAX_D = 768


def _methods():
    from fraq.measure.methods import method_names

    return method_names()


def _measure(method, Bs, As, B, A, p, d):
    """Fidelity summary of one method, or the reason it cannot run."""
    from fraq.measure.fidelity import fidelity
    from fraq.measure.methods import get_method

    if method == "flexlora" and d > FLEXLORA_MAX_D:
        return f"flexlora at d={d}: dense SVDs too slow above d={FLEXLORA_MAX_D}"
    try:
        fn = get_method(method)
        Bg, Ag, rank = fn(list(Bs), list(As), rank=p)
    except NotImplementedError as exc:
        return str(exc)
    f = fidelity(B, A, Bg, Ag, rank)
    return {"relative_error": float(f.relative_error.mean()), "excess": float(f.excess.mean()),
            "optimal_error": float(f.optimal_error.mean()), "orthogonality": float(f.orthogonality.mean())}


def _llama_modules():
    """(Bs, As, B, A, d) per LLaMA-3.2-3B projection shape, FIDELITY_LAYERS of each."""
    import fraq
    from fraq.presets import PRESETS
    from fraq.synthetic import lora_clients

    preset = PRESETS["llama-3.2-3b"]
    out = []
    for i, g in enumerate(preset.groups):
        Bs, As = lora_clients(g.m, g.n, list(preset.ranks), batch=(FIDELITY_LAYERS,), seed=100 + i, dtype=DTYPE)
        B, A = fraq.stack(Bs, As)
        out.append((Bs, As, B, A, min(g.m, g.n)))
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
                per = [_measure(method, Bs, As, B, A, p, d) for Bs, As, B, A, d in modules]
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

    def track_orthogonality(self, cache, method, p):
        return cache[(method, p)]["orthogonality"]

    track_orthogonality.unit = "relative"

    def track_optimal_error(self, cache, method, p):
        return cache[(method, p)]["optimal_error"]

    track_optimal_error.unit = "relative"


def _conditioned(kappa: float):
    """COND_BATCH rank-64 aggregates with singular values geometric from 1 to 1/kappa."""
    from fraq.synthetic import spectrum_matrix

    sv = torch.logspace(0, -torch.log10(torch.tensor(kappa)).item(), COND_RANK, dtype=torch.float64)
    pairs = [spectrum_matrix(*COND_SHAPE, sv, seed=s, dtype=DTYPE) for s in range(COND_BATCH)]
    B = torch.stack([b for b, _ in pairs])
    A = torch.stack([a for _, a in pairs])
    return [B], [A], B, A


class ConditionFidelity:
    """Fig. 4 right: full-rank (p = 64) reconstruction against the condition number."""

    params = [_methods(), KAPPAS]
    param_names = ["method", "kappa"]
    timeout = 900.0

    def setup_cache(self):
        check_threads()
        results = {}
        for kappa in KAPPAS:
            Bs, As, B, A = _conditioned(kappa)
            for method in _methods():
                results[(method, kappa)] = _measure(method, Bs, As, B, A, COND_RANK, COND_SHAPE[0])
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
