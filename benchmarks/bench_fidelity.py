"""Float32 fidelity against float64 references: the paper's Fig. 4.

``RankFidelity`` (Fig. 4 left): LLaMA-3.2-3B-shaped LoRA-like updates cut to output rank
p; the mean relative error over the modules, its excess over the float64 Eckart-Young
optimum, and the orthogonality of the adapter's basis side
(:mod:`benchmarks.experiments.fig4_rank`). ``ConditionFidelity`` (Fig. 4 right):
aggregates with condition numbers 1 to 1e10 at full output rank, so any error is
precision, not truncation, and cut to 3/4 of it, where eigenvector errors show
(:mod:`benchmarks.experiments.fig4_cond`); kappa is a label
(``"1e+06"``), so asv's plots read it as the log scale it is. Parameters are the
experiments' points at size :data:`benchmarks.sizes.ASV`; the numbers are the same
``measure`` the runner records.

Real LoRA updates instead of synthetic ones (the paper's Fig. 4 left uses trained
adapters): save one round's client adapters from the federated harness
(``python -m fraq.federated --set federated.save_adapters_round=T``) and point
``FRAQ_ADAPTERS`` at the file; ``RankFidelity`` then measures those modules.

The numbers are computed once per class in ``setup_cache`` (asv stores them and hands
them to each ``track_``) on the ``FRAQ_BENCH_DEVICE``; a method or combination that
cannot run is recorded with its reason and skipped.
"""

from __future__ import annotations

from benchmarks._suite import cached, skip
from benchmarks.cases import check_threads
from benchmarks.device import DeviceUnavailable, checked
from benchmarks.experiments import fig4_cond, fig4_rank
from benchmarks.sizes import ASV, size_config

_R = size_config(ASV, "fig4_rank")
_K = size_config(ASV, "fig4_cond")
KAPPAS = {fig4_cond.kappa_label(k): k for k in _K["kappas"]}


def _mean(values: list) -> float:
    return sum(values) / len(values)


def _worst(values: list) -> float:
    """The largest value, NaN (an undefined subspace) left out; NaN when all are."""
    kept = [v for v in values if v == v]
    return max(kept) if kept else float("nan")


def _device_or_reason():
    """(device, None), or (None, the reason this machine cannot run it)."""
    try:
        return checked(), None
    except DeviceUnavailable as exc:
        return None, str(exc)


class RankFidelity:
    """Fig. 4 left: error against output rank p on LLaMA-3.2-3B-shaped updates."""

    params = [list(_R["methods"]), list(_R["ranks"])]
    param_names = ["method", "p"]
    timeout = 900.0

    def setup_cache(self):
        from benchmarks.measure.methods import traits

        check_threads()
        device, reason = _device_or_reason()
        if reason is not None:
            return {(m, p): reason for m in _R["methods"] for p in _R["ranks"]}
        points = fig4_rank.points(ASV)
        results = {}
        for method in _R["methods"]:
            for p in _R["ranks"]:
                per = [fig4_rank.measure(c, device) for c in points if (c["method"], c["p"]) == (method, p)]
                if not per:
                    results[(method, p)] = f"{method}: no module within its limits ({traits(method).why})"
                    continue
                # Modules weighted equally: mean of the per-group means (groups are equal-sized).
                results[(method, p)] = {
                    "relative_error": _mean([_mean(x["relative_error"]) for x in per]),
                    "optimal_error": _mean([_mean(x["optimal_error"]) for x in per]),
                    "excess_quadrature": _mean([_mean(x["excess_quadrature"]) for x in per]),
                    "orthogonality": _mean([_mean(x["orthogonality"]) for x in per]),
                    "sin_left": _worst([_worst(x["sin_left"]) for x in per]),
                    "sigma_error": _worst([_worst(x["sigma_error"]) for x in per]),
                }
                results[(method, p)]["excess"] = (results[(method, p)]["relative_error"]
                                                  - results[(method, p)]["optimal_error"])
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
    track_sin_left = cached("sin_left", "relative",
                            "Largest sine of the principal angles between the kept left subspace and the float64 "
                            "SVD's, over the modules (first order: what the error norms square away).")
    track_sigma_error = cached("sigma_error", "relative",
                               "Largest relative error of a kept singular value, over the modules.")


class ConditionFidelity:
    """Fig. 4 right: full-rank reconstruction against the condition number."""

    params = [list(_K["methods"]), list(KAPPAS)]
    param_names = ["method", "kappa"]
    timeout = 900.0

    def setup_cache(self):
        from benchmarks.measure.methods import traits

        check_threads()
        device, reason = _device_or_reason()
        if reason is not None:
            return {(m, k): reason for m in _K["methods"] for k in KAPPAS}
        results = {(m, k): traits(m).skip_reason(min(_K["shape"])) or f"{m} is not measured here"
                   for m in _K["methods"] for k in KAPPAS}
        for c in fig4_cond.points(ASV):
            r = fig4_cond.measure(c, device)
            entry = results[(c["method"], fig4_cond.kappa_label(c["kappa"]))]
            entry = entry if isinstance(entry, dict) else {}
            if c["p"] == c["rank"]:
                entry.update(relative_error=_mean(r["relative_error"]), orthogonality=_mean(r["orthogonality"]),
                             kappa_measured=_mean(r["kappa_measured"]))
            else:
                entry.update(sin_cut=_worst(r["sin_left"] + r["sin_right"]), sigma_error_cut=_worst(r["sigma_error"]))
            results[(c["method"], fig4_cond.kappa_label(c["kappa"]))] = entry
        return results

    def setup(self, cache, method, kappa):
        if isinstance(cache[(method, kappa)], str):
            skip(cache[(method, kappa)])

    track_relative_error = cached("relative_error", "relative", "Mean ||P - BA||_F / ||BA||_F at full output rank.")
    track_orthogonality = cached("orthogonality", "relative", "Mean ||Q^T Q - I||_F of the adapter's basis side.")
    track_kappa_measured = cached("kappa_measured", "ratio",
                                  "Mean condition number of the inputs as rounded to float32 (the nominal kappa is "
                                  "built exactly, then each client's factors are rounded).")
    track_sin_cut = cached("sin_cut", "relative",
                           "At output rank 3/4 of the full rank: the largest sine of the principal angles to the "
                           "float64 subspaces, left and right (where the gap defines them).")
    track_sigma_error_cut = cached("sigma_error_cut", "relative",
                                   "At output rank 3/4 of the full rank: the largest relative error of a kept "
                                   "singular value.")
