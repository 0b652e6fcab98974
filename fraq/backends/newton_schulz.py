r"""Newton-Schulz bases: GEMM-only iterative orthogonalization, with Appendix D's coordinates.

The iterate starts at the Frobenius-normalized factor and applies an odd polynomial to
its singular values at each step, using only products with the r x r Gram matrix:

.. math::
    \tilde Q_0 = X / (c\,\lVert X\rVert_F),\qquad
    W_k = \tilde Q_k^\top \tilde Q_k,\qquad
    \tilde Q_{k+1} = \tilde Q_k\,(a_k I + b_k W_k + c_k W_k^2),

so each singular value follows :math:`\sigma \mapsto a_k\sigma + b_k\sigma^3 + c_k\sigma^5`
while the singular vectors stay put: col(:math:`\tilde Q_k`) = col(X) at every step.

**Schedules** (:data:`SCHEDULES`); why the constants are what they are:

* ``cubic``: :math:`(a, b, c) = (3/2, -1/2, 0)`, the classical Newton-Schulz step.
  :math:`p(\sigma) = \tfrac32\sigma - \tfrac12\sigma^3` has p(1) = 1 and p'(1) = 0, so 1
  is a superattracting fixed point for every :math:`\sigma \in (0, \sqrt3)`, which the
  normalization guarantees (:math:`\sigma \le 1`). Small values only grow by p'(0) = 3/2
  per step: about 10, 15 and 21 steps for :math:`\sigma_{\min}/\lVert X\rVert_F` of
  0.1, 0.01 and 0.001.
* ``polar-express``: the per-step minimax-optimal odd quintics of Amsel et al.
  (arXiv:2505.16932, lower bound 1e-3): steep first steps (p'(0) = 8.2, then 4.1, 3.9,
  ...) move small singular values fast, later ones converge; from the eighth step on
  the polynomial is the quintic Pade step (15/8, -10/8, 3/8), again with p(1) = 1 and
  p'(1) = p''(1) = 0. As in the authors' code, all but that last polynomial are
  divided by a safety factor 1.01 (a / 1.01, b / 1.01^3, c / 1.01^5) and the input is
  normalized by 1.01 ||X||_F, so rounding cannot push a singular value past the
  interval the polynomials were designed for.
* ``muon``: the fixed quintic (3.4445, -4.7750, 2.0315) of the Muon optimizer, kept
  **only as a documented reference**: it was tuned to inflate small singular values
  fast in bf16, not to converge. p(1) = 0.7010, so 1 is not a fixed point: the singular
  values end up oscillating in about [0.68, 1.13] and the iterate never becomes
  orthonormal. It is not an exact backend (tests show it).

**Stopping.** Either a fixed ``steps`` count, or a tolerance: iterate until
:math:`\lVert W_k - W_k^2\rVert_F \le` ``tol`` (at most ``max_steps``). Near an
orthonormal iterate :math:`W - W^2 = -W(W - I) \approx -(W - I)`, so this is the
tolerance on :math:`\lVert \tilde Q^\top\tilde Q - I\rVert_F`; unlike it, it also
vanishes on a partial isometry, which is where every polynomial iteration goes on a
**rank-deficient X** (duplicate clients): zero singular values stay at zero. The default
``tol`` is :math:`4 r \varepsilon`, a few times the rounding floor of a float32 or
float64 Gram of an exactly orthonormal d x r matrix (about :math:`0.2 r\varepsilon`),
so the iteration stops one step after the floor is reached.

**Coordinates** (``coords``, Appendix D), with :math:`T = \tilde Q^\top X`:

* ``direct``: C = T, ``apply(U)`` = :math:`\tilde Q U`. Exact only as far as the
  iterate is orthonormal: :math:`\tilde Q C = \tilde Q\tilde Q^\top X \ne X` otherwise.
* ``lstsq``: :math:`C = (\tilde Q^\top\tilde Q)^{-1} T`, so :math:`\tilde Q C` is the
  projection of X onto col(:math:`\tilde Q`) = col(X), i.e. X. The reconstruction is
  exact, but :math:`\tilde Q` still changes the metric, so the Gram eigenproblem is not
  the aggregate's one unless the iterate is orthonormal.
* ``cholesky``: :math:`\tilde Q^\top\tilde Q = LL^\top`, :math:`Q = \tilde Q L^{-\top}`,
  :math:`C = L^{-1} T`: Q has orthonormal columns and X = Q C, so FRAQ is exact. This is
  one Cholesky-QR step on the iterate; it is accurate when :math:`\tilde Q` is well
  conditioned, which the iteration provides.

The lstsq and cholesky modes need :math:`W^{-1}`. Where its Cholesky factorization fails
or has a pivot below :math:`\sqrt\varepsilon` times the largest (a partial isometry from a
rank-deficient X, or an iterate stopped far from convergence), that matrix uses the
pseudo-inverse square root on the nonzero spectrum instead: :math:`W = V\Lambda V^\top`,
eigenvalues at or below :math:`\sqrt\varepsilon\,\lambda_{\max}` are dropped,
:math:`Z = V_+\Lambda_+^{-1/2}`, :math:`Q = \tilde Q Z`, :math:`C = Z^\top T`. Nothing is
ever divided by zero; ``info["fallback"] = "pinv"`` and ``info["fallback_count"]``
record it. The dropped directions of a converged iterate are exact zeros of X up to
rounding, so the span still contains col(X).

**Accuracy** in float32. The span of the iterate drifts from col(X) by the rounding of
each product :math:`\tilde Q_k P_k`, relative to the smallest singular values at that
step and scaled by :math:`\lVert P_k\rVert`; no later step can undo it (right
multiplication keeps the span). The cubic step has :math:`\lVert P\rVert \le 3/2`;
Polar Express's first steps have up to 8.2, so it trades steps for accuracy: its error
above the optimum is a small multiple of the cubic's, itself a small multiple of
Householder's (``python -m benchmarks.experiments.backends`` measures the three).

**Cost**, leading order per matrix: 4 d r^2 per step (the Gram and the update), plus
2 d r^2 for T (and O(r^3) for the r x r work); applying Q is 2 d r p. Against
Householder's 2 d r^2 this pays off only where a GEMM is far faster than a panel QR,
i.e. possibly on a GPU, not on a CPU; ``benchmarks.experiments.backends`` measures it.

Wide X (r >= d) gets the exact basis Q = I_d, C = X (no iteration needed).

References: Higham, *Functions of Matrices* (SIAM 2008), Sec. 8.3 (Newton-Schulz);
Amsel, Persson, Musco, Gower, "The Polar Express", arXiv:2505.16932; Jordan et al.,
"Muon: an optimizer for hidden layers" (2024), ``zeropower_via_newtonschulz5``;
the FRAQ paper, Appendix D.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from fraq._layout import tall_product
from fraq._routine_flops import cholesky_flops, gemm_flops, gram_flops, trsm_flops
from fraq.backends.base import Basis
from fraq.backends.householder import householder
from fraq.backends.safeguards import check_basis_input, over_batch, rescale, scaled_gram

__all__ = ["Schedule", "SCHEDULES", "COORDS", "newton_schulz", "default_tol", "newton_schulz_flops"]


@dataclass(frozen=True)
class Schedule:
    """Odd-polynomial coefficients per step; the last triple repeats for later steps.

    Attributes:
        name: the schedule's name in :data:`SCHEDULES`.
        coefficients: (a, b, c) per step, p(s) = a s + b s^3 + c s^5.
        norm_factor: the input is divided by ``norm_factor * ||X||_F``.
        converges: whether 1 is an attracting fixed point (False for Muon's quintic).
    """

    name: str
    coefficients: tuple[tuple[float, float, float], ...]
    norm_factor: float
    converges: bool

    def step(self, k: int) -> tuple[float, float, float]:
        return self.coefficients[min(k, len(self.coefficients) - 1)]


_PE_SAFETY = 1.01
_PE_RAW = (
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
)

SCHEDULES: dict[str, Schedule] = {
    "cubic": Schedule("cubic", ((1.5, -0.5, 0.0),), 1.0, True),
    "polar-express": Schedule(
        "polar-express",
        tuple((a / _PE_SAFETY, b / _PE_SAFETY**3, c / _PE_SAFETY**5) for a, b, c in _PE_RAW)
        + ((1.875, -1.25, 0.375),),
        _PE_SAFETY,
        True,
    ),
    "muon": Schedule("muon", ((3.4445, -4.7750, 2.0315),), 1.0, False),
}
"""The coefficient schedules, by name (see the module docstring)."""

COORDS = ("direct", "lstsq", "cholesky")
"""The coordinate modes of Appendix D."""

DEFAULT_MAX_STEPS = 100


def default_tol(r: int, dtype: torch.dtype) -> float:
    """Default stopping tolerance on ||W - W^2||_F: 4 r eps of the dtype."""
    return 4.0 * max(r, 1) * torch.finfo(dtype).eps


def newton_schulz(
    X: torch.Tensor,
    *,
    schedule: str = "polar-express",
    steps: int | None = None,
    tol: float | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    coords: str = "cholesky",
) -> Basis:
    """Newton-Schulz basis of X (*, d, r); see the module docstring.

    Args:
        X: (*, d, r) oriented left factor.
        schedule: a key of :data:`SCHEDULES`: ``polar-express`` (default), ``cubic`` or
            ``muon`` (reference only, does not converge).
        steps: run exactly this many steps (>= 0). Exclusive with ``tol``.
        tol: stop once ||W - W^2||_F <= tol for every matrix in the batch (default
            :func:`default_tol`, used when neither ``steps`` nor ``tol`` is given).
        max_steps: cap on the steps in tolerance mode (>= 1).
        coords: ``direct``, ``lstsq`` or ``cholesky`` (default, exact).

    Returns:
        :class:`~fraq.backends.base.Basis`; ``info`` holds ``schedule``, ``coords``,
        ``steps`` run, ``residual`` (the largest final ||W - W^2||_F), ``converged``,
        ``fallback`` (``"pinv"`` or None) and ``fallback_count``.

    Choosing parameters: keep the default (Polar Express, tolerance, Cholesky
    coordinates) for an exact result; fixed ``steps`` with ``direct`` coordinates is the
    optimizer-style use, cheap and inexact.
    """
    X = check_basis_input(X)
    if not isinstance(schedule, str) or schedule not in SCHEDULES:
        raise ValueError(f"schedule(={schedule!r}) is not one of {sorted(SCHEDULES)}")
    if not isinstance(coords, str) or coords not in COORDS:
        raise ValueError(f"coords(={coords!r}) is not one of {list(COORDS)}")
    if steps is not None and tol is not None:
        raise ValueError(f"pass at most one of steps and tol, got steps={steps!r}, tol={tol!r}")
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral):
            raise TypeError(f"steps(={steps!r}) must be an int")
        if steps < 0:
            raise ValueError(f"steps(={steps}) must be >= 0")
    if tol is not None:
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real):
            raise TypeError(f"tol(={tol!r}) must be a real number")
        if not (math.isfinite(tol) and tol > 0):
            raise ValueError(f"tol(={tol}) must be a positive finite number")
    if isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral):
        raise TypeError(f"max_steps(={max_steps!r}) must be an int")
    if max_steps < 1:
        raise ValueError(f"max_steps(={max_steps}) must be >= 1")
    if steps is None and tol is None:
        tol = default_tol(X.shape[-1], X.dtype)
    return _newton_schulz_impl(X, SCHEDULES[schedule], None if steps is None else int(steps),
                               None if tol is None else float(tol), int(max_steps), coords)


SETTLED = dict(steps=0, residual=0.0, converged=True)
"""What a basis that ran no step records: a wide X's identity basis and an empty X's."""


def _describe(sched: Schedule, steps, tol, max_steps, coords) -> dict:
    """What every basis of a call records beside its backend: the schedule and the coordinates."""
    return {"schedule": sched.name, "coords": coords}


@over_batch("newton-schulz", describe=_describe, settled=SETTLED)
def _newton_schulz_impl(Xb: torch.Tensor, info: dict, sched: Schedule, steps, tol, max_steps, coords) -> Basis:
    """The iteration on a flattened batch Xb (nb, d, r), r < d (the wrapper gives a wide X
    the identity basis and the caller's batch shape)."""
    r = Xb.shape[-1]
    if r == 0 or Xb.shape[0] == 0:  # nothing to iterate on: Householder handles empty shapes
        hh = householder(Xb)
        return Basis(C=hh.C, apply=hh.apply, info=dict(info, **SETTLED, fallback=None, fallback_count=0))

    Xs, W, e = scaled_gram(Xb)  # X = 2^e Xs
    nrm2 = torch.diagonal(W, dim1=-2, dim2=-1).sum(-1)  # ||Xs||_F^2
    inv = torch.where(nrm2 > 0, torch.rsqrt(nrm2) / sched.norm_factor, torch.zeros_like(nrm2))
    Q = Xs * inv.view(-1, 1, 1)
    W = W * inv.square().view(-1, 1, 1)  # Gram of Q, without a second pass over it
    eye = torch.eye(r, dtype=W.dtype, device=W.device)

    k = 0
    while True:
        W2 = torch.matmul(W, W)
        residual = torch.linalg.matrix_norm(W - W2)
        worst = float(residual.max().item())
        if steps is not None:
            if k >= steps:
                break
        elif worst <= tol or k >= max_steps or not math.isfinite(worst):
            break
        a, b, c = sched.step(k)
        P = a * eye + b * W + c * W2
        Q = torch.matmul(Q, P)
        W = torch.matmul(Q.mT, Q)
        k += 1
    converged = worst <= (tol if tol is not None else default_tol(r, Xb.dtype))
    info.update(steps=k, residual=worst, converged=converged)

    T = torch.matmul(Q.mT, Xs)  # direct coordinates, X = 2^e Q T when Q is orthonormal
    if coords == "direct":
        return Basis(C=rescale(T, e), apply=lambda U: tall_product(Q, U),
                     info=dict(info, fallback=None, fallback_count=0))

    Z, nbad = _inverse_sqrt_metric(W)  # Z Z^T = W^+, Q Z orthonormal on the nonzero spectrum
    info.update(fallback="pinv" if nbad else None, fallback_count=nbad)
    if coords == "lstsq":
        C = torch.matmul(Z, torch.matmul(Z.mT, T))  # W^+ T
        return Basis(C=rescale(C, e), apply=lambda U: tall_product(Q, U), info=info)
    C = torch.matmul(Z.mT, T)  # L^{-1} T
    return Basis(C=rescale(C, e), apply=lambda U: tall_product(Q, torch.matmul(Z, U)), info=info)


def _inverse_sqrt_metric(W: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Z (nb, r, r) with Z^T W Z = I on W's numerically nonzero spectrum, and the pinv count.

    Z = L^{-T} from the Cholesky factor where it is trustworthy (factorization succeeded,
    smallest pivot^2 >= sqrt(eps) * largest pivot^2); elsewhere Z = V_+ Lambda_+^{-1/2}
    from the eigendecomposition, eigenvalues <= sqrt(eps) * lambda_max dropped.
    """
    rel = torch.finfo(W.dtype).eps ** 0.5
    L, info = torch.linalg.cholesky_ex(W)
    piv = torch.diagonal(L, dim1=-2, dim2=-1).square()
    bad = (info != 0) | ~(piv.amin(-1) >= rel * piv.amax(-1))
    eye = torch.eye(W.shape[-1], dtype=W.dtype, device=W.device).expand_as(W)
    Z = torch.linalg.solve_triangular(L.mT, eye, upper=True)  # L^{-T}
    nbad = int(bad.sum().item())
    if nbad:
        finite = torch.isfinite(W).flatten(1).all(-1)
        Z = torch.where((bad & ~finite).view(-1, 1, 1), torch.full_like(Z, float("nan")), Z)  # NaN in, NaN out
        idx = (bad & finite).nonzero().squeeze(-1)
        if idx.numel():
            lam, V = torch.linalg.eigh(W.index_select(0, idx))
            keep = lam > rel * lam.amax(-1, keepdim=True)
            inv_sqrt = torch.where(keep, lam.clamp(min=torch.finfo(W.dtype).tiny).rsqrt(), torch.zeros_like(lam))
            Z = Z.index_copy(0, idx, V * inv_sqrt.unsqueeze(-2))
    return Z, nbad


def newton_schulz_flops(coords: str, default_steps: int | None = None):
    """The cost function of a Newton-Schulz backend with ``coords`` (see fraq.backends.newton_schulz).

    ``default_steps``: the step count when the caller passes none (a fixed schedule);
    None makes ``steps`` required, since a tolerance decides it from the data.
    """

    def cost(d: int, r: int, p: int, *, steps: int | None = None, gram: str = "gemm") -> float:
        if r >= d:
            return 0.0
        steps = default_steps if steps is None else steps
        if steps is None:
            raise ValueError("steps is required for a Newton-Schulz backend: its step count depends on the "
                             "data (use result.info['steps'])")
        g = gram_flops(d, r, gram)
        # first Gram; per step: Q P and the new Gram; per check: W^2 (the residual, and the quintic's term)
        f = g + steps * (gemm_flops(d, r, r) + g) + (steps + 1) * gemm_flops(r, r, r)
        f += gemm_flops(r, d, r)  # T = Q^T X
        if coords == "direct":
            return f + gemm_flops(d, r, p)
        f += cholesky_flops(r) + trsm_flops(r, r)  # Z = L^{-T}
        if coords == "lstsq":
            return f + 2 * gemm_flops(r, r, r) + gemm_flops(d, r, p)
        return f + gemm_flops(r, r, r) + gemm_flops(r, r, p) + gemm_flops(d, r, p)

    cost.__name__ = cost.__qualname__ = f"newton_schulz_{coords}_flops"
    return cost
