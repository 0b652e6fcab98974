r"""The verdicts on a pass of :func:`fraq.recompress` and the fallback each failed one takes.

A pass runs the pipeline's steps 3 and 4 (coordinates and Gram, eigenproblem) and reads
the device once (:func:`read`): the eigenvalues and a few numbers per matrix come back
together, and every verdict is decided on the host from them: in range
(:func:`fraq._range.verdict`), cancelling clients under a factored Gram
(:func:`fraq._gram.cancels`), a deferred basis's rejections, an identity basis that
cannot resolve the directions it would keep (:func:`_ungraded`). A verdict that fails
takes the first applicable entry of :data:`FALLBACKS` and the pass is run again
(:func:`settle`); the common case (finite, in range, no cancelling clients) runs the
math once. The pipeline itself (:mod:`fraq._recompress`) sees only the settled pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from fraq import _gram, _range
from fraq._energy import energy_rule, gram_budget, noise_floor, rounding_eps
from fraq._plan import Plan
from fraq.backends import REGISTRY
from fraq.backends.base import Basis

__all__ = ["FALLBACKS", "GRADED", "Fallback", "Pass", "Reading", "read", "settle"]


@dataclass(frozen=True)
class Pass:
    """What one pass of the pipeline runs with; a fallback returns a changed copy.

    ``X``/``Y`` are the oriented factors (scaled by 2^-e per matrix once rescaled),
    ``factored`` the Gram form, ``e`` (nb,) int64 the scale exponents or None,
    ``rescaled`` the number of matrices that took the rescaled path.
    """

    basis: Basis
    X: torch.Tensor
    Y: torch.Tensor
    factored: bool
    e: torch.Tensor | None = None
    rescaled: int = 0


@dataclass(frozen=True)
class Reading:
    """The pass's one host read, per matrix (numpy): ``lam`` (nb, s) the Gram's eigenvalues,
    descending, zero at or below the product's noise floor (and where negative); ``n_sum``
    N = sum_k ||c_k|| ||y_k|| (:func:`fraq._gram.scale_sum`); ``ok`` in range; ``cancels`` (factored Gram under the guard, else None); ``rejected`` (a deferred
    basis, else None); ``lam1`` the Gram's largest eigenvalue (NaN where the solver refused
    it); ``e`` the scale exponents (None before rescaling); ``unresolved`` (factored Gram,
    else None): a row of Y whose squared norm left float's normal range while its term
    could reach the Gram's noise floor (:func:`_unresolved`); ``unjudged`` the matrices whose
    factored Gram, chosen by the caller, cancels or lost a term (kept, and reported)."""

    lam: np.ndarray
    n_sum: np.ndarray
    ok: np.ndarray
    cancels: np.ndarray | None
    rejected: np.ndarray | None
    lam1: np.ndarray
    e: np.ndarray | None
    unresolved: np.ndarray | None = None
    unjudged: int = 0


@dataclass(frozen=True)
class Fallback:
    """A way out of a failed verdict: ``needed(reading, pass, plan)``, then ``apply(pass, reading, plan, whole)``."""

    name: str
    needed: Callable[[Reading, Pass, Plan], bool]
    apply: Callable[[Pass, Reading, Plan, tuple], Pass]


def _rescale(at: Pass, rd: Reading, plan: Plan, whole: tuple) -> Pass:
    """The matrices out of range redone from exactly scaled factors (:func:`fraq._range.rescaled`)."""
    bad = torch.from_numpy(~rd.ok).to(at.X.device)
    X, Y, e = _range.rescaled(whole, at.X, at.Y, bad)  # columns balanced against rows, then one scale a factor
    return replace(at, basis=plan.basis_fn(X), X=X, Y=Y, e=e, rescaled=int((~rd.ok).sum()))


GRADED = 64.0
"""The identity basis is refused when a kept eigenvalue lies below GRADED * eps * lambda_1
(sigma_p / sigma_1 below 8 sqrt(eps)): see :func:`_ungraded`."""


def _ungraded(rd: Reading, at: Pass, plan: Plan) -> bool:
    """Whether an identity-basis pass keeps a direction its Gram cannot resolve to first order.

    With Q = I_d the Gram is that of the aggregate itself, rounded normwise: each
    eigenvalue is only eps * lambda_1 accurate, so a kept direction with
    sigma_p / sigma_1 near sqrt(eps) comes back with its subspace and singular value
    wrong at first order (measured: sin of the largest principal angle 0.99 and sigma_p
    70% off at kappa 1e6, p = 48 of 64, float32). A Householder basis makes C upper
    triangular, the Gram graded like the spectrum and its small eigenvalues accurate in
    relative terms (sin 4e-4 on the same input, as the textbook QR-QR-SVD), at the cost
    of one QR of X (2 d^2 r): the pass is redone with it where the rank the rule keeps
    (or the fixed rank) reaches below :data:`GRADED` * eps * lambda_1."""
    if at.basis.info.get("basis") != "identity" or plan.identity is False:
        return False
    eps = rounding_eps(plan.cdt)
    lam = rd.lam
    if plan.tau is not None:
        p, _, _, _ = energy_rule(lam, plan.tau, None, gram_budget(lam.sum(-1), lam.shape[-1], eps))
    else:
        p = np.full(lam.shape[0], plan.rank)
    p = np.clip(p, 1, lam.shape[-1])
    kept = lam[np.arange(lam.shape[0]), p - 1]
    return bool(((lam[:, 0] > 0) & (kept < GRADED * eps * lam[:, 0])).any())


def _graded(at: Pass, rd: Reading, plan: Plan, whole: tuple) -> Pass:
    """The pass redone on the backend's own basis of X (Householder by default; X equilibrated
    first for a backend that is not column-scale invariant)."""
    X, Y = at.X, at.Y
    if not REGISTRY[plan.backend].scale_invariant:
        X, Y = _range.equilibrate(X, Y)
    return replace(at, basis=REGISTRY[plan.backend].fn(X), X=X, Y=Y)


def _unresolved(w_diag: np.ndarray, c_norm: np.ndarray, lam1: np.ndarray, plan: Plan) -> np.ndarray:
    """Per matrix, bool: the factored Gram G = C W_Y C^T lost a client's term. Row k of Y
    enters W_Y = Y Y^T squared, in the compute dtype: where ||y_k||^2 falls below that
    dtype's normal range (``w_diag[k]`` under tiny / eps^2, :func:`fraq._range.limits`) it
    keeps no digits, yet its term c_k y_k can be as large as any other (a client's factors
    scaled against each other, (B 2^k, A 2^-k), move its size from y_k into c_k). The term
    is bounded by ||c_k||^2 ||y_k||^2 <= ||c_k||^2 w_lo: where that bound reaches
    eps * lambda_1 the term may matter and the product form, which never squares y_k
    alone, is taken instead (a zero row with a large c_k only costs that form's time).
    ``c_norm``: ||c_k|| per column, squared here in float64 (no underflow)."""
    w_lo = _range.limits(plan.cdt, plan.edt)[4]
    if w_diag.min(initial=math.inf) >= w_lo:  # no row below the range (a NaN takes the full test)
        return np.zeros(w_diag.shape[0], dtype=bool)
    eps = rounding_eps(plan.cdt, plan.edt)
    with np.errstate(over="ignore", invalid="ignore"):
        lost = (w_diag < w_lo) & ~(np.square(c_norm) * w_lo < eps * np.abs(np.nan_to_num(lam1, nan=0.0))[:, None])
    return lost.any(-1)


FALLBACKS = (
    Fallback("deferred basis completed", lambda rd, at, plan: rd.rejected is not None and bool(rd.rejected.any()),
              lambda at, rd, plan, whole: replace(at, basis=at.basis.complete())),
    Fallback("rescaled", lambda rd, at, plan: at.e is None and not rd.ok.all(), _rescale),
    Fallback("product Gram", lambda rd, at, plan: (rd.cancels is not None and bool(rd.cancels.any()))
             or (rd.unresolved is not None and bool(rd.unresolved.any())),
              lambda at, rd, plan, whole: replace(at, factored=False)),
    Fallback("graded basis", _ungraded, _graded),
)
"""The fallbacks, in the order they are tried after a pass: a deferred basis that rejected
some matrix is completed; matrices out of range are rescaled (once); a factored Gram
whose clients cancel, or that lost a client's term (:func:`_unresolved`), is formed
through H; an identity basis that would keep directions
its Gram cannot resolve is replaced by the backend's (:func:`_ungraded`). Each entry
applies at most once per call."""


def settle(plan: Plan, whole: tuple, at: Pass, s: int, steps: Callable[[Pass], tuple]):
    """Passes of ``steps`` (the pipeline's steps 3 and 4: pass -> (coordinates, (lam, U) or
    None)) until no fallback applies: (pass, coordinates, (lam, U), reading). ``whole`` are
    the caller's factors, what the rescaled path scales from."""
    while True:
        coords, eig = steps(at)
        if eig is None and at.e is not None:
            raise RuntimeError(f"backend {plan.backend!r}: the eigensolver failed on finite, unit-scaled factors")
        rd = read(plan, at, coords, eig, s)
        if at.e is not None and not np.isfinite(rd.lam1).all():
            raise RuntimeError(f"backend {plan.backend!r} returned non-finite coordinates for finite, "
                               "unit-scaled factors")
        fallback = next((f for f in FALLBACKS if f.needed(rd, at, plan)), None)
        if fallback is None:
            return at, coords, eig, rd
        at = fallback.apply(at, rd, plan, whole)


def read(plan: Plan, at: Pass, coords: _gram.Coordinates, eig, s: int) -> Reading:
    """The pass's verdicts, decided on the host from its one read (:func:`_to_host`): the
    eigenvalues, max|C| (:func:`fraq._range.stats`), N = sum_k ||c_k|| ||y_k|| (the
    factors' scale, invariant to rescaling C's columns against Y's rows: the product's
    noise floor and the Gram guard), a deferred basis's rejections, the scale exponents
    and, under a factored Gram, the diagonal of W_Y and C's column norms ||c_k||."""
    C = at.basis.C
    c_norm = torch.linalg.vector_norm(C, dim=-2)
    columns = [_range.stats(C), _gram.scale_sum(C, at.Y, c_norm)]
    guard = at.factored  # judged under an explicit gram="factored" too: reported there, not acted on
    if eig is not None:
        columns.append(eig[0])
    if at.basis.rejected is not None:
        columns.append(at.basis.rejected)
    if at.e is not None:
        columns.append(at.e)
    if coords.WY is not None:
        columns += [coords.WY.diagonal(dim1=-2, dim2=-1), c_norm]
    host = _to_host(columns)
    with np.errstate(over="ignore", invalid="ignore"):  # a sum of a matrix out of range may overflow: it fails
        return _verdicts(plan, at, host, eig is not None, s, guard)


def _verdicts(plan: Plan, at: Pass, host: list[np.ndarray], solved: bool, s: int, guard: bool) -> Reading:
    """:func:`read`'s verdicts from its host numbers, in :func:`read`'s order (``solved``:
    the eigensolver gave ``lam``)."""
    c_max, n_sum, *rest = host
    lam = rest.pop(0) if solved else np.full((c_max.shape[0], s), np.nan)
    rejected = rest.pop(0) > 0 if at.basis.rejected is not None else None
    e = rest.pop(0).astype(np.int64) if at.e is not None else None
    w_diag, c_norm = rest if rest else (None, None)
    w_max = None if w_diag is None else w_diag.max(-1).tolist()
    g_trace = lam.sum(-1).tolist() if guard else None
    ok = _range.verdict(c_max.tolist(), lam[:, -1].tolist(), w_max, plan.cdt, plan.edt)
    cancels = ok & _gram.cancels(n_sum.tolist(), g_trace, s) if guard else None
    unresolved = None if w_diag is None else _unresolved(w_diag, c_norm, lam[:, 0], plan)
    unjudged = 0
    if cancels is not None and not plan.guard:  # the caller chose the factored form: it stays, the result says so
        unjudged = int((cancels | (False if unresolved is None else unresolved)).sum())
        cancels = unresolved = None
    lam = lam[:, ::-1]
    d, r = at.X.shape[-2], at.X.shape[-1]
    floor = noise_floor(n_sum, d, r, rounding_eps(plan.cdt, plan.edt))[:, None]
    return Reading(lam=np.where(lam > floor, lam, 0.0), n_sum=n_sum, ok=ok, cancels=cancels, rejected=rejected,
                   lam1=lam[:, 0], e=e, unresolved=unresolved, unjudged=unjudged)


def _to_host(columns: list[torch.Tensor]) -> list[np.ndarray]:
    """The one host synchronization: per-matrix values ((nb,) or (nb, k), any real or bool
    dtype) read as one float64 array and handed back in order, each in its own shape (on
    the CPU too, where a read costs nothing: the host-read counters count the CUDA path on it)."""
    blocks = [t.unsqueeze(-1) if t.dim() == 1 else t for t in columns]
    host = torch.cat(blocks, -1) if len(blocks) > 1 else blocks[0]
    host = (host if host.device.type == "cpu" else host.cpu()).numpy().astype(np.float64, copy=False)
    out, k = [], 0
    for t, b in zip(columns, blocks):  # slices: np.split costs ~20 us a call here
        out.append(host[:, k] if t.dim() == 1 else host[:, k:k + b.shape[-1]])
        k += b.shape[-1]
    return out
