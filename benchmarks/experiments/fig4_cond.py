"""Fig. 4 right: float32 fidelity against the condition number, at full output rank and cut.

Rank-``rank`` aggregates of ``shape`` with singular values log-spaced from 1 to 1/kappa
(:func:`benchmarks.cases.conditioned`), ``batch`` matrices per kappa, cut to their full
rank (any error is precision, not truncation) and to ``3 rank / 4``, where
sigma_p / sigma_1 = kappa^(-3/4 * (rank - ... )) falls below sqrt(eps) for kappa above
about 1e5: at full rank Q U U^T H = Q H for any orthogonal U and eigenvector errors never
show, at a truncating p they do. Per matrix: relative error against the float64
aggregate, the optimum, the error in quadrature, the orthogonality of the adapter's
basis side, the first-order metrics (principal angles, singular-value errors and their
Wedin / Davis-Kahan bounds: :mod:`benchmarks.measure.fidelity`) and ``kappa_measured``,
the condition number of the inputs as rounded to float32 (sigma_1 / sigma_rank of their
exact aggregate, float64): the generator builds the spectrum exactly and rounds each
client's factors, so above about 1e7 the nominal kappa is not what is measured. Sizes:
:data:`benchmarks.sizes.SIZES` ``[size]["fig4_cond"]``; the asv class
``bench_fidelity.ConditionFidelity`` reads the same :func:`measure`.
"""

from __future__ import annotations

import functools

import torch

from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, untimed=True, scale=0.3,
                        gpu=(Priority(5, "Fig. 4: fidelity against the condition number"),))

__all__ = ["kappa_label", "key", "measure", "points"]


def kappa_label(kappa: float) -> str:
    """``1e+06``: how a condition number is named in keys and asv parameters (a log reader's label)."""
    return f"{kappa:.0e}"


def points(size: str) -> list[dict]:
    from benchmarks.measure.methods import traits

    c = size_config(size, "fig4_cond")
    m, n = c["shape"]
    return [dict(figure="fig4_cond", method=method, kappa=kappa, m=m, n=n, rank=c["rank"], p=p, clients=c["clients"],
                 batch=c["batch"])
            for kappa in c["kappas"] for method in c["methods"] for p in (c["rank"], cut(c["rank"]))
            if traits(method).skip_reason(min(m, n)) is None]


def cut(rank: int) -> int:
    """The truncating output rank of the sweep, 3 rank / 4."""
    return max(1, 3 * rank // 4)


def cost(config: dict) -> float:
    """The float64 references of the batch dominate: about one dense SVD per matrix."""
    from benchmarks.experiments import dense_seconds

    return 0.05 + dense_seconds(config["m"], config["n"], config["batch"])


def key(config: dict) -> str:
    p = config.get("p", config["rank"])
    return f"{config['method']}-k{kappa_label(config['kappa'])}" + ("" if p == config["rank"] else f"-p{p}")


@functools.lru_cache(maxsize=1)
def _inputs(m: int, n: int, rank: int, kappa: float, clients: int, batch: int):
    import fraq

    from fraq.reference import reference_svd

    Bs, As, _ = cases.conditioned(m, n, rank, kappa, clients=clients, batch=batch)
    B, A = fraq.stack([b.double() for b in Bs], [a.double() for a in As])
    ref = reference_svd(B, A)
    return Bs, As, B, A, ref


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    from benchmarks.measure import fidelity
    from benchmarks.measure.methods import get_method

    c = config
    Bs, As, B, A, ref = _inputs(c["m"], c["n"], c["rank"], c["kappa"], c["clients"], c["batch"])
    device = torch.device(device)
    Bg, Ag, rank = get_method(c["method"])(to_device(Bs, device), to_device(As, device), rank=c.get("p", c["rank"]))
    rank = rank.cpu() if isinstance(rank, torch.Tensor) else rank
    f = fidelity(B, A, Bg.cpu(), Ag.cpu(), rank, reference=ref)
    S = ref[1]
    return dict(relative_error=f.relative_error.tolist(), optimal_error=f.optimal_error.tolist(),
                excess_quadrature=f.excess_quadrature.tolist(), orthogonality=f.orthogonality.tolist(),
                kappa_measured=(S[..., 0] / S[..., c["rank"] - 1]).tolist(), **f.first.as_dict())
