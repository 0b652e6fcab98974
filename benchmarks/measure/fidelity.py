r"""Fidelity of a recompressed adapter against float64 references.

For an exact aggregate :math:`M = BA` (the weighted stacks) and a rank-p adapter
:math:`B_g A_g`:

- relative error :math:`\|M - B_g A_g\|_F / \|M\|_F`, in float64 from the factors
  (:func:`fraq.reference.factored_error` over the norm of the float64 spectrum, no m x n
  matrix);
- the Eckart-Young optimum :math:`\sqrt{\sum_{i>p}\sigma_i^2} / \|M\|_F` at the same p,
  from the float64 singular values of :func:`fraq.reference.reference_svd`;
- the excess, relative error minus optimum: what the method and its precision lose beyond
  the truncation every rank-p method must make. When the adapter lies in the dominant
  subspaces its own error e adds to the truncation in quadrature,
  :math:`\text{rel}^2 = \text{opt}^2 + e^2`, so at a truncating rank the excess is only
  :math:`e^2 / (2\,\text{opt})` and float32 rounding (e ~ 1e-7) vanishes from it.
  :attr:`Fidelity.excess_quadrature`, :math:`\sqrt{\text{rel}^2 - \text{opt}^2}`, recovers
  e (to about 1e-8 relative, from float64 cancellation); at full rank both equal rel;
- orthogonality :math:`\|Q^\top Q - I_p\|_F` of the adapter's orthonormal side: the
  columns of ``B_g`` or the rows of ``A_g``, whichever is closer to orthonormal (FRAQ's
  basis side depends on the orientation, FLoRIST puts its singular values on B).

Batched inputs give one value per matrix; per-matrix ranks (``rank`` a tensor) restrict
each matrix's orthogonality check to its own first p_i columns, the rest being the zero
padding :func:`fraq.recompress` documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Fidelity", "fidelity", "optimal_from_spectrum", "orthogonality_error", "summarize"]


@dataclass(frozen=True)
class Fidelity:
    """Per-matrix fidelity, float64 tensors of the batch shape (0-d when unbatched)."""

    relative_error: torch.Tensor
    optimal_error: torch.Tensor
    orthogonality: torch.Tensor

    @property
    def excess(self) -> torch.Tensor:
        """Relative error minus the optimum."""
        return self.relative_error - self.optimal_error

    @property
    def excess_quadrature(self) -> torch.Tensor:
        """sqrt(rel^2 - opt^2): the method's own error once the truncation is taken out."""
        rel, opt = self.relative_error, self.optimal_error
        return (rel.square() - opt.square()).clamp(min=0).sqrt()

    def summary(self) -> dict:
        return {
            "relative_error": summarize(self.relative_error),
            "optimal_error": summarize(self.optimal_error),
            "excess": summarize(self.excess),
            "excess_quadrature": summarize(self.excess_quadrature),
            "orthogonality": summarize(self.orthogonality),
        }


def summarize(x: torch.Tensor) -> dict:
    """Mean, 10th/50th/90th percentiles and max of a tensor of per-matrix values."""
    x = x.double().reshape(-1)
    if x.numel() == 0:
        return {"mean": float("nan"), "p10": float("nan"), "p50": float("nan"), "p90": float("nan"), "max": float("nan")}
    q = torch.quantile(x, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return {"mean": float(x.mean()), "p10": float(q[0]), "p50": float(q[1]), "p90": float(q[2]), "max": float(x.max())}


def _ranks(rank, batch: torch.Size, width: int) -> torch.Tensor:
    p = torch.as_tensor(rank, dtype=torch.int64)
    return p.expand(batch) if p.dim() == 0 else p.reshape(batch)


def orthogonality_error(Bg: torch.Tensor, Ag: torch.Tensor, rank=None) -> torch.Tensor:
    r""":math:`\min(\|B_g^\top B_g - I_p\|_F, \|A_g A_g^\top - I_p\|_F)` per matrix, in float64.

    ``rank`` (int or tensor of the batch shape) masks the padding columns; default: all.
    """
    width = Bg.shape[-1]
    batch = Bg.shape[:-2]
    p = _ranks(width if rank is None else rank, batch, width)
    keep = (torch.arange(width) < p.unsqueeze(-1)).double()  # (*, width)
    target = torch.diag_embed(keep)
    Bd, Ad = Bg.double(), Ag.double()
    eb = torch.linalg.matrix_norm(Bd.mT @ Bd - target)
    ea = torch.linalg.matrix_norm(Ad @ Ad.mT - target)
    return torch.minimum(eb, ea)


def optimal_from_spectrum(S: torch.Tensor, rank) -> torch.Tensor:
    """Eckart-Young optimum sqrt(sum_{i>p} S_i^2) / ||S|| per matrix (0 where S is all zero)."""
    S = S.double()
    idx = torch.arange(S.shape[-1])
    p = torch.as_tensor(rank).unsqueeze(-1)
    tail = torch.where(idx >= p, S, torch.zeros_like(S)).square().sum(-1).sqrt()
    total = S.square().sum(-1).sqrt()
    return torch.where(total > 0, tail / torch.where(total > 0, total, 1), torch.zeros_like(total))


def fidelity(B: torch.Tensor, A: torch.Tensor, Bg: torch.Tensor, Ag: torch.Tensor, rank=None, *,
             singular_values: torch.Tensor | None = None) -> Fidelity:
    """Fidelity of ``Bg @ Ag`` as an approximation of the aggregate ``B @ A``.

    Args:
        B, A: (*, m, r), (*, r, n) exact stacks (any dtype; the references run in float64).
        Bg, Ag: (*, m, P), (*, P, n) the method's adapter; columns past a matrix's rank
            must be zero.
        rank: the rank each matrix was cut to (int or int tensor of the batch shape);
            default P. The optimum is taken at this rank.
        singular_values: the aggregate's float64 singular values (*, s), if already known
            (from :func:`fraq.reference.reference_svd`); comparing several methods on the
            same inputs then skips recomputing the reference.
    """
    from fraq.reference import factored_error, reference_svd

    width = Bg.shape[-1]
    p = width if rank is None else rank
    S = reference_svd(B, A)[1] if singular_values is None else singular_values.double()
    num = factored_error(B, A, Bg, Ag)
    den = S.square().sum(-1).sqrt()
    rel = torch.where(den > 0, num / torch.where(den > 0, den, 1), (num > 0).double())
    opt = optimal_from_spectrum(S, torch.as_tensor(p))
    orth = orthogonality_error(Bg, Ag, p) if width > 0 else torch.zeros_like(rel)
    return Fidelity(relative_error=rel, optimal_error=opt, orthogonality=orth)
