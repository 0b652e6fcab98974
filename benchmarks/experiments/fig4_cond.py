"""Fig. 4 right: float32 fidelity against the condition number, at full output rank.

Rank-``rank`` aggregates of ``shape`` with singular values log-spaced from 1 to 1/kappa
(:func:`benchmarks.cases.conditioned`), ``batch`` matrices per kappa, cut to their full
rank so that any error is precision, not truncation. Per matrix: relative error against
the float64 aggregate and the orthogonality of the adapter's basis side. Sizes:
:data:`benchmarks.sizes.SIZES` ``[size]["fig4_cond"]``; the asv class
``bench_fidelity.ConditionFidelity`` reads the same :func:`measure`.
"""

from __future__ import annotations

import functools

import torch

from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.sizes import size_config

__all__ = ["kappa_label", "key", "measure", "points"]


def kappa_label(kappa: float) -> str:
    """``1e+06``: how a condition number is named in keys and asv parameters (a log reader's label)."""
    return f"{kappa:.0e}"


def points(size: str) -> list[dict]:
    from benchmarks.measure.methods import spec

    c = size_config(size, "fig4_cond")
    m, n = c["shape"]
    return [dict(figure="fig4_cond", method=method, kappa=kappa, m=m, n=n, rank=c["rank"], clients=c["clients"],
                 batch=c["batch"])
            for kappa in c["kappas"] for method in c["methods"] if spec(method).skip_reason(min(m, n)) is None]


def cost(config: dict) -> float:
    """The float64 references of the batch dominate: about one dense SVD per matrix."""
    from benchmarks.experiments import dense_seconds

    return 0.05 + dense_seconds(config["m"], config["n"], config["batch"])


def key(config: dict) -> str:
    return f"{config['method']}-k{kappa_label(config['kappa'])}"


@functools.lru_cache(maxsize=1)
def _inputs(m: int, n: int, rank: int, kappa: float, clients: int, batch: int):
    import fraq

    Bs, As, _ = cases.conditioned(m, n, rank, kappa, clients=clients, batch=batch)
    B, A = fraq.stack([b.double() for b in Bs], [a.double() for a in As])
    return Bs, As, B, A


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    from benchmarks.measure import fidelity
    from benchmarks.measure.methods import get_method

    c = config
    Bs, As, B, A = _inputs(c["m"], c["n"], c["rank"], c["kappa"], c["clients"], c["batch"])
    device = torch.device(device)
    Bg, Ag, rank = get_method(c["method"])(to_device(Bs, device), to_device(As, device), rank=c["rank"])
    rank = rank.cpu() if isinstance(rank, torch.Tensor) else rank
    f = fidelity(B, A, Bg.cpu(), Ag.cpu(), rank)
    return dict(relative_error=f.relative_error.tolist(), optimal_error=f.optimal_error.tolist(),
                orthogonality=f.orthogonality.tolist())
