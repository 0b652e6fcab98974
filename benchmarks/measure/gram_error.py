r"""Float64 error and Eckart-Young optimum of a factored result from the factors' small Grams.

For the exact aggregate :math:`M = BA` (B (*, m, r), A (*, r, n)) and an adapter
:math:`B_g A_g` (width p), with :math:`L = [B, B_g]` (m x (r + p)) and
:math:`R = [A; A_g]` ((r + p) x n):

.. math::
    \|M - B_g A_g\|_F^2 = \sum (L^\top L) \circ (R R^\top) \circ s s^\top,
    \qquad s = (1_r, -1_p),

since :math:`\|XY\|_F^2 = \mathrm{tr}(X^\top X\, Y Y^\top)`. The singular values of M are
those of :math:`C A` for any C with :math:`C^\top C = B^\top B` (here
:math:`C = \Lambda^{1/2} V^\top` from the eigendecomposition of :math:`B^\top B`), so
:math:`\sigma_i^2` are the eigenvalues of :math:`C (A A^\top) C^\top`, r x r.

Cost: two (r + p)-wide Grams, 2 (m + n)(r + p)^2 FLOPs, and r x r eigenproblems: the
order of :func:`fraq.recompress` itself, against a QR of each m x (r + p) factor for
:func:`fraq.reference.relative_error` (BLAS-2-bound Householder steps, seconds per LLaMA
group). Everything runs in float64.

Precision: the squared error is a difference of sums of size :math:`\|M\|_F^2`, so its
absolute rounding is about :math:`(r + p)\,\epsilon_{64} \|M\|_F^2` and the relative
error is accurate to about :math:`(r + p)\,\epsilon_{64} / (2\,\text{rel}^2)` of itself:
1e-11 at a relative error of 1e-2, 1e-3 at 1e-7 (float32 rounding at full rank). The same
holds for the optimum's tail :math:`\sum_{i>p}\sigma_i^2`. That is what a demo printing
errors of truncations to three digits needs; fidelity sweeps that resolve float32
rounding use :mod:`benchmarks.measure.fidelity` (QR-based, no squaring).
"""

from __future__ import annotations

import torch

__all__ = ["gram_errors"]


def gram_errors(B: torch.Tensor, A: torch.Tensor, Bg: torch.Tensor, Ag: torch.Tensor, rank=None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(relative error, optimum)`` per matrix, float64 tensors of the batch shape.

    ``rank``: the rank each matrix was cut to (int or an int tensor of the batch shape),
    where the optimum is taken; default the adapter's width. A zero aggregate has relative
    error 1 where the adapter is nonzero (0 where it is zero) and optimum 0, as
    :func:`fraq.reference.relative_error` and :func:`~fraq.reference.optimal_error`.
    """
    if B.shape[-1] != A.shape[-2] or Bg.shape[-1] != Ag.shape[-2]:
        raise ValueError(f"B (*, m, r) and A (*, r, n) must multiply, as Bg and Ag: B.shape={tuple(B.shape)}, "
                         f"A.shape={tuple(A.shape)}, Bg.shape={tuple(Bg.shape)}, Ag.shape={tuple(Ag.shape)}")
    if (B.shape[:-1], A.shape[-1]) != (Bg.shape[:-1], Ag.shape[-1]) or B.shape[:-2] != A.shape[:-2]:
        raise ValueError(f"Bg @ Ag must have the shape of B @ A: B.shape={tuple(B.shape)}, A.shape={tuple(A.shape)}, "
                         f"Bg.shape={tuple(Bg.shape)}, Ag.shape={tuple(Ag.shape)}")
    r = B.shape[-1]
    L = torch.cat([B.double(), Bg.double()], dim=-1)
    R = torch.cat([A.double(), Ag.double()], dim=-2)
    GL, GR = L.mT @ L, R @ R.mT
    sign = torch.cat([torch.ones(r, dtype=torch.float64), -torch.ones(Bg.shape[-1], dtype=torch.float64)])
    err2 = (GL * GR * torch.outer(sign, sign)).sum((-2, -1)).clamp(min=0)
    total2 = (GL[..., :r, :r] * GR[..., :r, :r]).sum((-2, -1)).clamp(min=0)
    lam, V = torch.linalg.eigh(GL[..., :r, :r])
    C = lam.clamp(min=0).sqrt().unsqueeze(-1) * V.mT  # C^T C = B^T B
    sigma2 = torch.linalg.eigvalsh(C @ GR[..., :r, :r] @ C.mT).flip(-1).clamp(min=0)  # descending
    p = torch.as_tensor(Bg.shape[-1] if rank is None else rank).unsqueeze(-1)
    tail2 = torch.where(torch.arange(r) >= p, sigma2, torch.zeros_like(sigma2)).sum(-1)
    nonzero = total2 > 0
    safe = torch.where(nonzero, total2, torch.ones_like(total2))
    rel = torch.where(nonzero, (err2 / safe).sqrt(), (err2 > 0).double())
    opt = torch.where(nonzero, (tail2 / safe).clamp(max=1).sqrt(), torch.zeros_like(total2))
    return rel, opt
