"""What makes a Gram-based basis safe: range-checked Gram matrices and the Householder fallback.

The GEMM-first backends (:mod:`~fraq.backends.cholesky_qr`, :mod:`~fraq.backends.newton_schulz`)
start from the Gram matrix :math:`W = X^\\top X`. Squaring the factor squares its
magnitude and its condition number, so two things can go wrong, and both are detected
from the data, never assumed away:

* **Range.** Entries of 1e20 overflow a float32 Gram and entries of 1e-20 underflow it.
  :func:`scaled_gram` forms W first (no extra pass over X) and only when its diagonal is
  out of range rescales X by an exact power of two and forms W again, the way
  :func:`fraq.recompress` treats its own Gram.
* **Conditioning.** A Cholesky factorization of W fails, or succeeds but says nothing
  reliable, when :math:`\\kappa(X)^2 \\varepsilon \\gtrsim 1`. The backend decides per
  matrix, and :func:`with_householder_fallback` recomputes only the rejected matrices with
  Householder QR (exact whatever the rank) and stitches the two bases together.

Every basis here holds a flattened batch (nb, d, r); :func:`flatten` and :func:`unflatten`
move between that and the caller's (*, d, r), and :func:`over_batch` applies a backend
written for one flattened batch to the caller's shape, from outside (as scipy's
``_apply_over_batch``), with the exact basis of a wide X taken there once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from fraq._range import exponent, scale_pow2
from fraq._validation import check_factor
from fraq.backends.base import Basis, identity_basis
from fraq.backends.householder import householder

__all__ = [
    "check_basis_input",
    "flatten",
    "unflatten",
    "over_batch",
    "scaled_gram",
    "rescale",
    "with_householder_fallback",
]


def check_basis_input(X: object) -> torch.Tensor:
    """A backend's argument: a real floating tensor (*, d, r)."""
    return check_factor("X", X)


def flatten(X: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """(*, d, r) -> (nb, d, r) and the batch shape to restore."""
    batch = tuple(X.shape[:-2])
    nb = 1
    for k in batch:
        nb *= k
    return X.reshape(nb, X.shape[-2], X.shape[-1]), batch


def unflatten(basis: Basis, batch: tuple[int, ...]) -> Basis:
    """Give a flattened basis the caller's batch shape back (C, ``apply`` and the basis
    ``complete`` returns; a pending verdict stays flat, (nb,))."""
    C = basis.C.reshape(*batch, *basis.C.shape[-2:])
    inner = basis.apply

    def apply(U: torch.Tensor) -> torch.Tensor:
        out = inner(U.reshape(C.shape[:-2].numel(), *U.shape[-2:]))
        return out.reshape(*U.shape[:-2], *out.shape[-2:])

    done = basis.complete
    complete = None if done is None else (lambda: unflatten(done(), batch))
    return Basis(C=C, apply=apply, info=basis.info, rejected=basis.rejected, complete=complete)


def over_batch(name: str, *, identity_when_wide: bool = True, describe: Callable[..., dict] | None = None,
               settled: dict | None = None) -> Callable:
    """Decorator: a backend body written for one flattened batch, applied to X (*, d, r).

    The body is called as ``body(Xb, info, *args, **kwargs)`` with Xb (nb, d, r), the
    call's other arguments, and ``info`` the dictionary ``{"backend": name}`` to extend,
    and returns the flat basis; the wrapper gives it the caller's batch shape
    (:func:`unflatten`). ``describe(*args, **kwargs)``, when given, adds to ``info`` what
    every basis of such a call records (Newton-Schulz: its schedule and coordinates).
    With ``identity_when_wide``, a wide X (r >= d) never reaches the body: col(X) is all of
    R^d, so Q = I_d, C = X is exact and costs nothing
    (:func:`fraq.backends.base.identity_basis`, no fallback); its ``info`` has ``settled``
    too, what a basis that ran no iteration records (Newton-Schulz: steps 0, residual 0,
    converged)."""
    def wrap(body: Callable[..., Basis]) -> Callable[..., Basis]:
        @functools.wraps(body)
        def run(X: torch.Tensor, *args, **kwargs) -> Basis:
            Xb, batch = flatten(X)
            info = {"backend": name, **(describe(*args, **kwargs) if describe is not None else {})}
            if identity_when_wide and X.shape[-1] >= X.shape[-2]:
                wide = dict(info, **(settled or {}), fallback=None, fallback_count=0)
                return unflatten(identity_basis(Xb, wide), batch)
            return unflatten(body(Xb, info, *args, **kwargs), batch)
        return run
    return wrap


def scaled_gram(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Gram :math:`W = X_s^\\top X_s` of :math:`X_s = 2^{-e} X`, with e chosen only when needed.

    Args:
        X: (nb, d, r).

    Returns:
        ``(Xs, W, e)``: Xs (nb, d, r), W (nb, r, r), and e (nb,) int exponents, or None
        when X was used as is (``Xs is X``). X = 2^e Xs exactly.

    The fast path is one GEMM (2 d r^2 flops). The diagonal of W holds the squared
    column norms; if its largest entry is non-finite, above ``max * eps`` or below
    ``tiny / eps^2`` (so that eps^2 * W is still a normal number) the batch is rescaled
    by the power of two of its largest entry, which costs one pass over X and a second
    GEMM. An exactly zero X is left alone (its Gram is zero, not underflowed).
    """
    W = torch.matmul(X.mT, X)
    fi = torch.finfo(W.dtype)
    dmax = torch.diagonal(W, dim1=-2, dim2=-1).amax(-1)
    ok = torch.isfinite(dmax) & (dmax <= fi.max * fi.eps) & (dmax >= fi.tiny / fi.eps**2)
    if bool(ok.all()):
        return X, W, None
    e = exponent(X)
    if bool((e == 0).all()):  # all zero, or max|X| in [0.5, 1) already: nothing to gain
        return X, W, None
    Xs = scale_pow2(X, -e.view(-1, 1, 1), parts=2)
    return Xs, torch.matmul(Xs.mT, Xs), e


def rescale(C: torch.Tensor, e: torch.Tensor | None) -> torch.Tensor:
    """Undo :func:`scaled_gram`'s scaling on coordinates: C * 2^e (exact)."""
    return C if e is None else scale_pow2(C, e.view(-1, 1, 1), parts=2)


def with_householder_fallback(
    X: torch.Tensor,
    C: torch.Tensor,
    apply: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    bad: torch.Tensor,
    info: dict,
) -> Basis:
    """Combine a fast basis with Householder QR on the matrices it could not be trusted on.

    Args:
        X: (nb, d, r) the oriented factors (any scaling; Householder is scale-safe).
        C: (nb, s, r) the fast backend's coordinates (entries for ``bad`` are ignored).
        apply: the fast backend's Q-application ``apply(U, index)``: U (k, s, p) holds
            the coordinates of the matrices ``index`` (k,) of the batch, or of all of
            them when ``index`` is None; returns Q U (k, d, p). It is only ever called
            for the good matrices.
        bad: (nb,) bool, True where the fast basis is rejected.
        info: recorded diagnostics; ``fallback`` and ``fallback_count`` are added.
    """
    nbad = int(bad.sum().item())
    nb = X.shape[0]
    info = dict(info, fallback="householder" if nbad else None, fallback_count=nbad)
    if nbad == 0:
        return Basis(C=C, apply=lambda U: apply(U, None), info=info)
    if nbad == nb:
        hh = householder(X)
        return Basis(C=hh.C, apply=hh.apply, info=info)
    bad_idx = bad.nonzero().squeeze(-1)
    good_idx = (~bad).nonzero().squeeze(-1)
    hh = householder(X.index_select(0, bad_idx))
    C = C.index_copy(0, bad_idx, hh.C.to(C.dtype))

    def mixed_apply(U: torch.Tensor) -> torch.Tensor:
        good = apply(U.index_select(0, good_idx), good_idx)
        fixed = hh.apply(U.index_select(0, bad_idx))
        out = good.new_empty(nb, *good.shape[1:])
        out.index_copy_(0, good_idx, good)
        out.index_copy_(0, bad_idx, fixed.to(good.dtype))
        return out

    return Basis(C=C, apply=mixed_apply, info=info)
