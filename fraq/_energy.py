r"""The energy rule (the paper's Eq. 11) and what it treats as rounding, in one place.

:func:`fraq.recompress` applies :func:`energy_rule` on the host to the eigenvalues it
reads; the baselines that cut a spectrum (FLoRIST, FlexLoRA) use :func:`select_rank`, the
same rule, on their squared singular values.

**The contract.** For every input, the kept rank p holds at least ``tau`` of the energy of
the exact aggregate of the factors as given (the float64 SVD of
:math:`\sum_k \alpha_k s_k B_k A_k`), up to the rounding of the computation that ran,
about :math:`\min(d, r)\,\varepsilon` of the energy (1e-4 in float32 at d = 768, 1e-13 in
float64), and p is no larger than the float64 rule's at ``tau`` plus that tolerance.
``tau = 1`` keeps the numerical rank. Two rounding bounds decide what is noise, both
invariant to rescaling X's columns against Y's rows (which leaves the product unchanged):

* **The product's rounding** (:func:`noise_floor`, per eigenvalue, absolute). Forming
  :math:`XY` in a dtype of unit roundoff :math:`\varepsilon` errs by
  :math:`|\mathrm{fl}(XY) - XY| \le \gamma_r |X||Y|` (Higham, *Accuracy and Stability
  of Numerical Algorithms*, 2nd ed., Eq. 3.13), and
  :math:`\lVert |X||Y| \rVert_F \le N = \sum_k \lVert x_k\rVert \lVert y_k\rVert`
  (column k of X, row k of Y: the triangle inequality over the rank-one terms). By Weyl's
  inequality every singular value of the computed product is within that of the exact
  one, so an eigenvalue of the Gram at or below :math:`(k \varepsilon N)^2` cannot be
  told from zero by this or any computation from these factors in this dtype, a dense
  SVD of the product included; it counts as an exact zero, in the rank and in the total.
  The constant is :math:`k = \max(\min(d, r), \sqrt{d + r})`: the deterministic
  :math:`\gamma_r \approx r \varepsilon` for a basis (r < d), the Householder QR's
  columnwise error of the same order (Higham, Thm. 19.4), and above the probabilistic
  :math:`\sqrt{d + r}\,\varepsilon` growth (Higham and Mary, SIAM J. Sci. Comput. 41,
  2019) on the identity path. N is what decides when clients cancel: two clients whose
  updates cancel exactly give a Gram of pure rounding, far below :math:`(k\varepsilon N)^2`,
  so the aggregate has rank 0. N is unchanged when x_k is scaled by c and y_k by 1/c,
  while :math:`\lVert X\rVert_F \lVert Y\rVert_F` grows like c^2; a floor from the latter
  dropped the whole update of clients whose factors were scaled in opposite directions.

* **The Gram's rounding** (:func:`gram_budget`, on the energy of the tail). Forming
  :math:`G = HH^\top` and solving it errs normwise by about :math:`\varepsilon\,
  \lVert H\rVert_F^2` (Higham, Eq. 3.13 again; the eigensolver is backward stable), so
  each of the s computed eigenvalues is only :math:`\varepsilon\,\mathrm{tr}\,G` accurate
  in absolute terms, and directions that are exact zeros come back as eigenvalues of
  that size. A per-eigenvalue floor at :math:`s\varepsilon\lambda_1` is the normwise
  bound of one eigenvalue, far above the error of a graded Gram's small eigenvalues
  (about 1e-6 relative here): it dropped every direction of a flat tail at 5e-3
  sigma_1 and kept less than ``tau`` without a word. Here no single eigenvalue is
  judged: the trailing directions are dropped only while all of them *together* hold at
  most :math:`s\varepsilon\,\mathrm{tr}\,G`, the rounding of the s computed eigenvalues
  summed, so the energy lost that way is at most that much. Directions that together
  hold more are real energy and are kept, however small each is.

The rule therefore keeps :math:`p = \min(p_\tau, q)`, where :math:`p_\tau` is Eq. 11 on
the eigenvalues above the product's floor (total: their sum, the Gram's trace) and q the
fewest leading directions whose remainder lies within the Gram's rounding; a result
whose p is q < :math:`p_\tau` keeps less than ``tau`` only by that remainder, and
:func:`fraq.recompress` counts it in ``result.info["below_tau"]``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["DeviceRule", "energy_rule", "energy_rule_device", "floor_constant", "gram_budget", "noise_floor",
           "rounding_eps", "select_rank"]

_TINY64 = float(np.finfo(np.float64).tiny)


@functools.lru_cache(maxsize=None)
def rounding_eps(*dtypes: torch.dtype) -> float:
    """Unit roundoff of the least precise of ``dtypes`` (the compute and eigensolver dtypes)."""
    return max(torch.finfo(t).eps for t in dtypes)


def floor_constant(d: int, r: int) -> float:
    """k of the noise floor (k eps N)^2 at short side d and stacked rank r: max(min(d, r),
    sqrt(d + r)) (module docstring)."""
    return max(min(d, r), math.sqrt(d + r))


def noise_floor(n_sum, d: int, r: int, eps: float):
    r"""The product's rounding, per eigenvalue: :math:`(k \varepsilon N)^2` (module docstring).

    ``n_sum``: :math:`N = \sum_k \lVert x_k\rVert \lVert y_k\rVert` per matrix (a tensor or
    an array); a non-finite N (an overflowed norm) gives no floor (0), the range check
    handles those matrices. ``d``, ``r``: the short side and the stacked rank; ``eps``: the
    unit roundoff of the computation (:func:`rounding_eps`)."""
    k = floor_constant(d, r)
    if isinstance(n_sum, torch.Tensor):
        return torch.where(torch.isfinite(n_sum), torch.square(k * eps * n_sum), torch.zeros_like(n_sum))
    with np.errstate(over="ignore", invalid="ignore"):
        floor = np.square(k * eps * np.asarray(n_sum, dtype=np.float64))
        return floor if np.isfinite(floor).all() else np.where(np.isfinite(floor), floor, 0.0)


def gram_budget(total, s: int, eps: float, n_sum=None):
    r"""The Gram's rounding summed over its s eigenvalues: trailing directions that together
    hold no more than this are rounding (module docstring).

    :math:`s \varepsilon\,\mathrm{tr}\,G`; for a factored Gram (``n_sum`` = N, else
    None) the whole trace where :math:`\mathrm{tr}\,G \le \varepsilon N^2`.
    :math:`C (YY^\top) C^\top` rounds each of its terms :math:`c_j (y_j \cdot y_k) c_k^\top`
    relative to :math:`\lVert c_j\rVert\lVert y_j\rVert\lVert y_k\rVert\lVert c_k\rVert`,
    and those sum to :math:`N^2`: a factored Gram whose whole trace is below that is
    rounding, the zero aggregate of clients that cancel exactly (measured: traces of at
    most 0.14 eps N^2). The bound is normwise and far above the error of each
    eigenvalue of a Gram that is not all rounding (about 1e-3 of eps N^2 for clients
    cancelling to 1e-2), so it decides only that all-or-nothing case; ``gram="auto"``
    sends cancelling clients to the product form anyway (:func:`fraq._gram.cancels`).
    A non-finite N decides nothing."""
    total = np.asarray(total, dtype=np.float64)
    budget = max(s, 1) * eps * total
    if n_sum is None:
        return budget
    with np.errstate(invalid="ignore", over="ignore"):
        rounding = eps * np.square(np.asarray(n_sum, dtype=np.float64))
    return np.where(np.isfinite(rounding) & (total <= rounding), total, budget)


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
                budget: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(p, energy, short, q) per matrix from descending, non-negative eigenvalues (host
    arrays (nb, s)), those at or below the product's floor already zero
    (:func:`noise_floor`): the energy rule at ``tau``, or the fixed ``rank``.

    The total is the sum of ``lam``, the Gram's trace ||B A||_F^2. q (nb,) is the
    numerical rank: the fewest leading directions whose remainder sum_{i>q} lam_i is at
    most ``budget`` (nb,), the Gram's rounding (:func:`gram_budget`). Under the rule,
    p = min(p_tau, q) with p_tau Eq. 11; ``short`` (nb,) bool marks the matrices where
    q < p_tau cut the rank, so the kept energy is below ``tau`` by at most ``budget`` /
    total. Where the whole Gram lies within the budget (every eigenvalue zero, or clients
    that cancel exactly under a factored Gram) the aggregate is zero to the dtype's
    accuracy: q = 0, p = 0 under the rule, and its energy is 1 (nothing is lost)."""
    nb = lam.shape[0]
    cums = lam.cumsum(-1)
    total = cums[:, -1]
    # q: the directions j whose remainder from j on exceeds the budget, i.e. whose energy before j
    # is below total - budget; the last cumulative sum is the total itself, so that count is
    # the count of cumulative sums below it, plus the first direction where it is positive.
    thr = total - budget
    q = (cums < thr[:, None]).sum(-1) + (thr > 0)
    zero = q == 0  # the whole Gram lies within its rounding: the aggregate is zero to the dtype's accuracy
    if tau is not None:
        p_tau = (cums < (tau * total)[:, None]).sum(-1) + (total > 0)
        p = np.minimum(p_tau, q)
        short = (q < p_tau) & (q > 0)
    else:
        p = np.full(nb, rank, dtype=np.int64)
        short = np.zeros(nb, dtype=bool)
    kept = np.where(p > 0, cums[np.arange(nb), p - 1], 0.0)
    energy = kept / np.maximum(total, _TINY64)
    if zero.any():
        energy[zero] = 1.0
    return p, energy, short, q


class DeviceRule(NamedTuple):
    """:func:`energy_rule_device`'s result, per matrix, on the eigenvalues' device.

    Attributes:
        counts: (nb, 3) int64: q, p and p_tau (Eq. 11 alone; p under a fixed rank), so that
            ``short`` of :func:`energy_rule` is 0 < p < p_tau.
        keep: (nb, s) bool, j < p (the columns the map back keeps).
        energy: (nb,) the kept fraction of the total (1 where the Gram is all rounding).
        lam: (nb, s) the spectrum reported: zero at or below the floor and past q.
        total: (nb,) the total T, the sum of the eigenvalues above the floor.
        floor: (nb,) the product's rounding per eigenvalue, (k eps N)^2.
    """

    counts: torch.Tensor
    keep: torch.Tensor
    energy: torch.Tensor
    lam: torch.Tensor
    total: torch.Tensor
    floor: torch.Tensor


def energy_rule_device(lam: torch.Tensor, n_sum: torch.Tensor, tau: float | None, rank: int | None, *,
                       d: int, r: int, eps: float, factored: bool) -> DeviceRule:
    r""":func:`energy_rule` with :func:`noise_floor` and :func:`gram_budget` (``n_sum`` given
    when ``factored``), on the device and at static shapes: nothing is read on the host.

    ``lam`` (nb, s): the Gram's eigenvalues as computed, descending; ``n_sum`` (nb,): N, finite
    (a caller reads its verdicts with the result and discards matrices whose N is not).
    The same rule, step by step: eigenvalues at or below :math:`(k\varepsilon N)^2` are
    zero; the budget is :math:`s\varepsilon\,\mathrm{tr}\,G` (the whole trace where a
    factored Gram's trace is at most :math:`\varepsilon N^2`); with c(t) the count of
    cumulative sums below t and thr the total less the budget,
    :math:`q = c(\mathrm{thr}) + [\mathrm{thr} > 0]`,
    :math:`p_\tau = c(\tau T) + [\mathrm{thr} > 0]` and :math:`p = \min(p_\tau, q) =
    c(\min(\tau T, \mathrm{thr})) + [\mathrm{thr} > 0]` (c is monotone, and where
    thr <= 0 every count is 0 because the sums are non-negative). Where thr > 0 the kept
    energy is the cumulative sum at p - 1 = c(min(tau T, thr)), else 1. :func:`energy_rule`
    adds [T > 0] to p_tau instead, which differs only where thr <= 0 < T, where q = p = 0
    and neither is short. The three counts are one ``searchsorted``."""
    s = lam.shape[-1]
    k = floor_constant(d, r)
    floor = torch.square(n_sum * (k * eps))
    lam = lam * (lam > floor.unsqueeze(-1))
    cums = lam.cumsum(-1)
    total = cums[:, -1]
    thr = total - (max(s, 1) * eps) * total
    if factored:  # eps N^2 = floor / (k^2 eps)
        thr = thr * (total > floor * (1.0 / (k * k * eps)))
    pos = thr > 0
    if tau is None:
        lims = thr.unsqueeze(-1)
    else:
        tt = tau * total
        lims = torch.stack([thr, torch.minimum(tt, thr), tt], -1)
    below = torch.searchsorted(cums, lims)  # c(t): the cumulative sums are non-decreasing
    counts = below + pos.unsqueeze(-1)
    if tau is None:
        counts = torch.cat([counts, torch.full_like(counts, rank), torch.full_like(counts, rank)], -1)
        kept = cums[:, rank - 1]
    else:
        kept = cums.gather(-1, below[:, 1:2]).squeeze(-1)
    masks = _arange(s, lam.device) < counts[:, :2].unsqueeze(-1)  # j < q, j < p
    energy = torch.where(pos, kept / total, _one(lam.dtype, lam.device))
    return DeviceRule(counts=counts, keep=masks[:, 1], energy=energy, lam=lam * masks[:, 0], total=total,
                      floor=floor)


@functools.lru_cache(maxsize=64)
def _arange(s: int, device: torch.device) -> torch.Tensor:
    """0 .. s - 1 (int64) on ``device``, made once."""
    return torch.arange(s, device=device)


@functools.lru_cache(maxsize=64)
def _one(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """1 of ``dtype`` on ``device``, made once (a where's other branch, no scalar made per call)."""
    return torch.ones((), dtype=dtype, device=device)
