"""The range verdict and rescue of :func:`fraq.recompress`: exact power-of-two scaling,
per matrix, for factors near the ends of a dtype's range.

The promise: any finite factors whose aggregate's largest singular value sigma_1 lies
in [tiny, max / 2] of the result's dtype give a result as accurate as the same factors
at unit scale. The fast path looks only at the small intermediates: C (s x r), the
Gram G (s x s) and, factored, Y Y^T (r x r). :func:`stats` reduces them to three
numbers per matrix on the device, read in the call's one host synchronization, and
:func:`verdict` decides there whether the unscaled computation can be trusted. A
matrix that fails is redone (:func:`rescaled`) with each of X and Y scaled by the exact
power of two that brings its largest entry into [0.5, 1), after its factors are checked
for NaN and Inf; the scale 2^(e_X + e_Y) goes back on the singular-value side at the
end, so the orthonormal factor stays orthonormal. Scaling both factors (not only C) is
what covers a product X Y (or Y Y^T) that under- or overflows although each factor is
representable. :func:`check_representable` refuses, with the value, an aggregate whose
sigma_1 the result's dtype cannot hold.

Multiplying by 2^k changes only the exponent of a normal number, so it is exact: a
factor scaled this way has the same significant digits, and the scale can be put back
at the end without a rounding. :func:`fraq.recompress` and the Gram-based backends use it
to keep their squared intermediates (Gram matrices) away from underflow and overflow.

``torch.ldexp(x, e)`` is *not* used: it computes ``x * 2.0**e`` with 2^e rounded in the
dtype of ``e`` (or float32 for an integer ``e``), so 2^148 is inf in float32 and 2^-1100
is 0 in float64, although x * 2^e may be perfectly representable. Here 2^k is built
from its bit pattern and a large k is applied in several exact steps.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from fraq._validation import check_finite, compute_dtype

__all__ = ["amax", "balance", "check_representable", "equilibrate", "exponent", "limits", "pow2", "rescaled", "scale_pow2",
           "stats", "verdict"]

_BITS = {  # dtype -> (integer dtype of its bit pattern, mantissa bits, exponent bias)
    torch.float32: (torch.int32, 23, 127),
    torch.float64: (torch.int64, 52, 1023),
}


def amax(t: torch.Tensor) -> torch.Tensor:
    """max |t| per matrix (*, rows, cols) -> (*); NaN where the matrix holds a NaN; 0 for an
    empty matrix. The largest and the negated smallest entry, two plain reductions with
    no |t| materialized: torch's infinity norm (``vector_norm(ord=inf)``) runs a slow
    path on the CPU, about 10x these two on a 768 x 3072 factor."""
    if t.shape[-1] == 0 or t.shape[-2] == 0:
        return t.new_zeros(t.shape[:-2])
    return torch.maximum(t.amax(dim=(-2, -1)), t.amin(dim=(-2, -1)).neg())


def exponent(t: torch.Tensor) -> torch.Tensor:
    """int64 e per matrix with max|t| = f * 2^e, 0.5 <= f < 1 (0 for a zero matrix).

    Scaling the matrix by 2^-e brings its largest entry into [0.5, 1). Subnormal entries
    get their true exponent (down to -1073 in float64, -148 in float32).
    """
    return torch.frexp(amax(t)).exponent.to(torch.int64)


def pow2(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """2^k exactly, for int k in the normal range of ``dtype`` (float32: [-126, 127])."""
    idt, mant, bias = _BITS[dtype]
    return ((k.to(idt) + bias) << mant).view(dtype)


def scale_pow2(t: torch.Tensor, e: torch.Tensor, parts: int) -> torch.Tensor:
    """t * 2^e exactly (unless the result itself under/overflows), in ``parts`` steps.

    Args:
        t: float32 or float64 tensor.
        e: int tensor broadcastable to t (one exponent per matrix: shape (nb, 1, 1)).
        parts: number of multiplications; each applies at most ceil(|e| / parts), which
            must stay in the normal exponent range. Two parts cover any factor's own
            exponent (|e| <= 1074 in float64, 149 in float32), three a product of two.

    All steps move in the direction of e, so an intermediate never leaves the range
    between t and the result.
    """
    rest = e.to(torch.int64)
    for i in range(parts, 0, -1):
        k = torch.div(rest, i, rounding_mode="floor")
        t = t * pow2(k, t.dtype)
        rest = rest - k
    return t


def equilibrate(X: torch.Tensor, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """X (nb, d, r) with each column scaled by the power of two 2^-e_k that brings its largest
    entry into [0.5, 1), and Y (nb, r, D) with row k scaled by 2^e_k: the product X Y is
    unchanged exactly, and X's columns are equilibrated, within a factor sqrt(r) of the
    best-conditioned diagonal scaling of X (van der Sluis, Numer. Math. 14, 1969).

    A basis that is not invariant to X's column scaling (an iteration normalized by
    ||X||_F, Cholesky-QR, a polar factor) sees col(X) this way, not an imbalance between
    factors that the product does not have: clients whose factors are scaled in opposite
    directions, (B c, A / c), give X columns c^2 apart and an iteration that takes the
    small ones for zeros. The largest entries, not norms: a norm's squares underflow or
    overflow where the entries do not. Row k of Y ends at most |x_k|max |y_k|max, an
    entry of the rank-one term x_k y_k; a Gram that this pushes out of range is caught by
    the range verdict and rescaled as a whole (:func:`rescaled`), which keeps X
    equilibrated. A zero or non-finite column gives e_k = 0."""
    e, live = _line_exponents(X, -2)
    k = torch.where(live, e, torch.zeros_like(e))
    return scale_pow2(X, -k.unsqueeze(-2), parts=2), scale_pow2(Y, k.unsqueeze(-1), parts=2)


def _line_exponents(t: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(e, live) of each column (``dim=-2``) or row (``dim=-1``) of ``t``: int64 e with its
    largest |entry| = f 2^e, 0.5 <= f < 1, and live False where it is zero or not finite
    (e is then meaningless). The largest and the negated smallest entry: no |t| formed."""
    f = torch.frexp(torch.maximum(t.amax(dim=dim), t.amin(dim=dim).neg()))
    return f.exponent.to(torch.int64), (f.mantissa > 0) & torch.isfinite(f.mantissa)


SMALL = 1 << 16
"""Entries per matrix up to which :func:`stats` takes |C| and one reduction (two ops) rather
than :func:`amax`'s two reductions and their maximum (four): C is r x r for every basis but
the identity's, whose C is X itself (d x r, r >= d), which is not copied."""


def stats(C: torch.Tensor) -> torch.Tensor:
    """max|C| per matrix (nb,): not a norm, whose squares would underflow for a tiny C, so it
    is exactly zero only for a zero X; a NaN or Inf anywhere in X shows in it. The Grams
    need no pass of their own (see :func:`verdict`). The same value by either route
    (:data:`SMALL`)."""
    if 0 < C.shape[-1] * C.shape[-2] <= SMALL:
        return C.abs().amax(dim=(-2, -1))
    return amax(C)


@functools.lru_cache(maxsize=None)
def limits(cdt: torch.dtype, edt: torch.dtype) -> tuple[float, float, float, float, float, float]:
    """(lo, hi) of max|C|, of lambda_1 and of max diag(W_Y) (see :func:`verdict`; the static
    pipeline, :mod:`fraq._static`, holds its column and row norms to the same bounds)."""
    fc, fe = torch.finfo(cdt), torch.finfo(edt)
    fg = fc if fc.max <= fe.max else fe
    return (fc.tiny / fc.eps, fc.max * fc.eps, fg.tiny / fg.eps**2, fg.max * fg.eps,
            fc.tiny / fc.eps**2, fc.max * fc.eps)


def verdict(c_max: list[float], lam1: list[float], w_max: list[float] | None,
            cdt: torch.dtype, edt: torch.dtype) -> np.ndarray:
    """Per matrix, bool: the unscaled computation can be trusted, from host numbers (one
    per matrix): ``c_max`` from :func:`stats`, ``lam1`` the Gram's largest eigenvalue
    (NaN where the eigensolver refused it), ``w_max`` the largest diagonal entry of W_Y
    (factored Gram).

    C must be far from underflow (a factor of subnormal numbers loses digits in its QR)
    and from overflow; G (in the narrower of the compute and eigensolver dtypes) and
    W_Y must keep the squared spectrum down to the noise floor eps * lambda_1 normal and
    its sum finite. A Gram is positive semidefinite, so lambda_1 lies within a factor s
    of its largest entry, and W_Y's largest entry is on its diagonal: neither needs a
    pass over the matrix, and the eps-wide margins dwarf the factor s. An exactly zero
    X (C = 0, G = 0) is a zero aggregate, not an underflow; a zero G with a nonzero C may
    be either, and takes the rescaled path. NaN fails every test. A matrix that passes
    has sigma_1 = sqrt(lambda_1) inside the compute dtype's range with eps-wide margins,
    so only a narrower result dtype (float16, bfloat16) or a rescaled matrix needs
    :func:`check_representable`. Python floats, one matrix at a time: a handful of
    comparisons per matrix cost less so than as array operations on one row.
    """
    c_lo, c_hi, g_lo, g_hi, w_lo, w_hi = limits(cdt, edt)
    ws = [w_lo] * len(c_max) if w_max is None else w_max
    return np.array([(c_lo <= c <= c_hi and g_lo <= g <= g_hi and w_lo <= w <= w_hi) or (c == 0 and g == 0)
                     for c, g, w in zip(c_max, lam1, ws)], dtype=bool)


def balance(X: torch.Tensor, Y: torch.Tensor, bad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """X (nb, d, r) column k times 2^-s_k and Y (nb, r, D) row k times 2^s_k, for the
    matrices marked ``bad``: the product X Y is unchanged exactly, and s_k halves the gap
    between the exponents of max|x_k| and max|y_k|, so each rank-one term's size is shared
    by its two factors. A client whose factors are scaled against each other, (B c, A / c),
    puts c^2 between its columns and the others' in each factor alone: scaled as a whole,
    either factor then loses the small ones to underflow (in its Gram, or in C Y), although
    every term of the product is representable. A zero or non-finite column or row gets
    s_k = 0."""
    ex, okx = _line_exponents(X, -2)
    ey, oky = _line_exponents(Y, -1)
    s = torch.div(ex - ey, 2, rounding_mode="floor")
    s = torch.where(okx & oky & bad.unsqueeze(-1), s, torch.zeros_like(s))
    return scale_pow2(X, -s.unsqueeze(-2), parts=2), scale_pow2(Y, s.unsqueeze(-1), parts=2)


def rescaled(whole: tuple[torch.Tensor, torch.Tensor], X: torch.Tensor, Y: torch.Tensor,
             bad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Xs, Ys, e): for the matrices marked ``bad`` ((nb,) bool), X's columns and Y's rows
    first balanced against each other (:func:`balance`: X Y unchanged), then X = 2^ex Xs and
    Y = 2^ey Ys with each factor's largest entry brought into [0.5, 1); e = ex + ey (int64,
    (nb,)), 0 elsewhere.

    ``whole`` = the caller's (B, A): a NaN or Inf there is named by its index in them
    (in any matrix: the call fails either way) before anything is scaled.
    """
    check_finite("B", whole[0])
    check_finite("A", whole[1])
    X, Y = balance(X, Y, bad)
    zero = torch.zeros((), dtype=torch.int64, device=X.device)
    ex = torch.where(bad, exponent(X), zero)
    ey = torch.where(bad, exponent(Y), zero)
    return scale_pow2(X, -ex.view(-1, 1, 1), parts=2), scale_pow2(Y, -ey.view(-1, 1, 1), parts=2), ex + ey


def check_representable(whole: tuple[torch.Tensor, torch.Tensor], lam1: np.ndarray, e: np.ndarray | None,
                        out_dtype: torch.dtype, name_matrix) -> None:
    """Refuse an aggregate whose singular values the result's dtype cannot hold.

    ``lam1``: each matrix's largest Gram eigenvalue (host, float64), the aggregate's
    sigma_1 = 2^e sqrt(lam1). sigma_1 must lie in [tiny, max / 2] of the output dtype:
    below tiny the factor that carries the singular values would be subnormal (fewer
    digits than eps promises); above max / 2 it, or its rounding, would overflow. A zero
    aggregate is not an underflow. ``name_matrix(k)`` words matrix k of this batch for
    the message (its index in the caller's batch).
    """
    fo = torch.finfo(out_dtype)
    lo_lim, hi_lim = math.log2(fo.tiny), math.log2(fo.max) - 1
    live = lam1 > 0
    l2 = 0.5 * np.log2(np.where(live, lam1, 1.0)) + (0 if e is None else e)
    bad = live & ((l2 < lo_lim) | (l2 > hi_lim))
    if not bad.any():
        return
    k = int(np.flatnonzero(bad)[0])
    B, A = whole
    what = "underflow" if l2[k] < lo_lim else "overflow"
    hint = " or pass float32 factors" if compute_dtype(out_dtype) != out_dtype else ""
    raise ValueError(
        f"B @ A has largest singular value {_fmt_pow2(float(l2[k]))}{name_matrix(k)}, outside what {out_dtype} "
        f"can hold in the result, [{fo.tiny:.3g}, {fo.max / 2:.3g}]: its singular-value factor would {what} "
        f"(max|B|={float(B.abs().max()):.3g}, max|A|={float(A.abs().max()):.3g}). Scale B or A by a "
        f"power of two (and the merged adapter by the inverse){hint}."
    )


def _fmt_pow2(l2: float) -> str:
    """2^l2 in decimal notation, also where it under/overflows a Python float."""
    dec = l2 * math.log10(2)
    k = math.floor(dec)
    return f"{10 ** (dec - k):.2f}e{k:+03d}"
