r"""FLOPs two ways: counted from the operators a call runs, and the paper's analytic model.

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
_linalg_eigh (eigh, eigvalsh)  9 n^3 with vectors, 4 n^3 / 3 values only            GVL 8.3
_linalg_svd (svd, svdvals)     min(Golub-Reinsch, R-SVD) of GVL Fig. 8.6.1, a>=b:   GVL 8.6
                               values 4ab^2-4b^3/3 | 2ab^2+2b^3;
                               thin U,V 14ab^2+8b^3 | 6ab^2+20b^3;
                               full U,V 4a^2b+8ab^2+9b^3 | 4a^2b+22b^3
linalg_cholesky_ex             n^3 / 3                                              GVL 4.2
linalg_solve_triangular,       n^2 c (n x n triangle, c right-hand sides)           GVL 3.1
triangular_solve
cholesky_solve                 2 n^2 c                                              GVL 4.2
linalg_lu_factor_ex            m n k - (m + n)k^2/2 + k^3/3 (= 2n^3/3 square)       GVL 3.2
_linalg_solve_ex               2n^3/3 + 2 n^2 c                                     GVL 3.2
=============================  ===================================================  ==========

A multiply-add is 2 FLOPs, as in FlopCounterMode's ``mm`` (2mnk). Batched inputs multiply
by the batch size. LAPACK's own choice of algorithm (divide and conquer in ``syevd`` and
``gesdd``) changes the constants on the r^3 terms, never the d r^2 and D r^2 terms the
paper's model keeps. Elementwise work (scaling, masking, copies) is not counted, by either
the counter or the model. Operators that look like linear algebra but have no formula
here are reported in :attr:`FlopCount.uncounted`, so a zero is never silent.

Dispatch modes are per thread, so the call is counted at one torch thread: work that
``fraq._parallel.batch_map`` would fan out to Python threads then runs on the calling
thread, with the same FLOPs. Under any dispatch mode, ``eigvalsh`` and ``svdvals`` ask LAPACK for the vectors too (torch
cannot rule out a backward pass through a mode), so they run, and are counted, at the
with-vectors cost while the counter is active.

**Analytic.** The leading-order model of the paper's Appendix A.3 (Table 5), per module,
and summed over a model's modules (Eq. 14): :func:`analytic_flops` with ``model="table5"``
is the table exactly; ``model="full"`` keeps the same pipelines with the constants of the
routines the code calls and the lower-order terms, taking FRAQ and its backends from the
project's :mod:`fraq.flops` (and FLoRIST and FlexLoRA, which it does not cover, from here).
Counted and ``full`` agree to the r^3 constants; ``table5`` differs from them by the Gram
convention (SYRK there, GEMM in the code: 3D r^2 against 4D r^2) and the SVD constants
(the paper's 4 a r^2 thin SVD is GVL's values-only count; with singular vectors the
R-SVD costs 6 a r^2).

References: Golub and Van Loan, *Matrix Computations*, 4th ed. (GVL); LAPACK Working
Note 41 (LAWN 41), "Installation guide", operation counts table; the FRAQ paper,
Appendix A.3 and Table 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

__all__ = [
    "FlopCount",
    "LAPACK_FORMULAS",
    "count_flops",
    "geqrf_flops",
    "ormqr_flops",
    "orgqr_flops",
    "eigh_flops",
    "svd_flops",
    "analytic_flops",
    "model_flops",
    "MODELS",
    "fraq_table5",
    "florist_table5",
    "flexlora_table5",
]

aten = torch.ops.aten


# ---------------------------------------------------------------- per-routine counts


def geqrf_flops(m: int, n: int) -> float:
    """Householder QR of an m x n matrix: 2mn^2 - 2n^3/3 when m >= n (LAWN 41)."""
    k = min(m, n)
    return 4 * m * n * k - 2 * (m + n) * k**2 + 4 * k**3 / 3


def ormqr_flops(m: int, c: int, k: int) -> float:
    """Apply Q (m x m, k reflectors) to an m x c matrix: 4mck - 2ck^2 (LAWN 41)."""
    return 4 * m * c * k - 2 * c * k**2


def orgqr_flops(m: int, q: int, k: int) -> float:
    """Form the first q columns of Q (m x m, k reflectors): 4mqk - 2(m+q)k^2 + 4k^3/3."""
    return 4 * m * q * k - 2 * (m + q) * k**2 + 4 * k**3 / 3


def eigh_flops(n: int, vectors: bool = True) -> float:
    """Symmetric eigendecomposition: 9n^3 with eigenvectors, 4n^3/3 values only (GVL 8.3)."""
    return 9 * n**3 if vectors else 4 * n**3 / 3


def svd_flops(m: int, n: int, compute_uv: bool = True, full_matrices: bool = False) -> float:
    """SVD of an m x n matrix, the cheaper of Golub-Reinsch and R-SVD (GVL Fig. 8.6.1).

    LAPACK's ``gesdd`` makes the same choice: it starts with a QR when the matrix is
    tall enough, which is the R-SVD.
    """
    a, b = max(m, n), min(m, n)
    if not compute_uv:
        return min(4 * a * b**2 - 4 * b**3 / 3, 2 * a * b**2 + 2 * b**3)
    if full_matrices:
        return min(4 * a**2 * b + 8 * a * b**2 + 9 * b**3, 4 * a**2 * b + 22 * b**3)
    return min(14 * a * b**2 + 8 * b**3, 6 * a * b**2 + 20 * b**3)


def _batch(shape) -> int:
    return math.prod(shape[:-2])


# ------------------------------------------------- FlopCounterMode formulas (shapes in)
# FlopCounterMode calls each formula with the op's arguments, tensors replaced by their
# shapes, and out_shape= the output's shape(s).


def _geqrf(a, *args, out_shape=None, **kwargs) -> int:
    return int(_batch(a) * geqrf_flops(a[-2], a[-1]))


def _ormqr(a, tau, other, left=True, transpose=False, *args, out_shape=None, **kwargs) -> int:
    k = tau[-1]
    m, c = (other[-2], other[-1]) if left else (other[-1], other[-2])
    return int(_batch(other) * ormqr_flops(m, c, k))


def _householder_product(a, tau, *args, out_shape=None, **kwargs) -> int:
    return int(_batch(a) * orgqr_flops(a[-2], a[-1], tau[-1]))


def _linalg_qr(a, mode="reduced", *args, out_shape=None, **kwargs) -> int:
    m, n = a[-2], a[-1]
    k = min(m, n)
    f = geqrf_flops(m, n)
    if mode == "reduced":
        f += orgqr_flops(m, k, k)
    elif mode == "complete":
        f += orgqr_flops(m, m, k)
    return int(_batch(a) * f)


def _linalg_eigh(a, uplo="L", compute_v=True, *args, out_shape=None, **kwargs) -> int:
    return int(_batch(a) * eigh_flops(a[-1], vectors=compute_v))


def _linalg_svd(a, full_matrices=False, compute_uv=True, *args, out_shape=None, **kwargs) -> int:
    return int(_batch(a) * svd_flops(a[-2], a[-1], compute_uv=compute_uv, full_matrices=full_matrices))


def _cholesky(a, *args, out_shape=None, **kwargs) -> int:
    return int(_batch(a) * a[-1] ** 3 / 3)


def _solve_triangular(a, b, *args, upper=None, left=True, unitriangular=False, out_shape=None, **kwargs) -> int:
    # linalg_solve_triangular(A, B, *, upper, left=True): A is n x n.
    n = a[-1]
    c = b[-1] if left else b[-2]
    return int(max(_batch(a), _batch(b)) * n * n * c)


def _triangular_solve(b, a, *args, out_shape=None, **kwargs) -> int:
    # triangular_solve(B, A): solves A X = B with A n x n, B n x c.
    return int(max(_batch(a), _batch(b)) * a[-1] ** 2 * b[-1])


def _cholesky_solve(b, l, *args, out_shape=None, **kwargs) -> int:
    return int(max(_batch(b), _batch(l)) * 2 * l[-1] ** 2 * b[-1])


def _lu_factor(a, *args, out_shape=None, **kwargs) -> int:
    m, n = a[-2], a[-1]
    k = min(m, n)
    return int(_batch(a) * (m * n * k - (m + n) * k**2 / 2 + k**3 / 3))


def _solve_ex(a, b, *args, left=True, out_shape=None, **kwargs) -> int:
    n = a[-1]
    c = (b[-1] if len(b) >= 2 and b[-2] == n else 1) if left else b[-2]
    return int(max(_batch(a), _batch(b) if len(b) >= 2 else 1) * (2 * n**3 / 3 + 2 * n * n * c))


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
    from fraq.measure.timing import threads

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


# ---------------------------------------------------------------- analytic model


def fraq_table5(d: int, D: int, r: int, p: int, *, gram: str = "syrk", lower: bool = False) -> float:
    r"""FRAQ, Table 5: :math:`(2d + 3D) r^2`; ``gram="gemm"`` gives :math:`(2d + 4D) r^2`.

    With ``lower=True`` the O() terms are added with the constants of what the code runs:
    -2r^3/3 (QR), 9 r^3 (eigh), 4drp - 2r^2 p (reflectors onto U_p), 2Drp (U_p^T H).
    General rank r > d (Appendix A.2): r is replaced by s = min(d, r) where the
    coordinate space is s-dimensional.
    """
    if gram not in ("syrk", "gemm"):
        raise ValueError(f"gram(={gram!r}) must be 'syrk' or 'gemm'")
    s = min(d, r)
    g = 1 if gram == "syrk" else 2
    f = 2 * d * r * s + 2 * D * r * s + g * D * s * s
    if lower:
        f += -2 * s**3 / 3 + 9 * s**3 + 4 * d * s * p - 2 * s * s * p + 2 * D * s * p
    return float(f)


def florist_table5(d: int, D: int, r: int, p: int, *, lower: bool = False) -> float:
    r"""FLoRIST, Table 5: :math:`4(d + D) r^2 + 2(d + D) r p` (thin SVDs of both stacks).

    ``lower=True`` counts what the method runs, with the routines' constants: thin SVDs
    with vectors of the d x r and r x D stacks (GVL's R-SVD, 6 a r^2 + 20 r^3 each; Table 5's
    4 a r^2 is the values-only cost), the r x r core product (2 r^3) and its SVD (22 r^3),
    and the two recovery products 2 (d + D) r p.
    """
    s = min(d, r)
    if lower:
        return float(svd_flops(d, s) + svd_flops(s, D) + 2 * s**3 + svd_flops(s, s) + 2 * (d + D) * s * p)
    return float(4 * (d + D) * s * s + 2 * (d + D) * s * p)


def flexlora_table5(d: int, D: int, r: int, p: int, *, lower: bool = False) -> float:
    r"""FlexLoRA, Table 5: :math:`2dDr + 4Dd^2` (dense aggregate, economy SVD).

    ``lower=True`` counts the economy SVD with singular vectors at GVL's cost (the cheaper
    of Golub-Reinsch 14Dd^2 + 8d^3 and R-SVD 6Dd^2 + 20d^3) instead of 4Dd^2.
    """
    f = 2 * d * D * r + (svd_flops(D, d) if lower else 4 * D * d * d)
    return float(f)


_TABLE5 = {"fraq": fraq_table5, "florist": florist_table5, "flexlora": flexlora_table5}
MODELS = ("table5", "full")


def analytic_flops(method: str, d: int, D: int, r: int, p: int, *, backend: str = "householder",
                   model: str = "full", steps: int | None = None) -> float:
    """Analytic FLOPs of one d x D module with stacked rank r and output rank p.

    Args:
        method: ``fraq``, ``florist`` or ``flexlora``.
        backend: FRAQ's basis backend (``model="full"`` only).
        model: ``"table5"``, the paper's leading-order formulas exactly (FRAQ with a SYRK
            Gram, (2d + 3D) r^2); ``"full"``, the same pipelines with the constants of what
            the code runs and the lower-order terms: FRAQ from :func:`fraq.flops.fraq_flops`
            (GEMM Gram, every backend; Table 5 with ``gram="gemm", lower=True`` where that
            module is absent), FLoRIST and FlexLoRA with their SVDs at GVL's counts.
        steps: Newton-Schulz step count, for those backends.

    Shapes are oriented here: d and D may come in either order.
    """
    if model not in MODELS:
        raise ValueError(f"model(={model!r}) must be one of {MODELS}")
    if method not in _TABLE5:
        raise ValueError(f"method(={method!r}) is not one of {sorted(_TABLE5)}")
    d, D = min(d, D), max(d, D)
    if model == "table5":
        if method == "fraq" and backend != "householder":
            raise ValueError(f"Table 5 models the Householder backend only, not backend(={backend!r})")
        return fraq_table5(d, D, r, p) if method == "fraq" else _TABLE5[method](d, D, r, p)
    if method == "fraq":
        project = _project_model()
        if project is not None and hasattr(project, "fraq_flops"):
            return float(project.fraq_flops(d, D, r, p, backend, steps=steps, gram="gemm"))
        if backend != "householder":
            raise NotImplementedError(f"no analytic FLOP model for backend(={backend!r}): fraq.flops is absent")
        return fraq_table5(d, D, r, p, gram="gemm", lower=True)
    return _TABLE5[method](d, D, r, p, lower=True)


def _project_model():
    """The project's analytic module :mod:`fraq.flops` if it exists, else None."""
    try:
        from fraq import flops as project
    except ImportError:
        return None
    return project


def model_flops(modules: Iterable[tuple[int, int, int]], method: str, r: int,
                ranks: Iterable[int] | int, **kwargs) -> float:
    """Eq. 14: the sum of per-module FLOPs over a model.

    Args:
        modules: (m, n, count) per group of equal-shape modules, e.g.
            ``[(g.m, g.n, g.count) for g in preset.groups]``.
        method, kwargs: as :func:`analytic_flops`.
        r: stacked rank (sum of the clients' ranks).
        ranks: output rank p of each module (one int for all, or one per module in the
            order the groups list them).
    """
    modules = list(modules)
    total_modules = sum(c for _, _, c in modules)
    ps = [ranks] * total_modules if isinstance(ranks, int) else [int(x) for x in ranks]
    if len(ps) != total_modules:
        raise ValueError(f"ranks has {len(ps)} entries for {total_modules} modules")
    out, i = 0.0, 0
    for m, n, count in modules:
        for _ in range(count):
            out += analytic_flops(method, m, n, r, ps[i], **kwargs)
            i += 1
    return out
