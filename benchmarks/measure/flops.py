r"""FLOPs counted from the operators a call runs (LAPACK included), checked against :mod:`fraq.flops`.

**Counted.** :class:`torch.utils.flop_counter.FlopCounterMode` counts matrix products
(``mm``, ``bmm``, ``addmm``, ``baddbmm``) and returns 0 for every LAPACK call. We register
formulas for them through its ``custom_mapping`` (:data:`LAPACK_FORMULAS`), so a QR, an
eigendecomposition or an SVD is counted at its standard leading-order cost:

=============================  ===================================================  ==========
aten op (from)                 FLOPs for a (*, m, n) input, k = min(m, n)            source
=============================  ===================================================  ==========
geqrf (torch.geqrf)            4mnk - 2(m + n)k^2 + 4k^3/3 (= 2mn^2 - 2n^3/3, m>=n)  LAWN 41
ormqr (torch.ormqr)            4 m c k - 2 c k^2, Q m x m from k reflectors, C m x c LAWN 41
linalg_householder_product     4 m q k - 2(m + q)k^2 + 4k^3/3, Q m x q               LAWN 41
linalg_qr                      geqrf + householder_product for Q (none in mode 'r')  LAWN 41
_linalg_eigh (eigh, eigvalsh)  syevd: sytrd + stedc + ormtr = 14 n^3 / 3 with       LAWN 41,
                               vectors (stedc's 4n^3/3 nominal), 4 n^3 / 3 values   Demmel
                               only                                                 5.3.3
_linalg_svd (svd, svdvals)     gesdd on LAPACK's path, a >= b; a < 11b/6 | QR       LAWN 41,
                               first: values 4ab^2-4b^3/3 | 2ab^2+2b^3;             dgesdd.f
                               thin U,V 8ab^2+4b^3/3 | 6ab^2+8b^3;
                               full U,V 4a^2b+2ab^2+10b^3/3 | 4a^2b+10b^3
                               (bdsdc's 8b^3/3 nominal)
linalg_cholesky_ex             n^3 / 3                                              LAWN 41
linalg_solve_triangular,       n^2 c (n x n triangle, c right-hand sides)           LAWN 41
triangular_solve
cholesky_solve                 2 n^2 c                                              GVL 4.2
linalg_lu_factor_ex            m n k - (m + n)k^2/2 + k^3/3 (= 2n^3/3 square)       GVL 3.2
_linalg_solve_ex               2n^3/3 + 2 n^2 c                                     GVL 3.2
=============================  ===================================================  ==========

A multiply-add is 2 FLOPs, as in FlopCounterMode's ``mm`` (2mnk). Batched inputs multiply
by the batch size. The counts are those of the routines torch calls on the CPU
(:mod:`fraq._routine_flops`): ``syevd`` and ``gesdd``, divide and conquer, whose merges
are counted at their no-deflation bound (nominal), so a rate credited with them is an
upper bound; they change the constants on the r^3 terms, never the d r^2 and D r^2
terms the paper's model keeps. Elementwise work (scaling, masking, copies) is not
counted, by either the counter or the model. Operators that look like linear algebra but
have no formula here are reported in :attr:`FlopCount.uncounted`, so a zero is never
silent.

Dispatch modes are per thread, so the call is counted at one torch thread: work that
``fraq._parallel.batch_map`` would fan out to Python threads then runs on the calling
thread, with the same FLOPs. Under any dispatch mode, ``eigvalsh`` and ``svdvals`` ask LAPACK for the vectors too (torch
cannot rule out a backward pass through a mode), so they run, and are counted, at the
with-vectors cost while the counter is active.

**Analytic.** The formulas are the analytic ones of :mod:`fraq.flops` (the routine counts,
FRAQ with each backend, the baselines, Table 5), so counted FLOPs and
:func:`fraq.aggregators.analytic_flops` with ``model="full"`` agree to the r^3 constants;
``model="table5"`` differs from them by the Gram convention (SYRK there, GEMM in the
code: 3D r^2 against 4D r^2) and the SVD constants (the paper's 4 a r^2 thin SVD is
a values-only count; with singular vectors ``gesdd``'s QR path costs 6 a r^2).

The check that counted and analytic FLOPs agree is a check of the plumbing (every
routine a call runs has a formula); the formulas themselves are checked against LAWN 41's
polynomials and a divide-and-conquer recursion in ``tests/test_routine_flops.py``, and
each routine's credited rate against the GEMM rate measured in the same process.

References: LAPACK Working Note 41 (LAWN 41), "Installation guide", operation counts
table (the formulas MAGMA's ``testing/flops.h`` transcribes); Golub and Van Loan, *Matrix
Computations*, 4th ed. (GVL) for LU and its solves; Demmel, *Applied Numerical Linear
Algebra*, Sec. 5.3.3; the FRAQ paper, Appendix A.3 and Table 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from fraq import flops as analytic  # names looked up at call time (see benchmarks.measure)

__all__ = ["FlopCount", "LAPACK_FORMULAS", "count_flops"]

aten = torch.ops.aten


def _batch(shape) -> int:
    return math.prod(shape[:-2])


# ------------------------------------------------- FlopCounterMode formulas (shapes in)
# FlopCounterMode calls each formula with the op's arguments, tensors replaced by their
# shapes, and out_shape= the output's shape(s). Counts with thirds (4k^3/3, 14n^3/3) are
# rounded to the nearest integer, so a sum of calls stays within half a FLOP per call.


def _geqrf(a, *args, out_shape=None, **kwargs) -> int:
    return round(_batch(a) * analytic.qr_flops(a[-2], a[-1]))


def _ormqr(a, tau, other, left=True, transpose=False, *args, out_shape=None, **kwargs) -> int:
    k = tau[-1]
    m, c = (other[-2], other[-1]) if left else (other[-1], other[-2])
    return round(_batch(other) * analytic.reflector_flops(m, c, k))


def _householder_product(a, tau, *args, out_shape=None, **kwargs) -> int:
    return round(_batch(a) * analytic.orgqr_flops(a[-2], a[-1], tau[-1]))


def _linalg_qr(a, mode="reduced", *args, out_shape=None, **kwargs) -> int:
    m, n = a[-2], a[-1]
    k = min(m, n)
    f = analytic.qr_flops(m, n)
    if mode == "reduced":
        f += analytic.orgqr_flops(m, k, k)
    elif mode == "complete":
        f += analytic.orgqr_flops(m, m, k)
    return round(_batch(a) * f)


def _linalg_eigh(a, uplo="L", compute_v=True, *args, out_shape=None, **kwargs) -> int:
    return round(_batch(a) * analytic.eigh_flops(a[-1], vectors=compute_v))


def _linalg_svd(a, full_matrices=False, compute_uv=True, *args, out_shape=None, **kwargs) -> int:
    return round(_batch(a) * analytic.svd_flops(a[-2], a[-1], compute_uv=compute_uv, full_matrices=full_matrices))


def _cholesky(a, *args, out_shape=None, **kwargs) -> int:
    return round(_batch(a) * analytic.cholesky_flops(a[-1]))


def _solve_triangular(a, b, *args, upper=None, left=True, unitriangular=False, out_shape=None, **kwargs) -> int:
    # linalg_solve_triangular(A, B, *, upper, left=True): A is n x n.
    n = a[-1]
    c = b[-1] if left else b[-2]
    return round(max(_batch(a), _batch(b)) * n * n * c)


def _triangular_solve(b, a, *args, out_shape=None, **kwargs) -> int:
    # triangular_solve(B, A): solves A X = B with A n x n, B n x c.
    return round(max(_batch(a), _batch(b)) * a[-1] ** 2 * b[-1])


def _cholesky_solve(b, l, *args, out_shape=None, **kwargs) -> int:
    return round(max(_batch(b), _batch(l)) * 2 * l[-1] ** 2 * b[-1])


def _lu_factor(a, *args, out_shape=None, **kwargs) -> int:
    m, n = a[-2], a[-1]
    k = min(m, n)
    return round(_batch(a) * (m * n * k - (m + n) * k**2 / 2 + k**3 / 3))


def _solve_ex(a, b, *args, left=True, out_shape=None, **kwargs) -> int:
    n = a[-1]
    c = (b[-1] if len(b) >= 2 and b[-2] == n else 1) if left else b[-2]
    return round(max(_batch(a), _batch(b) if len(b) >= 2 else 1) * (2 * n**3 / 3 + 2 * n * n * c))


LAPACK_FORMULAS: dict = {
    aten.geqrf: _geqrf,
    aten.ormqr: _ormqr,
    aten.linalg_householder_product: _householder_product,
    aten.linalg_qr: _linalg_qr,
    aten._linalg_eigh: _linalg_eigh,
    aten._linalg_svd: _linalg_svd,
    aten.linalg_cholesky_ex: _cholesky,
    aten.linalg_solve_triangular: _solve_triangular,
    aten.triangular_solve: _triangular_solve,
    aten.cholesky_solve: _cholesky_solve,
    aten.linalg_lu_factor_ex: _lu_factor,
    aten._linalg_solve_ex: _solve_ex,
}
"""aten op -> FLOP formula on shapes, for ``FlopCounterMode(custom_mapping=...)``."""

# Dense linear algebra with no formula here; seeing one is reported, not counted as 0.
_HEAVY = frozenset({
    "linalg_lstsq", "linalg_eig", "_linalg_eigvals", "linalg_inv_ex", "_linalg_det", "_linalg_slogdet",
    "linalg_matrix_exp", "linalg_ldl_factor_ex", "linalg_ldl_solve", "linalg_lu", "linalg_lu_solve",
    "lu_solve", "cholesky_inverse", "linalg_pinv", "_linalg_svd", "_linalg_eigh", "geqrf", "ormqr",
    "linalg_householder_product", "linalg_qr", "linalg_cholesky_ex", "linalg_solve_triangular",
    "triangular_solve", "cholesky_solve", "linalg_lu_factor_ex", "_linalg_solve_ex",
})


class _SeenOps(TorchDispatchMode):
    """Records every aten op packet dispatched, to find linear algebra without a formula."""

    def __init__(self):
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(func._overloadpacket)
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class FlopCount:
    """FLOPs counted while a call ran.

    Attributes:
        total: all counted FLOPs.
        by_op: aten op name -> FLOPs.
        uncounted: names of linear-algebra ops that ran but have no formula (their
            FLOPs are missing from ``total``).
    """

    total: int
    by_op: dict = field(default_factory=dict)
    uncounted: tuple[str, ...] = ()


def count_flops(fn: Callable[[], object], formulas: dict | None = None) -> FlopCount:
    """Run ``fn()`` once, at one thread, under FlopCounterMode with the LAPACK formulas."""
    from benchmarks.measure.timing import threads

    mapping = dict(LAPACK_FORMULAS if formulas is None else formulas)
    seen = _SeenOps()
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with threads(1), counter, seen:
        fn()
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    known = set(counter.flop_registry)
    uncounted = tuple(sorted(str(op) for op in seen.seen
                             if op not in known and str(op).removeprefix("aten.") in _HEAVY))
    return FlopCount(total=int(counter.get_total_flops()), by_op=by_op, uncounted=uncounted)
