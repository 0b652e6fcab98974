"""The energy rule (the paper's Eq. 11) and the Gram's noise floor, in one place.

:func:`fraq.recompress` applies them on the host to the eigenvalues it reads; the
baselines that cut a spectrum (FLoRIST, FlexLoRA) use :func:`select_rank`, the same rule,
on their squared singular values. Eigenvalues of a Gram at or below its noise floor,
``s * eps * lambda_1``, are rounding noise of the squared spectrum, not directions of the
aggregate, and count as exact zeros; so are those at or below the rounding of forming the
product from its factors, ``(s * eps)^2 ||X||_F^2 ||Y||_F^2``, which decides when the
clients cancel (:func:`noise_floor`).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["energy_rule", "noise_floor", "select_rank"]

_TINY64 = float(np.finfo(np.float64).tiny)


def noise_floor(lam_max, s: int, dtype: torch.dtype, input_sq=None):
    r"""Eigenvalues of the Gram at or below this are rounding noise (see the module docstring).

    ``lam_max``: the largest eigenvalue per matrix (a tensor or an array).

    ``input_sq``: :math:`\|X\|_F^2 \|Y\|_F^2` per matrix, the squared scale of the
    factors whose product the Gram is of (same shape as ``lam_max``), or None. Forming
    :math:`X Y` in ``dtype`` perturbs each singular value by up to about
    :math:`s \varepsilon \|X\|_F \|Y\|_F`, so an eigenvalue at or below
    :math:`(s \varepsilon)^2 \|X\|_F^2 \|Y\|_F^2` is rounding of the inputs whatever
    :math:`\lambda_1` is. That floor matters only when the clients cancel
    (:math:`\lambda_1 \ll \|X\|_F^2 \|Y\|_F^2`): for two clients whose updates cancel
    exactly every eigenvalue is such rounding, :math:`\lambda_1 \approx 0.1\,
    \varepsilon^2 \|X\|_F^2 \|Y\|_F^2`, and the aggregate, the zero matrix, has rank 0 as
    the relative floor alone cannot say. Without cancellation it lies
    :math:`2 s^3 \varepsilon` below the relative floor and changes nothing. A non-finite
    ``input_sq`` (an overflowed norm) is ignored."""
    eps = max(s, 1) * torch.finfo(dtype).eps
    floor = lam_max * eps
    if input_sq is None:
        return floor
    if isinstance(floor, torch.Tensor):
        return torch.maximum(floor, torch.where(torch.isfinite(input_sq), input_sq * eps**2, torch.zeros_like(floor)))
    with np.errstate(invalid="ignore"):
        return np.maximum(floor, np.where(np.isfinite(input_sq), input_sq * eps**2, 0.0))


def select_rank(lam, tau: float):
    """Energy rule (Eq. 11) on descending non-negative eigenvalues ``lam`` (*, s).

    Returns the smallest p with sum_{i<=p} lam_i >= tau * sum_i lam_i, as int64 (*),
    and 0 where every eigenvalue is zero. The total is the last entry of the same
    cumulative sum, so at tau = 1 the rule stops exactly at the last nonzero eigenvalue.
    Works on torch tensors (on their device) and numpy arrays alike.
    """
    return _rank_from_cumsum(lam.cumsum(-1), tau)


def _rank_from_cumsum(cums, tau: float):
    """The energy rule on the cumulative eigenvalue sums (*, s) (see :func:`select_rank`):
    the count below tau of the total, plus one where the total is positive."""
    total = cums[..., -1:]
    return (cums < tau * total).sum(-1) + (total[..., 0] > 0)


def energy_rule(lam: np.ndarray, tau: float | None, rank: int | None,
                below: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(p, energy) per matrix from floored, descending eigenvalues (host arrays (nb, s)): the
    energy rule at ``tau``, or the fixed ``rank``.

    ``below`` (nb,): the sum of the eigenvalues at or below the floor (default 0), so that
    the total is the Gram's trace, ||H||_F^2. The floor decides which directions can be
    kept, never how much energy there is: a stack of many clients (r near or past d) has
    hundreds of real eigenvalues below s * eps * lambda_1, each only eps * lambda_1
    accurate but together about 0.1% of the energy, and a total without them would stop
    the rule early and keep less than ``tau`` of ||B A||_F^2 (the float64 spectrum's rank
    is the reference). The rank is at most the count of eigenvalues above the floor, so
    ``tau = 1`` keeps the numerical rank; where none is above it the aggregate is zero to
    the dtype's accuracy, p = 0 and its energy is 1 (nothing is lost)."""
    cums = lam.cumsum(-1)
    total = cums[:, -1] if below is None else cums[:, -1] + np.maximum(below, 0.0)
    live = (lam > 0).sum(-1)
    if tau is not None:
        p = np.minimum((cums < tau * total[:, None]).sum(-1) + (total > 0), live)
    else:
        p = np.full(lam.shape[0], rank, dtype=np.int64)
    kept = cums[np.arange(lam.shape[0]), np.maximum(p - 1, 0)]  # 0 where p = 0
    return p, np.where(live > 0, kept / np.maximum(total, _TINY64), 1.0)
