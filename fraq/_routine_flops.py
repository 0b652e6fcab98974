r"""FLOP counts of the LAPACK and BLAS routines torch calls, counted as LAWN 41 counts them.

A multiply-add is 2 FLOPs (a multiply and an add, LAWN 41's FMULS + FADDS, as MAGMA's
``testing/flops.h`` sums them for a real type). Each count is the cubic part of the LAWN 41
polynomial, exactly; the quadratic and linear terms (a few n^2) are dropped. The backends'
own models (beside each backend in :mod:`fraq.backends`) and the whole-method models
(:mod:`fraq.flops`) are sums of these.

==========  ==============================  ========================================================
routine     torch call (CPU)                FLOPs, leading terms
==========  ==============================  ========================================================
gemm        ``matmul``                      2mnk
syrk        (symmetry-aware Gram)           k n^2
geqrf       ``geqrf``, ``linalg.qr``        4mnk - 2(m + n)k^2 + 4k^3/3, k = min(m, n)
orgqr       ``linalg.householder_product``  4mqk - 2(m + q)k^2 + 4k^3/3 (first q columns of Q)
ormqr       ``ormqr``                       4mck - 2ck^2 (k reflectors of length m onto m x c)
potrf       ``linalg.cholesky``             n^3 / 3
trsm        ``linalg.solve_triangular``     n^2 c
sytrd       (inside syevd)                  4n^3 / 3
gebrd       (inside gesdd)                  4mn^2 - 4n^3/3, m >= n
stedc       (inside syevd), **nominal**     4n^3 / 3
bdsdc       (inside gesdd), **nominal**     8n^3 / 3
syevd       ``linalg.eigh``, ``eigvalsh``   sytrd + stedc + ormtr = 14n^3/3; values only 4n^3/3
gesdd       ``linalg.svd``, ``svdvals``     LAPACK's own path, see :func:`gesdd_parts`
==========  ==============================  ========================================================

**syevd.** ``torch.linalg.eigh`` calls LAPACK's divide-and-conquer ``syevd``, not the
QR-iteration ``syev`` whose 9 n^3 (GVL Sec. 8.3) textbooks quote: with vectors it
reduces to tridiagonal form (``sytrd``), solves the tridiagonal problem by divide and
conquer (``stedc``), and applies the reflectors back (``ormtr``, the n - 1 reflectors onto
an n x n matrix, 2n^3); without them the tridiagonal eigenvalues cost O(n^2) (``sterf``).

**gesdd.** ``torch.linalg.svd`` and ``svdvals`` call ``gesdd`` on the CPU (JOBZ = 'S' for
``full_matrices=False``, 'A' for True, 'N' for values only). For an m x n matrix,
m >= n, it starts with a QR when m >= 11n/6 (LAPACK's ``MNTHR``), then bidiagonalizes
(``gebrd``), solves the bidiagonal SVD by divide and conquer (``bdsdc``) and applies the
reflectors to the vectors (``ormbr``, counted as ``ormqr``), forming U through Q by a
GEMM on the QR path. A wide matrix takes the mirror path (LQ, the same counts).

**Nominal.** Divide and conquer does data-dependent work: a merge multiplies the two
halves' vectors by the secular equation's, an n x n GEMM per level that deflation
shrinks. Counted without deflation, the tridiagonal eigenvectors cost
n^3 (1 + 1/4 + 1/16 + ...) = 4n^3/3 (Demmel, Sec. 5.3.3); the bidiagonal SVD updates
both U and V at each merge, 8n^3/3. These are upper bounds on the merges' work (clustered
or graded spectra deflate, and cost less), so a rate credited with them is an upper
bound too; :func:`syevd_parts` and :func:`gesdd_parts` say which part is nominal.
Below LAPACK's ``SMLSIZ`` (25) the leaves run QR iteration, an O(n) count of 25 x 25
problems, not modelled.

References: LAPACK Working Note 41 (LAWN 41), Blackford and Dongarra, "Installation
guide for LAPACK", Sec. 6 operation counts, www.netlib.org/lapack/lawns/lawn41.ps, the
formulas MAGMA's ``testing/flops.h`` (and PLASMA's) transcribe; LAPACK 3.12's
``dsyevd.f`` and ``dgesdd.f`` for the call paths; J. W. Demmel, *Applied Numerical Linear
Algebra* (SIAM 1997), Sec. 5.3.3, doi:10.1137/1.9781611971446; M. Gu and S. C.
Eisenstat, "A divide-and-conquer algorithm for the bidiagonal SVD", SIAM J. Matrix Anal.
Appl. 16(1), 1995, doi:10.1137/S0895479892242232; Golub and Van Loan, *Matrix
Computations*, 4th ed. (GVL).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Part", "bdsdc_flops", "cholesky_flops", "eigh_flops", "gebrd_flops", "gemm_flops", "gesdd_parts",
           "gram_flops", "orgqr_flops", "qr_flops", "reflector_flops", "stedc_flops", "svd_flops", "syevd_parts",
           "sytrd_flops", "trsm_flops"]

SVD_QR_FIRST = 11 / 6
"""``gesdd`` takes the QR path when max(m, n) >= 11/6 min(m, n) (``MNTHR`` in ``dgesdd.f``)."""


@dataclass(frozen=True)
class Part:
    """One routine inside a driver: its name, its FLOPs and whether the count is nominal
    (data-dependent work counted at its no-deflation bound)."""

    routine: str
    flops: float
    nominal: bool = False


def gemm_flops(a: int, b: int, c: int) -> float:
    """(a x b) @ (b x c): 2abc (LAWN 41 GEMM)."""
    return 2.0 * a * b * c


def gram_flops(a: int, r: int, gram: str = "gemm") -> float:
    """X^T X for X (a x r): 2 a r^2 as a GEMM, a r^2 with SYRK (LAWN 41 SYRK's cubic term)."""
    return (1.0 if gram == "syrk" else 2.0) * a * r * r


def qr_flops(a: int, r: int) -> float:
    """Householder QR (``geqrf``) of an a x r matrix: 2 a r^2 - 2 r^3 / 3 when a >= r (LAWN 41)."""
    k = min(a, r)
    return 4.0 * a * r * k - 2.0 * (a + r) * k**2 + 4.0 * k**3 / 3


def reflector_flops(a: int, c: int, k: int) -> float:
    """Apply k Householder reflectors of length a to an a x c matrix (``ormqr``): 4ack - 2ck^2 (LAWN 41)."""
    return 4.0 * a * c * k - 2.0 * c * k**2


def orgqr_flops(a: int, q: int, k: int) -> float:
    """Form the first q columns of Q (a x a, k reflectors; ``orgqr``): 4aqk - 2(a + q)k^2 + 4k^3/3 (LAWN 41)."""
    return 4.0 * a * q * k - 2.0 * (a + q) * k**2 + 4.0 * k**3 / 3


def cholesky_flops(n: int) -> float:
    """Cholesky factorization (``potrf``) of an n x n matrix: n^3 / 3 (LAWN 41)."""
    return n**3 / 3.0


def trsm_flops(n: int, c: int) -> float:
    """Triangular solve (``trsm``), n x n triangle, c right-hand sides: n^2 c (LAWN 41)."""
    return float(n * n * c)


def sytrd_flops(n: int) -> float:
    """Reduction of a symmetric n x n matrix to tridiagonal form (``sytrd``): 4n^3 / 3 (LAWN 41)."""
    return 4.0 * n**3 / 3


def gebrd_flops(m: int, n: int) -> float:
    """Reduction of an m x n matrix to bidiagonal form (``gebrd``): 4ab^2 - 4b^3/3, a >= b (LAWN 41)."""
    a, b = max(m, n), min(m, n)
    return 4.0 * a * b * b - 4.0 * b**3 / 3


def stedc_flops(n: int) -> float:
    """Tridiagonal eigenvectors by divide and conquer (``stedc``), **nominal**: 4n^3 / 3 (no
    deflation; Demmel Sec. 5.3.3). See the module docstring."""
    return 4.0 * n**3 / 3


def bdsdc_flops(n: int) -> float:
    """Bidiagonal SVD with vectors by divide and conquer (``bdsdc``), **nominal**: 8n^3 / 3 (U and V
    each updated as ``stedc``'s vectors; no deflation; Gu and Eisenstat 1995)."""
    return 8.0 * n**3 / 3


def syevd_parts(n: int, vectors: bool = True) -> tuple[Part, ...]:
    """The routines ``syevd`` runs on an n x n symmetric matrix (``torch.linalg.eigh``), with their FLOPs."""
    if not vectors:
        return (Part("sytrd", sytrd_flops(n)),)  # sterf: O(n^2)
    return (Part("sytrd", sytrd_flops(n)), Part("stedc", stedc_flops(n), nominal=True),
            Part("ormtr", reflector_flops(n, n, n)))


def gesdd_parts(m: int, n: int, compute_uv: bool = True, full_matrices: bool = False) -> tuple[Part, ...]:
    """The routines ``gesdd`` runs on an m x n matrix (``torch.linalg.svd``, ``svdvals``), with their FLOPs.

    With a = max(m, n) and b = min(m, n), the path of ``dgesdd.f`` for JOBZ = 'N' (no
    vectors), 'S' (thin) or 'A' (full):

    - a >= 11b/6, QR first: ``geqrf`` (a x b); ``orgqr`` forms Q (a x b for 'S', a x a
      for 'A'); ``gebrd`` of the b x b R; ``bdsdc``; ``ormbr`` twice on b x b; U = Q U_R
      by a GEMM. Totals: 2ab^2 + 2b^3 (values), 6ab^2 + 8b^3 (thin), 4a^2 b + 10b^3 (full).
    - otherwise: ``gebrd`` of a x b; ``bdsdc``; ``ormbr`` onto U (a x b, or a x a) and V^T
      (b x b). Totals: 4ab^2 - 4b^3/3, 8ab^2 + 4b^3/3, 4a^2 b + 2ab^2 + 10b^3/3.
    """
    a, b = max(m, n), min(m, n)
    qr_first = a >= SVD_QR_FIRST * b
    if not compute_uv:
        if qr_first:
            return Part("geqrf", qr_flops(a, b)), Part("gebrd", gebrd_flops(b, b))
        return (Part("gebrd", gebrd_flops(a, b)),)  # bdsdc without vectors: O(b^2)
    u_cols = a if full_matrices else b
    dc = Part("bdsdc", bdsdc_flops(b), nominal=True)
    ormbr_p = Part("ormbr (V)", reflector_flops(b, b, b))
    if qr_first:
        return (Part("geqrf", qr_flops(a, b)), Part("orgqr", orgqr_flops(a, u_cols, b)),
                Part("gebrd", gebrd_flops(b, b)), dc, Part("ormbr (U)", reflector_flops(b, b, b)), ormbr_p,
                Part("gemm", gemm_flops(a, b, b)))
    return Part("gebrd", gebrd_flops(a, b)), dc, Part("ormbr (U)", reflector_flops(a, u_cols, b)), ormbr_p


def eigh_flops(n: int, vectors: bool = True) -> float:
    """``torch.linalg.eigh`` (``syevd``) of an n x n matrix: 14n^3/3 with vectors (4n^3/3 of it
    nominal), 4n^3/3 values only. See :func:`syevd_parts`."""
    return float(sum(p.flops for p in syevd_parts(n, vectors)))


def svd_flops(m: int, n: int, compute_uv: bool = True, full_matrices: bool = False) -> float:
    """``torch.linalg.svd`` / ``svdvals`` (``gesdd``) of an m x n matrix; see :func:`gesdd_parts`.

    A square thin SVD is 28n^3/3 (8n^3/3 of it nominal); a tall thin one 6ab^2 + 8b^3.
    """
    return float(sum(p.flops for p in gesdd_parts(m, n, compute_uv, full_matrices)))
