"""FLOP counts of the dense routines FRAQ and its baselines are built from (LAPACK, BLAS).

A multiply-add is 2 FLOPs; each count keeps the routine's leading term with its
constant and the lower-order terms that separate the backends. The backends' own
models (beside each backend in :mod:`fraq.backends`) and the whole-method models
(:mod:`fraq.flops`) are sums of these. References: Golub and Van Loan, *Matrix
Computations*, 4th ed. (GVL); LAPACK Working Note 41 (LAWN 41).
"""

from __future__ import annotations

__all__ = ["cholesky_flops", "eigh_flops", "gemm_flops", "gram_flops", "orgqr_flops", "qr_flops", "reflector_flops",
           "svd_flops", "trsm_flops"]


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


def orgqr_flops(a: int, q: int, k: int) -> float:
    """Form the first q columns of Q (a x a, k reflectors): 4aqk - 2(a + q)k^2 + 4k^3/3."""
    return 4.0 * a * q * k - 2.0 * (a + q) * k**2 + 4.0 * k**3 / 3


def cholesky_flops(n: int) -> float:
    """Cholesky factorization of an n x n matrix: n^3 / 3 (GVL Sec. 4.2)."""
    return n**3 / 3.0


def trsm_flops(n: int, c: int) -> float:
    """Triangular solve, n x n triangle, c right-hand sides: n^2 c."""
    return float(n * n * c)


def eigh_flops(n: int, vectors: bool = True) -> float:
    """Symmetric eigendecomposition: 9 n^3 with eigenvectors, 4 n^3 / 3 values only (GVL 8.3)."""
    return 9.0 * n**3 if vectors else 4.0 * n**3 / 3


def svd_flops(m: int, n: int, compute_uv: bool = True, full_matrices: bool = False) -> float:
    """SVD of an m x n matrix, the cheaper of Golub-Reinsch and R-SVD (GVL Fig. 8.6.1).

    LAPACK's ``gesdd`` makes the same choice: it starts with a QR when the matrix is
    tall enough, which is the R-SVD.
    """
    a, b = max(m, n), min(m, n)
    if not compute_uv:
        return float(min(4 * a * b**2 - 4 * b**3 / 3, 2 * a * b**2 + 2 * b**3))
    if full_matrices:
        return float(min(4 * a**2 * b + 8 * a * b**2 + 9 * b**3, 4 * a**2 * b + 22 * b**3))
    return float(min(14 * a * b**2 + 8 * b**3, 6 * a * b**2 + 20 * b**3))
