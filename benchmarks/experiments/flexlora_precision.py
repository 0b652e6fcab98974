"""Why FlexLoRA's float32 error here is not the paper's "two orders of magnitude" above FRAQ's.

Fig. 4 (right) compares float32 results at full output rank against float64 references
on rank-64 aggregates of controlled condition number (:func:`benchmarks.cases.conditioned`,
as :mod:`benchmarks.experiments.fig4_cond`). FlexLoRA's error comes from two steps, each
of which the paper's GPU run could have done differently, so each is a switch here:

- ``form``, how the dense m x n aggregate is formed: ``f32`` one float32 GEMM of the
  weighted stacks (this repository's FlexLoRA); ``f64`` in float64, then rounded to
  float32; ``clients`` client by client, sum_k a_k s_k B_k A_k accumulated in float32 (the
  public code's loop); ``tf32`` a float32 GEMM on inputs rounded to TF32's 10-bit mantissa
  (what an Ampere/Hopper GPU's matmul does when TF32 is allowed);
- ``driver``, how it is decomposed: ``gesdd`` (LAPACK divide and conquer, what
  ``torch.linalg.svd`` runs on a CPU), ``gesvd`` (LAPACK QR iteration, SciPy's driver),
  ``gram-eigh`` (the eigendecomposition of M^T M in float32, which squares the condition
  number), ``f64`` (a float64 SVD of the float32 matrix: the forming step's error alone).

``flexlora`` is the aggregator itself (:meth:`fraq.aggregators.FlexLoRA.aggregate_batch`)
and ``fraq`` FRAQ on the same inputs: the ratio's denominator. Each point is one
(form, driver) at one condition number; the result holds the per-matrix relative errors
against the float64 aggregate (:mod:`benchmarks.measure.fidelity`).
"""

from __future__ import annotations

import torch

from benchmarks.experiments import Experiment
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, untimed=True, scale=1.4)

__all__ = ["VARIANTS", "key", "measure", "points", "tf32"]

VARIANTS = (("flexlora", "-"), ("fraq", "-"), ("f32", "gesdd"), ("f32", "gesvd"), ("f32", "gram-eigh"),
            ("f32", "f64"), ("f64", "gesdd"), ("clients", "gesdd"), ("tf32", "gesdd"))
"""(form, driver) per row; ``flexlora`` and ``fraq`` are the methods themselves."""


def points(size: str) -> list[dict]:
    c = size_config(size, "fig4_cond")
    m, n = c["shape"]
    kappas = [k for k in c["kappas"] if k in (1e2, 1e6, 1e10)] or c["kappas"][-1:]
    return [dict(figure="flexlora_precision", form=f, driver=d, kappa=k, m=m, n=n, rank=c["rank"],
                 clients=c["clients"], batch=c["batch"]) for k in kappas for f, d in VARIANTS]


def key(config: dict) -> str:
    return f"{config['form']}-{config['driver']}-k{config['kappa']:.0e}"


def cost(config: dict) -> float:
    from benchmarks.experiments import dense_seconds

    return 0.1 + 2 * dense_seconds(config["m"], config["n"], config["batch"])


def tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 ``x`` rounded to TF32 (10 explicit mantissa bits), to nearest, ties away."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _dense(Bs, As, form: str) -> torch.Tensor:
    import fraq

    if form == "clients":
        K = len(Bs)
        out = torch.zeros(*Bs[0].shape[:-1], As[0].shape[-1])
        for Bk, Ak in zip(Bs, As):
            out += (Bk / K) @ Ak
        return out
    B, A = fraq.stack(Bs, As)
    if form == "f64":
        return (B.double() @ A.double()).float()
    if form == "tf32":
        return tf32(B) @ tf32(A)
    return B @ A


def _decompose(M: torch.Tensor, driver: str):
    if driver == "gesdd":
        return torch.linalg.svd(M, full_matrices=False)
    if driver == "f64":
        U, S, Vh = torch.linalg.svd(M.double(), full_matrices=False)
        return U.float(), S.float(), Vh.float()
    if driver == "gesvd":
        import scipy.linalg

        parts = [scipy.linalg.svd(m.numpy(), full_matrices=False, lapack_driver="gesvd") for m in M]
        return tuple(torch.stack([torch.from_numpy(p[i]) for p in parts]) for i in range(3))
    lam, V = torch.linalg.eigh(M.mT @ M)  # gram-eigh: ascending, float32
    lam, V = lam.flip(-1).clamp(min=0), V.flip(-1)
    S = lam.sqrt()
    U = (M @ V) / torch.where(S > 0, S, 1).unsqueeze(-2)
    return U, S, V.mT


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """Per-matrix relative error of one (form, driver) at full output rank."""
    from benchmarks.experiments.fig4_cond import _inputs
    from benchmarks.measure import fidelity
    from benchmarks.measure.methods import get_method

    c = config
    Bs, As, B, A, _ = _inputs(c["m"], c["n"], c["rank"], c["kappa"], c["clients"], c["batch"])
    p = c["rank"]
    if c["driver"] == "-":
        Bg, Ag, _ = get_method(c["form"])(list(Bs), list(As), rank=p)
    else:
        U, S, Vh = _decompose(_dense(list(Bs), list(As), c["form"]), c["driver"])
        Bg, Ag = U[..., :p] * S[..., None, :p], Vh[..., :p, :]
    f = fidelity(B, A, Bg, Ag, p)
    return dict(relative_error=f.relative_error.tolist())
