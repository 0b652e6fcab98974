"""FRAQ's basis on the device: Householder (geqrf + ormqr) against the Cholesky bases.

The basis of the oriented factor X (d x r) is the other step that loops per matrix on
CUDA: torch runs ``geqrf`` for d > 256 and ``ormqr`` one matrix at a time, while
``cholesky-qr2`` and ``cholesky`` are batched products and a batched Cholesky
(:mod:`fraq.backends`). Each point runs :func:`fraq.recompress` with one ``backend`` on
``modules`` stacks of LoRA-like clients (shape d x D, stacked rank r, output rank p) and
records the timing of the whole call and of the basis step alone, with the fidelity
evidence: the float32 result's error above the float64 Eckart-Young optimum (worst
module, :mod:`benchmarks.measure.fidelity`) and the basis' orthogonality
``||Q^T Q - I||_F`` (worst module).
"""

from __future__ import annotations

import torch

from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(gpu=(Priority(5, "the bases"),))

__all__ = ["key", "measure", "points"]


def points(size: str) -> list[dict]:
    c = size_config(size, "basis_routes")
    return [dict(figure="basis_routes", backend=b, modules=k, d=d, D=D, r=r, p=p, client_rank=c["client_rank"],
                 repeats=c["repeats"]) for k, d, D, r, p in c["cases"] for b in c["backends"]]


def key(config: dict) -> str:
    c = config
    return f"{c['backend']}-{c['modules']}x{c['d']}x{c['D']}-r{c['r']}"


def cost(config: dict) -> float:
    c = config
    return 0.5 + 4e-10 * c["modules"] * (c["d"] + c["D"]) * c["r"] ** 2 * (c["repeats"] + 3)


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    import fraq
    from benchmarks.measure import fidelity, timed
    from fraq.backends import get_backend

    c, device = config, torch.device(device)
    Bs, As = cases.clients(c["d"], c["D"], cases.sweep_ranks(c["r"], c["client_rank"]), c["modules"])
    B, A = fraq.stack(list(Bs), list(As))
    Bd, Ad = to_device((B, A), device)
    run = lambda: fraq.recompress(Bd, Ad, rank=c["p"], backend=c["backend"])  # noqa: E731
    basis = get_backend(c["backend"])
    X = Bd  # d <= D: the pipeline orients on B (d x r)
    whole = timed(run, repeats=c["repeats"], warmup=2, device=device)
    step = timed(lambda: basis(X).completed().C, repeats=c["repeats"], warmup=1, device=device)
    res = run()
    f = fidelity(B, A, res.B.cpu(), res.A.cpu(), res.rank.cpu() if isinstance(res.rank, torch.Tensor) else res.rank)
    b = basis(X).completed()
    Q = b.apply(torch.eye(b.C.shape[-2], dtype=X.dtype, device=device).expand(*X.shape[:-2], -1, -1)).cpu().double()
    eye = torch.eye(Q.shape[-1], dtype=torch.float64)
    return dict(timing=whole.as_dict(), basis_timing=step.as_dict(), excess_max=float(f.excess.max()),
                orthogonality=float(torch.linalg.matrix_norm(Q.mT @ Q - eye).max()), info=_plain(res.info))


def _plain(info: dict) -> dict:
    """The result's diagnostics as JSON values (tensors as lists)."""
    return {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in (info or {}).items()}
