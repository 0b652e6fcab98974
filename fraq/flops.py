r"""Analytic FLOP counts of FRAQ and its basis backends (the paper's Eq. 12-14 and Table 5).

One adapted weight matrix, oriented as in the paper: d = min(m, n), D = max(m, n),
stacked rank r, output rank p, s = min(d, r). A multiply-add is 2 FLOPs. The counts
keep each routine's leading term with its constant, and the O(r^3) and O(r p) terms
too, because those separate the backends:

======================  ====================================================================
piece                   FLOPs
======================  ====================================================================
GEMM a x b by b x c     2abc
Gram X^T X, X a x r     2 a r^2 as a GEMM (``gram="gemm"``, what the code runs), a r^2 with
                        a symmetry-aware SYRK (``gram="syrk"``, the paper's Table 5)
Householder QR a x r    4ark - 2(a + r)k^2 + 4k^3/3, k = min(a, r) (= 2ar^2 - 2r^3/3); LAWN 41
reflectors onto a x c   4ack - 2ck^2 (LAPACK ``ormqr``); LAWN 41
Cholesky n x n          n^3 / 3;  triangular solve with c right-hand sides: n^2 c
symmetric eig n x n     9 n^3 with vectors (Golub and Van Loan, Sec. 8.3)
SVD n x n, vectors      22 n^3 (Golub-Reinsch, GVL Fig. 8.6.1)
======================  ====================================================================

The pipeline around any backend (:func:`fraq.recompress`): H = C Y (2 s r D), the Gram
H H^T, the eigenproblem (9 s^3), and R_p = U_p^T H (2 p s D). With Householder and a
SYRK Gram this is the paper's :math:`(2d + 3D) r^2 + O((d + D) r p + r^3)`; the code's
GEMM Gram makes it :math:`(2d + 4D) r^2`. The **factored** variant
(``factored=True``) forms :math:`G = C (YY^\top) C^\top` and :math:`R_p = (U_p^\top C) Y`
instead, so H never exists: D enters through one Gram :math:`YY^\top` (D r^2 with SYRK)
and R_p, i.e. :math:`(2d + D) r^2` with Householder and :math:`(4d + D) r^2` with
Cholesky-QR2 (SYRK Grams), against the paper's :math:`(2d + 3D) r^2`.

Data-dependent work is not modelled: a Cholesky-QR2 fallback adds Householder's count for
that matrix, and Newton-Schulz's step count comes from its tolerance (pass ``steps``,
e.g. from ``result.info["steps"]``).

References: the FRAQ paper, Appendix A.3 and Table 5; Golub and Van Loan, *Matrix
Computations*, 4th ed.; LAPACK Working Note 41.
"""

from __future__ import annotations

import numbers

__all__ = [
    "GRAMS",
    "BACKEND_COSTS",
    "gemm_flops",
    "gram_flops",
    "qr_flops",
    "reflector_flops",
    "basis_flops",
    "coordinate_flops",
    "fraq_flops",
]

GRAMS = ("gemm", "syrk")


def gemm_flops(a: int, b: int, c: int) -> float:
    """(a x b) @ (b x c): 2abc."""
    return 2.0 * a * b * c


def gram_flops(a: int, r: int, gram: str = "gemm") -> float:
    """X^T X for X (a x r): 2 a r^2 (GEMM) or a r^2 (SYRK)."""
    return (1.0 if gram == "syrk" else 2.0) * a * r * r


def qr_flops(a: int, r: int) -> float:
    """Householder QR (geqrf) of an a x r matrix: 2 a r^2 - 2 r^3 / 3 when a >= r (LAWN 41)."""
    k = min(a, r)
    return 4.0 * a * r * k - 2.0 * (a + r) * k**2 + 4.0 * k**3 / 3


def reflector_flops(a: int, c: int, k: int) -> float:
    """Apply k Householder reflectors of length a to an a x c matrix (ormqr): 4ack - 2ck^2."""
    return 4.0 * a * c * k - 2.0 * c * k**2


def _chol(n: int) -> float:
    return n**3 / 3.0


def _trsm(n: int, c: int) -> float:
    return float(n * n * c)


def _eigh(n: int) -> float:
    return 9.0 * n**3


def _svd_square(n: int) -> float:
    return 22.0 * n**3


# ------------------------------------------------------------------ backends: basis + apply(U_p)


def _householder(d, r, p, steps, gram):
    s = min(d, r)
    return qr_flops(d, r) + reflector_flops(d, p, s)


def _polar(d, r, p, steps, gram):
    s = min(d, r)
    small = _svd_square(s) + gemm_flops(s, s, r) * (2 if d >= r else 0)  # SVD of R, then S and W_R V^T
    return qr_flops(d, r) + small + gemm_flops(s, s, p) + reflector_flops(d, p, s)


def _cholesky_qr2(d, r, p, steps, gram):
    if r >= d:
        return 0.0  # Q = I_d, C = X
    # W1, R1^{-1} (r^3 / 3), Q1 = X R1^{-1} (a GEMM), W2, two Cholesky, R2 R1; apply: R2^{-1} U then Q1 (.)
    basis = 2 * gram_flops(d, r, gram) + r**3 / 3 + gemm_flops(d, r, r) + 2 * _chol(r) + gemm_flops(r, r, r)
    return basis + _trsm(r, p) + gemm_flops(d, r, p)


def _newton_schulz(coords):
    def cost(d, r, p, steps, gram):
        if r >= d:
            return 0.0
        if steps is None:
            raise ValueError("steps is required for a Newton-Schulz backend: its step count depends on the "
                             "data (use result.info['steps'])")
        g = gram_flops(d, r, gram)
        # first Gram; per step: Q P and the new Gram; per check: W^2 (the residual, and the quintic's term)
        f = g + steps * (gemm_flops(d, r, r) + g) + (steps + 1) * gemm_flops(r, r, r)
        f += gemm_flops(r, d, r)  # T = Q^T X
        if coords == "direct":
            return f + gemm_flops(d, r, p)
        f += _chol(r) + _trsm(r, r)  # Z = L^{-T}
        if coords == "lstsq":
            return f + 2 * gemm_flops(r, r, r) + gemm_flops(d, r, p)
        return f + gemm_flops(r, r, r) + gemm_flops(r, r, p) + gemm_flops(d, r, p)

    return cost


def _cholesky(d, r, p, steps, gram):
    if r >= d:
        return 0.0  # Q = I_d, C = X
    # W = X^T X (float64), Cholesky, R^{-1} (r^3 / 3); apply: R^{-1} U then X (.) (float64)
    return gram_flops(d, r, gram) + _chol(r) + r**3 / 3 + gemm_flops(r, r, p) + gemm_flops(d, r, p)


BACKEND_COSTS = {
    "householder": _householder,
    "polar": _polar,
    "cholesky-qr2": _cholesky_qr2,
    "cholesky": _cholesky,
    "newton-schulz": _newton_schulz("cholesky"),
    "newton-schulz-polar-express": _newton_schulz("cholesky"),
    "newton-schulz-lstsq": _newton_schulz("lstsq"),
    "newton-schulz-direct": _newton_schulz("direct"),
    "newton-schulz-muon": _newton_schulz("direct"),
}
"""Backend name -> cost of its basis and of applying Q to U_p (the registry's names)."""

_DEFAULT_STEPS = {"newton-schulz-muon": 5}


def _check_dims(d, D, r, p, gram, backend) -> None:
    for name, v in (("d", d), ("D", D), ("r", r), ("p", p)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name}(={v!r}) must be an int")
        if v < 0:
            raise ValueError(f"{name}(={v}) must be >= 0")
    if d > D:
        raise ValueError(f"d(={d}) must be <= D(={D}): pass d = min(m, n), D = max(m, n)")
    if p > min(d, r):
        raise ValueError(f"p(={p}) must be <= min(d, r)(={min(d, r)})")
    if gram not in GRAMS:
        raise ValueError(f"gram(={gram!r}) must be one of {list(GRAMS)}")
    if not isinstance(backend, str) or backend not in BACKEND_COSTS:
        raise ValueError(f"backend(={backend!r}) is not one of {sorted(BACKEND_COSTS)}")


def basis_flops(d: int, r: int, p: int, backend: str = "householder", *, steps: int | None = None,
                gram: str = "gemm") -> float:
    """FLOPs of a backend's basis of X (d x r) plus applying Q to U_p (r x p)."""
    _check_dims(d, d, r, p, gram, backend)
    if steps is None:
        steps = _DEFAULT_STEPS.get(backend)
    return float(BACKEND_COSTS[backend](d, r, p, steps, gram))


def coordinate_flops(d: int, D: int, r: int, p: int, *, gram: str = "gemm", factored: bool = False) -> float:
    """FLOPs of the pipeline around the basis: coordinates, Gram, eigenproblem and R_p.

    ``factored=False``: H = C Y, G = H H^T, R_p = U_p^T H (what :func:`fraq.recompress`
    runs). ``factored=True``: G = C (Y Y^T) C^T and R_p = (U_p^T C) Y, H never formed.
    """
    _check_dims(d, D, r, p, gram, "householder")
    s = min(d, r)
    if factored:
        f = gram_flops(D, r, gram) + gemm_flops(s, r, r) + gemm_flops(s, r, s)
        f += gemm_flops(p, s, r) + gemm_flops(p, r, D)
    else:
        f = gemm_flops(s, r, D) + gram_flops(D, s, gram) + gemm_flops(p, s, D)
    return float(f + _eigh(s))


def fraq_flops(d: int, D: int, r: int, p: int, backend: str = "householder", *, steps: int | None = None,
               gram: str = "gemm", factored: bool = False) -> float:
    r"""Leading-order FLOPs of one FRAQ recompression of a d x D matrix, stacked rank r, output rank p.

    Args:
        d, D: min(m, n) and max(m, n) (d <= D).
        r: stacked rank; p: output rank, p <= min(d, r).
        backend: a name in :data:`BACKEND_COSTS` (the registry's backends).
        steps: Newton-Schulz steps (required for the tolerance-driven Newton-Schulz
            backends; 5 for ``newton-schulz-muon``).
        gram: ``"gemm"`` counts the symmetric Gram products as the code runs them;
            ``"syrk"`` counts them at half, the paper's convention, so that
            ``fraq_flops(d, D, r, p, gram="syrk")`` is :math:`(2d + 3D) r^2` plus the
            O((d + D) r p + r^3) terms.
        factored: count the factored Gram variant (see the module docstring).

    Returns:
        FLOPs as a float.
    """
    _check_dims(d, D, r, p, gram, backend)
    return basis_flops(d, r, p, backend, steps=steps, gram=gram) + coordinate_flops(d, D, r, p, gram=gram,
                                                                                    factored=factored)
