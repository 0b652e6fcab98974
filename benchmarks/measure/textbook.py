r"""Two baselines a numerical analyst reaches for, on the suites' calling convention
(:mod:`benchmarks.measure.methods`): neither squares the spectrum.

- ``qr-svd``, the textbook recompression of a low-rank product (also the "two reduced
  QRs + core SVD" method the paper cites): :math:`B = Q_1 R_1`, :math:`A^\top = Q_2 R_2`,
  the SVD of the :math:`r \times r` core :math:`R_1 R_2^\top = U \Sigma V^\top`, then
  :math:`B_g = Q_1 U_p \Sigma_p`, :math:`A_g = V_p^\top Q_2^\top`. Backward stable on the
  product: each singular value is within about :math:`\varepsilon \sigma_1` of the exact
  one and the subspaces obey Wedin's bound at the dtype's eps (the float64 reference,
  :func:`fraq.reference.reference_svd`, is this algorithm in float64).
  Leading-order flops: 2 m r^2 + 2 n r^2 (two QRs) + 2 r^3 (core) + O(r^3) (SVD) +
  2 (m + n) r p (the factors back: each Q applied to the p kept columns only).
- ``rsvd``, a randomized SVD of the product operator, as :func:`torch.svd_lowrank` runs it
  (Halko, Martinsson and Tropp, SIAM Rev. 53, 2011, Algs. 4.4 and 5.1) but on
  :math:`x \mapsto B (A x)`, no m x n matrix: a Gaussian test matrix of q = p + 10
  columns (capped at the stacked rank and min(m, n)), two power iterations with
  re-orthonormalization, then the SVD of the small :math:`q \times n` projection. Its
  rank-p result is near-optimal, not optimal: the excess shrinks with the spectral
  gap at p (Halko et al., Thm. 10.8). Under ``tau`` it runs at q = the stacked rank
  (capped by min(m, n)), where the range is captured exactly, and cuts by the energy rule.

Both cut by :func:`fraq.select_rank` under ``tau``, like every method here, and compute in
the factors' dtype (float32 for bfloat16 and float16).
"""

from __future__ import annotations

import torch

__all__ = ["DISPLAY_NAMES", "OVERSAMPLE", "POWER_ITERATIONS", "qr_svd", "rsvd"]

DISPLAY_NAMES = {"qr-svd": "QR-QR-SVD", "rsvd": "rSVD"}
"""The names reports show for the two baselines (:func:`benchmarks.measure.described.describe`
writes them into each result): the textbook names of the two recompressions."""

OVERSAMPLE = 10
"""rsvd's extra columns beyond p (torch.svd_lowrank's default q is 6; Halko et al. advise 5-10)."""

POWER_ITERATIONS = 2
"""rsvd's power iterations (torch.svd_lowrank's default ``niter``)."""


def _stacks(Bs, As, weights, scales):
    import fraq
    from fraq.internals import compute_dtype

    return fraq.stack(Bs, As, weights, scales, dtype=compute_dtype(Bs[0].dtype))


def _cut(U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor, rank, tau, out_dtype):
    """The rank-p factors (B_g = U_p S_p, A_g = Vh_p) from a descending SVD, p fixed or by the energy rule."""
    import fraq

    if tau is not None:
        p = fraq.select_rank(S.square(), tau)
        pmax = int(p.max()) if p.numel() else 0
        keep = (torch.arange(pmax, device=S.device) < p.unsqueeze(-1)).to(S.dtype)
        Bg = U[..., :pmax] * (S[..., :pmax] * keep).unsqueeze(-2)
        Ag = Vh[..., :pmax, :] * keep.unsqueeze(-1)
        p = int(p) if p.dim() == 0 else p
    else:
        p = rank
        Bg, Ag = U[..., :p] * S[..., None, :p], Vh[..., :p, :]
    return Bg.to(out_dtype), Ag.to(out_dtype), p


def qr_svd(Bs, As, *, rank=None, tau=None, weights=None, scales=None):
    """Two reduced QRs and the SVD of the core (see the module docstring), at its best: each
    QR and the core's SVD a batch split over the threads as FRAQ's (one matrix per thread,
    :func:`fraq.internals.batched`), and each Q applied to the p kept columns
    of the core's vectors only (2 (m + n) r p, not 2 (m + n) r^2), the tall product
    written column-major (:func:`fraq.internals.tall_product`), and a small batch on one
    thread where FRAQ's would be (:func:`fraq.internals.whole_batch_threads`)."""
    from fraq.internals import batched, tall_product, whole_batch_threads

    B, A = _stacks(Bs, As, weights, scales)
    with whole_batch_threads(B, A):
        Q1, R1 = batched(torch.linalg.qr, B)
        Q2, R2 = batched(torch.linalg.qr, A.mT)
        Uc, S, Vch = batched(_svd, R1 @ R2.mT)
        Bc, Ac, p = _cut(Uc, S, Vch, rank, tau, S.dtype)
        return tall_product(Q1, Bc).to(Bs[0].dtype), (Ac @ Q2.mT).to(Bs[0].dtype), p


def _svd(X: torch.Tensor):
    return torch.linalg.svd(X, full_matrices=False)


def rsvd(Bs, As, *, rank=None, tau=None, weights=None, scales=None, seed: int = 0):
    """A randomized SVD of x -> B (A x) (see the module docstring), at its best as
    :func:`qr_svd` is: each QR a batch split over the threads
    (:func:`fraq.internals.batched`), the wide q x n projection decomposed through its
    transpose (:func:`fraq.internals.thin_svd`), every product with q columns and
    m or n rows written column-major (:func:`fraq.internals.tall_product`), and a small
    batch on one thread where FRAQ's would be (:func:`fraq.internals.whole_batch_threads`)."""
    from fraq.internals import batched, tall_product, thin_svd, whole_batch_threads

    B, A = _stacks(Bs, As, weights, scales)
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    cap = min(m, n, r)
    q = cap if tau is not None else min(rank + OVERSAMPLE, cap)
    g = torch.Generator(device=B.device).manual_seed(seed)
    omega = torch.randn(*A.shape[:-2], n, q, generator=g, device=B.device, dtype=B.dtype)

    def orthonormal(M):
        return batched(torch.linalg.qr, M)[0]

    with whole_batch_threads(B, A):
        Q = orthonormal(tall_product(B, A @ omega))
        for _ in range(POWER_ITERATIONS):
            Z = orthonormal(tall_product(A.mT, B.mT @ Q))
            Q = orthonormal(tall_product(B, A @ Z))
        Ut, S, Vh = thin_svd((Q.mT @ B) @ A)
        return _cut(tall_product(Q, Ut), S, Vh, rank, tau, Bs[0].dtype)
