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
  basis side depends on the orientation, FLoRIST puts its singular values on B);
- **first order** (:class:`FirstOrder`), what the error norms above cannot see once
  truncation dominates them: the sine of the largest principal angle between the kept
  left (right) subspace, col(B_g) (row(A_g)), and the float64 SVD's leading p, where the
  gap :math:`\sigma_p - \sigma_{p+1}` makes that subspace defined (NaN otherwise), and
  the largest relative error of the kept singular values (those of B_g A_g against
  :math:`\sigma_1..\sigma_p`). Beside them, per matrix, the two bounds a method can be
  held to at the dtype's unit roundoff u: a backward-stable method on the product
  perturbs it by :math:`\lVert E\rVert \le c\,u\,\sigma_1` (c = sqrt(min(m, n)),
  the probabilistic growth of a normwise error), so Wedin's theorem gives
  :math:`\sin\theta \le c\,u\,\sigma_1 / (\sigma_p - \sigma_{p+1})` (``bound_first``);
  a method that forms the Gram :math:`MM^\top` perturbs *it* by :math:`c\,u\,\sigma_1^2`,
  and Davis-Kahan gives :math:`\sin\theta \le c\,u\,\sigma_1^2 / (\sigma_p^2 -
  \sigma_{p+1}^2)` (``bound_squared``), which is the first bound times about
  :math:`\sigma_1 / \sigma_p`: kappa squared. A method within ``bound_first`` is
  first-order accurate; one within only ``bound_squared`` pays for squaring the spectrum.

Batched inputs give one value per matrix; per-matrix ranks (``rank`` a tensor) restrict
each matrix's orthogonality check to its own first p_i columns, the rest being the zero
padding :func:`fraq.recompress` documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["FirstOrder", "Fidelity", "first_order", "fidelity", "optimal_from_spectrum", "orthogonality_error", "summarize"]


@dataclass(frozen=True)
class FirstOrder:
    """Per-matrix first-order fidelity (module docstring), float64 tensors of the batch shape:
    ``sin_left``, ``sin_right`` (NaN where the gap at p is not defined), ``sigma_error``,
    ``bound_first``, ``bound_squared`` (NaN where the gap is not defined)."""

    sin_left: torch.Tensor
    sin_right: torch.Tensor
    sigma_error: torch.Tensor
    bound_first: torch.Tensor
    bound_squared: torch.Tensor

    def as_dict(self) -> dict:
        return {k: getattr(self, k).tolist() for k in
                ("sin_left", "sin_right", "sigma_error", "bound_first", "bound_squared")}


GAP = 1e-10
"""A gap sigma_p - sigma_{p+1} below GAP * sigma_1 leaves the rank-p subspaces undefined (to the
float64 reference's own accuracy and well above it): their angles are NaN there."""


def _sin(Q: torch.Tensor, U: torch.Tensor) -> float:
    """Sine of the largest principal angle between col(Q) (orthonormal) and col(U) (orthonormal)."""
    if Q.shape[-1] == 0:
        return float("nan")
    return float(torch.linalg.matrix_norm(Q - U @ (U.mT @ Q), ord=2))


def first_order(Bg: torch.Tensor, Ag: torch.Tensor, rank, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor,
                eps: float) -> FirstOrder:
    """:class:`FirstOrder` of the adapter ``Bg @ Ag`` cut to ``rank`` (int or tensor of the batch
    shape) against the float64 SVD ``U, S, Vh`` of the aggregate (:func:`fraq.reference.reference_svd`);
    ``eps`` is the unit roundoff the bounds are stated at (the method's compute dtype)."""
    batch = Bg.shape[:-2]
    m, n = Bg.shape[-2], Ag.shape[-1]
    c = min(m, n) ** 0.5
    p_all = _ranks(Bg.shape[-1] if rank is None else rank, batch, Bg.shape[-1]).reshape(-1)
    Bf, Af = Bg.double().reshape(-1, m, Bg.shape[-1]), Ag.double().reshape(-1, Ag.shape[-2], n)
    Uf, Sf, Vf = U.double().reshape(-1, *U.shape[-2:]), S.double().reshape(-1, S.shape[-1]), \
        Vh.double().reshape(-1, *Vh.shape[-2:])
    out = {k: [] for k in ("sin_left", "sin_right", "sigma_error", "bound_first", "bound_squared")}
    nan = float("nan")
    for i in range(Bf.shape[0]):
        p, sv = int(p_all[i]), Sf[i]
        s1 = float(sv[0]) if sv.numel() else 0.0
        nxt = float(sv[p]) if p < sv.numel() else 0.0
        gap = float(sv[p - 1]) - nxt if 0 < p <= sv.numel() else 0.0
        defined = s1 > 0 and gap > GAP * s1
        Qb, Rb = torch.linalg.qr(Bf[i, :, :p])
        Qa, Ra = torch.linalg.qr(Af[i, :p, :].mT)
        got = torch.linalg.svdvals(Rb @ Ra.mT) if p else sv[:0]
        want = sv[:p]
        live = want > 0
        rel = ((got - want).abs() / torch.where(live, want, 1.0))[live]
        out["sigma_error"].append(float(rel.max()) if rel.numel() else 0.0)
        out["sin_left"].append(_sin(Qb, Uf[i, :, :p]) if defined else nan)
        out["sin_right"].append(_sin(Qa, Vf[i, :p, :].mT) if defined else nan)
        out["bound_first"].append(c * eps * s1 / gap if defined else nan)
        out["bound_squared"].append(c * eps * s1 * s1 / (gap * (float(sv[p - 1]) + nxt)) if defined else nan)
    return FirstOrder(**{k: torch.tensor(v, dtype=torch.float64).reshape(batch) for k, v in out.items()})


@dataclass(frozen=True)
class Fidelity:
    """Per-matrix fidelity, float64 tensors of the batch shape (0-d when unbatched);
    ``first`` the first-order metrics where the float64 subspaces were at hand, else None."""

    relative_error: torch.Tensor
    optimal_error: torch.Tensor
    orthogonality: torch.Tensor
    first: FirstOrder | None = None

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
             singular_values: torch.Tensor | None = None, reference: tuple | None = None,
             eps: float | None = None) -> Fidelity:
    """Fidelity of ``Bg @ Ag`` as an approximation of the aggregate ``B @ A``.

    Args:
        B, A: (*, m, r), (*, r, n) exact stacks (any dtype; the references run in float64).
        Bg, Ag: (*, m, P), (*, P, n) the method's adapter; columns past a matrix's rank
            must be zero.
        rank: the rank each matrix was cut to (int or int tensor of the batch shape);
            default P. The optimum is taken at this rank.
        singular_values: the aggregate's float64 singular values (*, s), if already known
            (from :func:`fraq.reference.reference_svd`); comparing several methods on the
            same inputs then skips recomputing the reference; then ``first`` is None
            unless ``reference`` is given too.
        reference: the aggregate's float64 SVD ``(U, S, Vh)``, if already known; with it
            (or with neither argument, when it is computed here) ``first`` is measured.
        eps: the unit roundoff of the first-order bounds; default the adapter's compute
            dtype's (float64 for float64, float32 otherwise).
    """
    from fraq.reference import factored_error, reference_svd

    width = Bg.shape[-1]
    p = width if rank is None else rank
    if reference is None and singular_values is None:
        reference = reference_svd(B, A)
    S = reference[1].double() if reference is not None else singular_values.double()
    num = factored_error(B, A, Bg, Ag)
    den = S.square().sum(-1).sqrt()
    rel = torch.where(den > 0, num / torch.where(den > 0, den, 1), (num > 0).double())
    opt = optimal_from_spectrum(S, torch.as_tensor(p))
    orth = orthogonality_error(Bg, Ag, p) if width > 0 else torch.zeros_like(rel)
    first = None
    if reference is not None:
        u = eps if eps is not None else torch.finfo(torch.float64 if Bg.dtype == torch.float64 else torch.float32).eps
        first = first_order(Bg, Ag, p, reference[0], S, reference[2], u)
    return Fidelity(relative_error=rel, optimal_error=opt, orthogonality=orth, first=first)
