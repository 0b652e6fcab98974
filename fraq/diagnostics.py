r"""Accuracy diagnostics of a basis backend (the paper's Appendix D), all in float64.

For the oriented left factor X (d x r) and a backend's basis (Q, C), and for the
truncated update :math:`B_g A_g` that :func:`fraq.recompress` builds with it:

=====================  ===========================================================
``orthogonality``      :math:`\lVert Q^\top Q - I\rVert_F`
``span_residual``      :math:`\lVert X - QQ^\top X\rVert_F / \lVert X\rVert_F`
                       (the direct coordinates; Appendix D's second measure)
``reconstruction``     :math:`\lVert X - QC\rVert_F / \lVert X\rVert_F` with the
                       backend's own C (differs from the above for lstsq/Cholesky
                       coordinates and non-orthonormal Q)
``gap_to_householder`` :math:`\lVert B_gA_g - B_hA_h\rVert_F / \lVert B_hA_h\rVert_F`,
                       against exact Householder FRAQ at the same tau or rank
``relative_error``     :math:`\lVert BA - B_gA_g\rVert_F / \lVert BA\rVert_F`
``optimal_error``      the float64 Eckart-Young optimum at the selected rank
``gap_to_optimum``     ``relative_error - optimal_error``
=====================  ===========================================================

Q is formed explicitly from ``apply`` (Q = apply(I)) and cast to float64, so the
measures see the backend's rounding and not the diagnostics' own. The product errors
reuse :mod:`fraq.reference` (no m x n matrix is formed). Diagnostics cost a few times a
recompression; they are for tests and benchmarks, not for the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fraq._orient import orient
from fraq._validation import check_finite, check_pair, compute_dtype
from fraq.backends import Basis, get_backend
from fraq._recompress import recompress
from fraq.reference import optimal_error, relative_error
from fraq.result import RecompressResult

__all__ = [
    "BackendDiagnostics",
    "basis_matrix",
    "orthogonality_error",
    "span_residual",
    "reconstruction_error",
    "update_gap",
    "oriented_factor",
    "diagnose",
]


def oriented_factor(B: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The X that :func:`fraq.recompress` hands to a backend: B (m <= n) or A^T (m > n), compute dtype."""
    return orient(B, A)[0].to(compute_dtype(B.dtype))


def basis_matrix(basis: Basis) -> torch.Tensor:
    """Q (*, d, s) made explicit as ``basis.apply(I_s)``, in the basis' dtype."""
    C = basis.C
    s = C.shape[-2]
    eye = torch.eye(s, dtype=C.dtype, device=C.device).expand(*C.shape[:-2], s, s)
    return basis.apply(eye)


def _fro(t: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(t)


def _relative(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    return torch.where(den > 0, num / torch.where(den > 0, den, 1), (num > 0).to(num.dtype))


def orthogonality_error(basis: Basis) -> torch.Tensor:
    """||Q^T Q - I||_F per matrix (*,), float64."""
    Q = basis_matrix(basis).double()
    eye = torch.eye(Q.shape[-1], dtype=torch.float64, device=Q.device)
    return _fro(Q.mT @ Q - eye)


def span_residual(X: torch.Tensor, basis: Basis) -> torch.Tensor:
    """||X - Q Q^T X||_F / ||X||_F per matrix (*,), float64 (0 for a zero X with exact Q)."""
    Q = basis_matrix(basis).double()
    Xd = X.double()
    return _relative(_fro(Xd - Q @ (Q.mT @ Xd)), _fro(Xd))


def reconstruction_error(X: torch.Tensor, basis: Basis) -> torch.Tensor:
    """||X - Q C||_F / ||X||_F per matrix (*,), float64, with the backend's coordinates C."""
    Q = basis_matrix(basis).double()
    Xd = X.double()
    return _relative(_fro(Xd - Q @ basis.C.double()), _fro(Xd))


def update_gap(result: RecompressResult, reference: RecompressResult) -> torch.Tensor:
    """||B_g A_g - B_ref A_ref||_F / ||B_ref A_ref||_F per matrix, float64."""
    return relative_error(reference.B, reference.A, result.B, result.A)


@dataclass(frozen=True)
class BackendDiagnostics:
    """Everything :func:`diagnose` measured; tensors have the batch shape (*,), float64."""

    backend: str
    rank: torch.Tensor
    orthogonality: torch.Tensor
    span_residual: torch.Tensor
    reconstruction: torch.Tensor
    relative_error: torch.Tensor
    optimal_error: torch.Tensor
    gap_to_optimum: torch.Tensor
    gap_to_householder: torch.Tensor
    info: dict = field(default_factory=dict)

    def worst(self) -> dict:
        """The largest value of each measure over the batch, as Python floats (for tables)."""
        out = {"backend": self.backend, "rank": int(self.rank.max().item())}
        for name in ("orthogonality", "span_residual", "reconstruction", "relative_error",
                     "optimal_error", "gap_to_optimum", "gap_to_householder"):
            out[name] = float(getattr(self, name).max().item())
        return out


def diagnose(
    B: torch.Tensor,
    A: torch.Tensor,
    backend: str,
    *,
    tau: float | None = None,
    rank: int | None = None,
    reference: RecompressResult | None = None,
) -> BackendDiagnostics:
    """Run ``recompress(B, A, backend=backend)`` and measure it against Householder and float64.

    Args:
        B, A: (*, m, r) and (*, r, n) stacked factors, e.g. from :func:`fraq.stack`.
        backend: a name in :data:`fraq.BACKENDS`.
        tau, rank: exactly one, as for :func:`fraq.recompress`.
        reference: Householder's result on the same inputs, to reuse across backends;
            computed when None.

    Returns:
        :class:`BackendDiagnostics`.
    """
    check_pair(B, A)
    check_finite("B", B)
    check_finite("A", A)
    get_backend(backend)  # named ValueError for an unknown backend
    result = recompress(B, A, tau=tau, rank=rank, backend=backend)
    if reference is None:
        reference = recompress(B, A, tau=tau, rank=rank, backend="householder")
    X = oriented_factor(B, A)
    basis = get_backend(backend)(X)
    rel = relative_error(B, A, result.B, result.A)
    opt = optimal_error(B, A, result.rank)
    return BackendDiagnostics(
        backend=backend,
        rank=torch.as_tensor(result.rank),
        orthogonality=orthogonality_error(basis),
        span_residual=span_residual(X, basis),
        reconstruction=reconstruction_error(X, basis),
        relative_error=rel,
        optimal_error=opt,
        gap_to_optimum=rel - opt,
        gap_to_householder=update_gap(result, reference),
        info=dict(result.info),
    )
