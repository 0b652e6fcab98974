r"""The paper's Table 4 ablation: orientation and spectral recovery as switches.

:func:`fraq.recompress` always orients along the smaller side and always recovers the
spectrum from the r x r Gram matrix. To measure what each choice is worth, this module
runs the same pipeline with the two choices exposed:

- ``orientation="adaptive"`` (Eq. 9): QR of the factor on the smaller side d, so the
  larger side D appears only in matrix products. ``"fixed"``: always QR of B (m x r),
  whatever m and n are; for the 8192 x 3072 gate/up projections that is a QR of the
  8192-long factor.
- ``spectral="gram"``: :math:`G = HH^\top`, ``eigh``, :math:`R_p = U_p^\top H`.
  ``"svd"`` ("coordinate SVD"): a thin SVD of the r x D coordinate matrix H itself,
  :math:`R_p = \Sigma_p V_p^\top`. Same subspace, same product up to rounding; the SVD
  works on the r x D matrix and keeps an r x D right factor, the Gram only on r x r.

Everything else is shared and identical across variants: one Householder QR
(``geqrf``), H = R Y, the top-p directions, L = Q U_p through the stored reflectors
(``ormqr``), the transpose back. The power-of-two prescaling of :func:`fraq.recompress`
is left out of all three (it is elementwise and the same for all); the library call is
timed beside the variants so their distance to it is visible.

Flops per matrix, leading order, m = 8192 > n = 3072 (d = n, D = m), r = 64:
adaptive+gram 2dr^2 + 4Dr^2; fixed+gram 2Dr^2 + 4dr^2 (fewer FLOPs here: the fixed
variant's win or loss is purely QR-versus-GEMM speed); adaptive+svd 2dr^2 + 2Dr^2 +
6Dr^2 + O(r^3) (R-SVD of the r x D H).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["STEPS", "VARIANTS", "VARIANT_NAMES", "ablation_variant", "variant_calls", "variant_steps"]

VARIANTS: dict[str, tuple[str, str]] = {
    "adaptive-gram": ("adaptive", "gram"),
    "fixed-gram": ("fixed", "gram"),
    "adaptive-svd": ("adaptive", "svd"),
}
"""Table 4's rows: name -> (orientation, spectral)."""

VARIANT_NAMES = [*VARIANTS, "library"]
"""The rows every suite measures: the variants and :func:`fraq.recompress` itself."""


def ablation_variant(B: torch.Tensor, A: torch.Tensor, rank: int, *, orientation: str = "adaptive",
                     spectral: str = "gram") -> tuple[torch.Tensor, torch.Tensor]:
    """Rank-``rank`` adapter ``(Bg, Ag)`` of ``B @ A`` with the two Table 4 switches.

    Args:
        B: (*, m, r) stacked B. A: (*, r, n) stacked A. Floating dtype, computed in it.
        rank: output rank p, 1 <= p <= min(m, n, r).
        orientation: ``"adaptive"`` (QR on the smaller side) or ``"fixed"`` (QR of B).
        spectral: ``"gram"`` (eigh of H H^T) or ``"svd"`` (thin SVD of H).

    Returns:
        ``Bg`` (*, m, p), ``Ag`` (*, p, n) with ``Bg @ Ag`` a best rank-p approximation.
    """
    from fraq.internals import orient, unorient

    if orientation not in ("adaptive", "fixed"):
        raise ValueError(f"orientation(={orientation!r}) must be 'adaptive' or 'fixed'")
    if spectral not in ("gram", "svd"):
        raise ValueError(f"spectral(={spectral!r}) must be 'gram' or 'svd'")
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    s_max = min(m, n, r)
    if not 1 <= rank <= s_max:
        raise ValueError(f"rank(={rank}) must be in [1, {s_max}]")
    X, Y, transposed = orient(B, A, adaptive=orientation == "adaptive")
    d = X.shape[-2]
    s = min(d, r)

    reflectors, tau = torch.geqrf(X)
    R = torch.triu(reflectors[..., :s, :])
    H = torch.matmul(R, Y)  # (*, s, D)
    if spectral == "gram":
        _, U = torch.linalg.eigh(torch.matmul(H, H.mT))
        Up = U[..., :, -rank:].flip(-1)
        Rp = torch.matmul(Up.mT, H)
    else:
        U, S, Vh = torch.linalg.svd(H, full_matrices=False)
        Up = U[..., :, :rank]
        Rp = S[..., :rank, None] * Vh[..., :rank, :]
    padded = Up.new_zeros(*Up.shape[:-2], d, rank)
    padded[..., :s, :] = Up
    L = torch.ormqr(reflectors, tau, padded)
    return unorient(L, Rp, transposed)


def variant_calls(B: torch.Tensor, A: torch.Tensor, rank: int) -> dict[str, Callable[[], tuple]]:
    """Zero-argument callables, one per name in :data:`VARIANT_NAMES`, each returning ``(Bg, Ag)``."""
    import fraq

    calls = {name: (lambda o=o, s=s: ablation_variant(B, A, rank, orientation=o, spectral=s))
             for name, (o, s) in VARIANTS.items()}

    def library():
        res = fraq.recompress(B, A, rank=rank)
        return res.B, res.A

    calls["library"] = library
    return calls


STEPS = ("qr", "coordinates", "gram", "eigh", "project", "basis")
"""The Gram pipeline's steps, in order: ``qr`` geqrf of the oriented factor X (d x r);
``coordinates`` H = R Y (s x D); ``gram`` H H^T; ``eigh`` of it; ``project`` R_p = U_p^T H;
``basis`` L = Q U_p through the reflectors (ormqr). Orientation and the transpose back are
views."""


def variant_steps(B: torch.Tensor, A: torch.Tensor, rank: int, orientation: str) -> dict[str, Callable[[], object]]:
    """One zero-argument call per step of :data:`STEPS` of the ``(orientation, "gram")``
    variant of :func:`ablation_variant`, each on the previous steps' results computed once
    here, so that each step can be timed alone."""
    from fraq.internals import orient

    X, Y, _ = orient(B, A, adaptive=orientation == "adaptive")
    d, r = X.shape[-2], X.shape[-1]
    s = min(d, r)
    reflectors, tau = torch.geqrf(X)
    R = torch.triu(reflectors[..., :s, :])
    H = torch.matmul(R, Y)
    G = torch.matmul(H, H.mT)
    _, U = torch.linalg.eigh(G)
    Up = U[..., :, -rank:].flip(-1)
    padded = Up.new_zeros(*Up.shape[:-2], d, rank)
    padded[..., :s, :] = Up
    return {"qr": lambda: torch.geqrf(X),
            "coordinates": lambda: torch.matmul(torch.triu(reflectors[..., :s, :]), Y),
            "gram": lambda: torch.matmul(H, H.mT),
            "eigh": lambda: torch.linalg.eigh(G),
            "project": lambda: torch.matmul(Up.mT, H),
            "basis": lambda: torch.ormqr(reflectors, tau, padded)}
