r"""Analytic FLOP counts: LAPACK routines, FRAQ with each basis backend, the baselines.

The one analytic FLOP module of the project. One adapted weight matrix, oriented as in
the paper: d = min(m, n), D = max(m, n), stacked rank r, output rank p, s = min(d, r).
A multiply-add is 2 FLOPs. The counts keep each routine's leading term with its
constant, and the O(r^3) and O(r p) terms too, because those separate the backends:

======================  ====================================================================
piece                   FLOPs
======================  ====================================================================
GEMM a x b by b x c     2abc
Gram X^T X, X a x r     2 a r^2 as a GEMM (``gram="gemm"``, what the code runs), a r^2 with
                        a symmetry-aware SYRK (``gram="syrk"``, the paper's Table 5)
Householder QR a x r    4ark - 2(a + r)k^2 + 4k^3/3, k = min(a, r) (= 2ar^2 - 2r^3/3); LAWN 41
reflectors onto a x c   4ack - 2ck^2 (LAPACK ``ormqr``); LAWN 41
Q's first q columns     4aqk - 2(a + q)k^2 + 4k^3/3 (``orgqr``); LAWN 41
Cholesky n x n          n^3 / 3;  triangular solve with c right-hand sides: n^2 c; LAWN 41
symmetric eig n x n     ``syevd`` (divide and conquer): 14n^3/3 with vectors, 4n^3/3 of it
                        nominal; 4n^3/3 values only
SVD a x b, a >= b       ``gesdd`` on LAPACK's own path: thin 8ab^2 + 4b^3/3, or 6ab^2 + 8b^3
                        once a >= 11b/6 (QR first); 8b^3/3 of it nominal
======================  ====================================================================

**FRAQ** (:func:`fraq_flops`) is the pipeline around a backend (:func:`fraq.recompress`):
H = C Y (2 s r D), the Gram H H^T, the eigenproblem (14 s^3 / 3) and R_p = U_p^T H (2 p s D),
plus the backend's own cost, the basis of X and Q applied to U_p, which the backend
registry holds (:func:`fraq.backends.register_backend`'s ``flops``). With Householder and
a SYRK Gram this is the paper's :math:`(2d + 3D) r^2 + O((d + D) r p + r^3)`; the code's
GEMM Gram makes it :math:`(2d + 4D) r^2`. The **factored** variant (``factored=True``)
forms :math:`G = C (YY^\top) C^\top` and :math:`R_p = (U_p^\top C) Y` instead, so H never
exists: D enters through one Gram :math:`YY^\top` (D r^2 with SYRK) and R_p, i.e.
:math:`(2d + D) r^2` with Householder and :math:`(4d + D) r^2` with Cholesky-QR2.

**The path of a call** (:func:`cheapest_path`): :func:`fraq.recompress` picks, from
these counts at the call's (d, D, r), the Gram form of fewer FLOPs, and with r >= d
the **identity** basis Q = I_d, C = X (``identity=True``: no basis work at all). There
col(X) is all of R^d, every orthonormal basis of it is a d x d rotation of I_d, and the
coordinate space has s = min(d, r) = d dimensions whatever the backend (the paper's
Appendix, general rank): through H, H = X Y is the aggregate itself, formed once at
2 d r D, its Gram costs 2 d^2 D and the eigenproblem 14 d^3 / 3, linear in r or independent
of it. The factored form's r x r Gram :math:`YY^\top` grows as r^2: it costs more
than the product form once r is above about D / 2 (a square matrix: before r reaches
d), and for D >> d from about r = 1.25 d on (768 x 3072); the comparison finds each
crossing without a rule of its own.

**Models of a method** (:func:`fraq.aggregators.analytic_flops`): a method's FLOP model is its aggregator
class's ``flop_model`` (:class:`fraq.aggregators.Aggregator`), one of the functions here
(:func:`fraq_model`, :func:`florist_model`, :func:`flexlora_model`, :func:`florg_model`,
:func:`fedsvd_model`, :func:`fedmomentum_model`).
``model="table5"`` is the paper's Table 5 exactly (leading terms, SYRK Gram;
:func:`fraq_table5`, :func:`florist_table5`, :func:`flexlora_table5`); ``model="full"`` is
what the code runs, with the routines' constants and the lower-order terms (FRAQ from
:func:`fraq_flops`, FLoRIST's and FlexLoRA's SVDs at ``gesdd``'s counts). A method that
runs on FRAQ's kernel (``flexlora:kernel=fraq``, :mod:`fraq.aggregators._kernel`) is
counted as :func:`fraq.svd` runs (:func:`kernel_svd_flops`; ``analytic_flops(...,
kernel="fraq")``). :func:`fraq.aggregators.model_flops` sums either over a model's modules (Eq. 14).
peft's svd merge, which is no aggregator, has :func:`peft_svd_flops`.

Data-dependent work is not modelled: a Cholesky-QR2 fallback adds Householder's count for
that matrix, and Newton-Schulz's step count comes from its tolerance (pass ``steps``,
e.g. from ``result.info["steps"]``).

The routines' counts, the LAPACK paths torch takes and which part of them is nominal
(divide and conquer's data-dependent merges, counted without deflation) are
:mod:`fraq._routine_flops`'s.

References: the FRAQ paper, Appendix A.3 and Table 5; LAPACK Working Note 41 (LAWN 41);
Demmel, *Applied Numerical Linear Algebra* (SIAM 1997), Sec. 5.3.3.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

from fraq._routine_flops import (cholesky_flops, eigh_flops, gemm_flops, gram_flops, orgqr_flops, qr_flops,
                                 reflector_flops, svd_flops, trsm_flops)
from fraq.backends import REGISTRY
from fraq.backends.cholesky import cholesky_basis_flops
from fraq.backends.cholesky_qr import cholesky_qr2_flops
from fraq.backends.householder import householder_flops
from fraq.backends.newton_schulz import newton_schulz_flops
from fraq.backends.polar import polar_flops

__all__ = [
    "GRAMS",
    "MODELS",
    "gemm_flops",
    "gram_flops",
    "qr_flops",
    "reflector_flops",
    "orgqr_flops",
    "cholesky_flops",
    "trsm_flops",
    "eigh_flops",
    "florist_qr_flops",
    "svd_flops",
    "householder_flops",
    "polar_flops",
    "cholesky_qr2_flops",
    "cholesky_basis_flops",
    "newton_schulz_flops",
    "basis_flops",
    "coordinate_flops",
    "Path",
    "cheapest_path",
    "fraq_flops",
    "fraq_table5",
    "florist_table5",
    "flexlora_table5",
    "fraq_model",
    "florist_model",
    "flexlora_model",
    "kernel_svd_flops",
    "rsvd_dense_flops",
    "florg_model",
    "florg_flops",
    "fedsvd_model",
    "fedmomentum_model",
    "peft_svd_flops",
    "TABLE5_METHODS",
]

GRAMS = ("gemm", "syrk")
MODELS = ("table5", "full")
TABLE5_METHODS = ("flexlora", "florist", "fraq")
"""The methods the paper's Table 5 has a row for, each on its published path only: every other
method's, or kernel's, ``model="table5"`` is a ValueError."""


# The routines' counts live in fraq._routine_flops and each backend's model beside the
# backend (registered with it); both are re-exported here under their usual names.


# ------------------------------------------------------------------ FRAQ


def _check_dims(d, D, r, p, gram) -> None:
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


def _backend_cost(backend):
    if not isinstance(backend, str) or backend not in REGISTRY:
        raise ValueError(f"backend(={backend!r}) is not one of {sorted(REGISTRY)}")
    cost = REGISTRY[backend].flops
    if cost is None:
        raise ValueError(f"backend(={backend!r}) was registered without a FLOP model: pass "
                         "register_backend(..., flops=cost) with cost(d, r, p, *, steps, gram)")
    return cost


def basis_flops(d: int, r: int, p: int, backend: str = "householder", *, steps: int | None = None,
                gram: str = "gemm") -> float:
    """FLOPs of a backend's basis of X (d x r) plus applying Q to U_p (r x p)."""
    _check_dims(d, d, r, p, gram)
    return float(_backend_cost(backend)(d, r, p, steps=steps, gram=gram))


def coordinate_flops(d: int, D: int, r: int, p: int, *, gram: str = "gemm", factored: bool = False) -> float:
    """FLOPs of the pipeline around the basis: coordinates, Gram, eigenproblem and R_p.

    ``factored=False``: H = C Y, G = H H^T, R_p = U_p^T H (what :func:`fraq.recompress`
    runs by default). ``factored=True``: G = C (Y Y^T) C^T and R_p = (U_p^T C) Y.
    """
    _check_dims(d, D, r, p, gram)
    s = min(d, r)
    if factored:
        f = gram_flops(D, r, gram) + gemm_flops(s, r, r) + gemm_flops(s, r, s)
        f += gemm_flops(p, s, r) + gemm_flops(p, r, D)
    else:
        f = gemm_flops(s, r, D) + gram_flops(D, s, gram) + gemm_flops(p, s, D)
    return float(f + eigh_flops(s))


def fraq_flops(d: int, D: int, r: int, p: int, backend: str = "householder", *, steps: int | None = None,
               gram: str = "gemm", factored: bool = False, identity: bool = False) -> float:
    r"""Leading-order FLOPs of one FRAQ recompression of a d x D matrix, stacked rank r, output rank p.

    Args:
        d, D: min(m, n) and max(m, n) (d <= D).
        r: stacked rank; p: output rank, p <= min(d, r).
        backend: a registered backend (:data:`fraq.backends.REGISTRY`) with a FLOP model.
        steps: Newton-Schulz steps (required for the tolerance-driven Newton-Schulz
            backends; 5 for ``newton-schulz-muon``).
        gram: ``"gemm"`` counts the symmetric Gram products as the code runs them;
            ``"syrk"`` counts them at half, the paper's convention, so that
            ``fraq_flops(d, D, r, p, gram="syrk")`` is :math:`(2d + 3D) r^2` plus the
            O((d + D) r p + r^3) terms.
        factored: count the factored Gram variant (see the module docstring).
        identity: count the identity basis (r >= d only; see :func:`cheapest_path`):
            no basis of X and no Q to apply, whatever ``backend`` names.

    Returns:
        FLOPs as a float.

    Examples:
        The paper's (2d + 3D) r^2, plus the QR's -2 r^3 / 3 and the eigenproblem's 14 r^3 / 3:

        >>> round(fraq_flops(768, 3072, 64, 0, gram="syrk") - (2 * 768 + 3 * 3072) * 64**2)
        1048576
        >>> round((14 / 3 - 2 / 3) * 64**3)
        1048576
    """
    _check_dims(d, D, r, p, gram)
    if identity and r < d:
        raise ValueError(f"identity=True needs r >= d: the identity basis is exact only then, got r(={r}) < d(={d})")
    basis = 0.0 if identity else basis_flops(d, r, p, backend, steps=steps, gram=gram)
    return basis + coordinate_flops(d, D, r, p, gram=gram, factored=factored)


@dataclass(frozen=True)
class Path:
    """How :func:`fraq.recompress` computes one shape.

    Attributes:
        identity: the basis is I_d (C = X, no basis work); only ever with r >= d.
        factored: the Gram is formed factored, G = C (Y Y^T) C^T, rather than through H.
    """

    identity: bool
    factored: bool


def cheapest_path(d: int, D: int, r: int, p: int = 0, *, form: str = "auto") -> Path:
    """The path of least FLOPs for a d x D matrix (d <= D) of stacked rank r and output rank p.

    The identity basis whenever r >= d (it costs nothing, and any backend's basis there is
    a rotation of it); the Gram form of fewer FLOPs (:func:`coordinate_flops`, GEMM counts,
    ties to the product form, the more accurate one), unless ``form`` is ``"factored"``
    or ``"product"``. The basis cost is common to both forms, so the choice needs no
    backend. ``p`` enters through the O(p) terms of R_p only: pass 0 when the rank is
    chosen by the energy rule, before it is known.

    Examples:
        >>> cheapest_path(768, 768, 64)        # LoRA stacks: the factored Gram
        Path(identity=False, factored=True)
        >>> cheapest_path(768, 768, 600)       # r above D / 2: through H
        Path(identity=False, factored=False)
        >>> cheapest_path(768, 3072, 3072)     # r >= d: no basis, through H
        Path(identity=True, factored=False)
    """
    _check_dims(d, D, r, p, "gemm")
    if form not in ("auto", "factored", "product"):
        raise ValueError(f"form(={form!r}) must be one of ['auto', 'factored', 'product']")
    return _cheapest_path(d, D, r, p, form)


@functools.lru_cache(maxsize=1024)
def _cheapest_path(d: int, D: int, r: int, p: int, form: str) -> Path:
    """:func:`cheapest_path` on checked arguments, once per shape (a model's modules repeat a few shapes)."""
    identity = 0 < d <= r
    if form == "auto":
        factored = coordinate_flops(d, D, r, p, factored=True) < coordinate_flops(d, D, r, p, factored=False)
    else:
        factored = form == "factored"
    return Path(identity=identity, factored=factored)


# ------------------------------------------------------------------ the paper's Table 5 and the baselines


def fraq_table5(d: int, D: int, r: int, p: int) -> float:
    r"""FRAQ, Table 5: :math:`(2d + 3D) r^2` (r replaced by s = min(d, r) where the
    coordinate space is s-dimensional, Appendix A.2)."""
    s = min(d, r)
    return float(2 * d * r * s + 2 * D * r * s + D * s * s)


def florist_table5(d: int, D: int, r: int, p: int) -> float:
    r"""FLoRIST, Table 5: :math:`4(d + D) r^2 + 2(d + D) r p` (thin SVDs of both stacks)."""
    s = min(d, r)
    return float(4 * (d + D) * s * s + 2 * (d + D) * s * p)


def flexlora_table5(d: int, D: int, r: int, p: int) -> float:
    r"""FlexLoRA, Table 5: :math:`2dDr + 4Dd^2` (dense aggregate, economy SVD)."""
    return float(2 * d * D * r + 4 * D * d * d)


def _florist_full(d: int, D: int, r: int, p: int) -> float:
    # thin SVDs with vectors of the d x r and r x D stacks (gesdd's QR path, 6 a r^2 + 8 r^3 each; Table 5's
    # 4 a r^2 is the values-only cost), the r x r core product and its SVD, the two recovery products
    s = min(d, r)
    return float(svd_flops(d, s) + svd_flops(s, D) + 2 * s**3 + svd_flops(s, s) + 2 * (d + D) * s * p)


def _flexlora_full(d: int, D: int, r: int, p: int) -> float:
    return float(2 * d * D * r + svd_flops(D, d))


def fraq_model(d: int, D: int, r: int, p: int, *, model: str, backend: str = "householder",
               steps: int | None = None, factored: bool = False, identity: bool = False) -> float:
    """FRAQ's FLOP model (``Fraq.flop_model``): :func:`fraq_table5` or :func:`fraq_flops`
    (GEMM Gram, the backend and path given)."""
    if model == "table5":
        if backend != "householder":
            raise ValueError(f"Table 5 models the Householder backend only, not backend(={backend!r})")
        return fraq_table5(d, D, r, p)
    return fraq_flops(d, D, r, p, backend, steps=steps, gram="gemm", factored=factored, identity=identity)


def florist_model(d: int, D: int, r: int, p: int, *, model: str, kernel: str = "svd") -> float:
    """FLoRIST's FLOP model (``FLoRIST.flop_model``): Table 5's, or its SVDs at ``gesdd``'s counts.

    ``kernel="qr"`` (:func:`fraq.aggregators.florist.florist_qr_recompress`) counts the
    Householder bases of both stacks (the CPU default), the s x s core product, its SVD and
    each basis applied to the p kept columns (:func:`florist_qr_flops`). Table 5 has no row
    for it (a ValueError).
    """
    if kernel == "qr":
        if model == "table5":
            raise ValueError("Table 5 has no row for FLoRIST on the QR kernel (kernel='qr'); use model='full'")
        return florist_qr_flops(d, D, r, p)
    if kernel != "svd":
        raise ValueError(f"kernel(={kernel!r}) must be 'svd' or 'qr'")
    return florist_table5(d, D, r, p) if model == "table5" else _florist_full(d, D, r, p)


def florist_qr_flops(d: int, D: int, r: int, p: int) -> float:
    """FLoRIST on the QR kernel, one d x D module of stacked rank r cut at p: Householder
    bases of the d x r and D x r stacks with their reflectors applied to p columns
    (:func:`fraq.backends.householder.householder_flops` each), the s x s core product
    (s = min(d, r)) and its thin SVD with vectors."""
    s = min(d, r)
    p = min(p, s)
    return float(householder_flops(d, r, p) + householder_flops(D, r, p) + gemm_flops(s, r, s) + svd_flops(s, s))


def flexlora_model(d: int, D: int, r: int, p: int, *, model: str, kernel: str = "dense") -> float:
    """FlexLoRA's FLOP model (``FlexLoRA.flop_model``): Table 5's, or its SVD at ``gesdd``'s count.

    ``kernel="rsvd"`` counts the dense aggregate's GEMM and :func:`torch.svd_lowrank`
    (:func:`rsvd_dense_flops`). ``kernel="fraq"`` (:mod:`fraq.aggregators._kernel`) counts :func:`fraq.svd` at rank p
    (the largest client rank): :func:`fraq_flops` with Householder (the CPU default) on
    the path :func:`cheapest_path` picks, the D x p SVD of the long side and the d x p by
    p x p rotation. Table 5 has no row for it (a ValueError).
    """
    if kernel in ("fraq", "rsvd"):
        if model == "table5":
            raise ValueError(f"Table 5 has no row for FlexLoRA on the {kernel!r} kernel (kernel={kernel!r}); "
                             f"use model='full'")
        return kernel_svd_flops(d, D, r, p) if kernel == "fraq" else rsvd_dense_flops(d, D, r, p)
    if kernel != "dense":
        raise ValueError(f"kernel(={kernel!r}) must be 'dense', 'fraq' or 'rsvd'")
    return flexlora_table5(d, D, r, p) if model == "table5" else _flexlora_full(d, D, r, p)


def rsvd_dense_flops(d: int, D: int, r: int, p: int, *, oversample: int = 10, niter: int = 2) -> float:
    """FlexLoRA's rsvd kernel on a d x D module (d <= D) of stacked rank r at rank p: the
    GEMM forming the dense aggregate (2 d D r), then :func:`torch.svd_lowrank` with
    q = min(p + oversample, d, r): 2 + 2 niter products with the dense matrix (2 d D q
    each), 2 + 2 niter Householder QRs with explicit Q (alternately D x q and d x q), the
    thin SVD of the q x D projection and the rotation of Q."""
    q = min(p + oversample, d, r)
    if q == 0:
        return float(2 * d * D * r)
    qrs = (1 + niter) * (qr_flops(d, q) + orgqr_flops(d, q, q)) + niter * (qr_flops(D, q) + orgqr_flops(D, q, q))
    return float(2 * d * D * r + (2 + 2 * niter) * 2 * d * D * q + qrs + svd_flops(D, q) + gemm_flops(d, q, q))


def kernel_svd_flops(d: int, D: int, r: int, p: int) -> float:
    """:func:`fraq.svd` of a d x D aggregate (d <= D) of stacked rank r at rank p: the
    recompression (Householder, the path of :func:`cheapest_path`) plus the thin SVD of
    the D x p long side and its p x p rotation of the d x p short side."""
    s = min(d, r)
    p = min(p, s)
    path = cheapest_path(d, D, r, p)
    return fraq_flops(d, D, r, p, factored=path.factored, identity=path.identity) + \
        (svd_flops(D, p) + gemm_flops(d, p, p) if p > 0 else 0.0)




def _no_table5(method: str, model: str) -> None:
    if model == "table5":
        raise ValueError(f"Table 5 has no row for {method}; use model='full' (the methods with one: "
                         f"{list(TABLE5_METHODS)})")


def florg_flops(k: int, R: int, r: int, *, kernel: str = "eigh", aligned: bool = True) -> float:
    """FLoRG (:class:`fraq.aggregators.FLoRG`) on one module: k = min(m, n) the side its
    clients' A_k (r x k) share, R = K r the rows of the weighted stack S, r the output rank.

    - ``kernel="eigh"`` (as published): the k x k Gram S^T S (2 R k^2) and its eigenproblem
      (``syevd`` with vectors, 14 k^3 / 3): O(k^3) whatever the ranks;
    - ``kernel="gram"``: the R x R Gram S S^T (2 R^2 k), its eigenproblem (14 R^3 / 3) and
      the factor W_q^T S (2 q R k, q = min(r, R, k)): O(R^2 k + R^3).

    ``aligned`` (a round after the first, as Tables 1-3 time it): the Procrustes step,
    A_prev A~^T (2 r^2 k), its r x r SVD, U V^T (2 r^3) and that applied to A~ (2 r^2 k).
    The clamp, square roots and padding are elementwise (not counted, by either side)."""
    if kernel == "gram":
        q = min(r, R, k)
        f = gram_flops(k, R) + eigh_flops(R) + gemm_flops(q, R, k)
    elif kernel == "eigh":
        f = gram_flops(R, k) + eigh_flops(k)
    else:
        raise ValueError(f"kernel(={kernel!r}) must be 'eigh' or 'gram'")
    if aligned and r > 0:
        f += 2 * gemm_flops(r, k, r) + svd_flops(r, r, full_matrices=True) + gemm_flops(r, r, r)
    return float(f)


def florg_model(d: int, D: int, r: int, p: int, *, model: str, kernel: str = "eigh", aligned: bool = True) -> float:
    """FLoRG's FLOP model (``FLoRG.flop_model``), ``model="full"`` only (Table 5 has no FLoRG
    row): :func:`florg_flops` with k = d (its matrices are r x min(m, n)), R = r the stacked
    rank and the output rank p (the clients' rank)."""
    _no_table5("FLoRG", model)
    return florg_flops(d, r, p, kernel=kernel, aligned=aligned)


def fedsvd_model(d: int, D: int, r: int, p: int, *, model: str, kernel: str = "dense") -> float:
    """FedSVD's FLOP model (``FedSVD.flop_model``), ``model="full"`` only: the FedAvg factors
    B_g (d x p), A_g (p x D) have the clients' rank p, so the stacked rank r does not enter
    (the averaging is elementwise). ``kernel="dense"``: B_g A_g (2 d D p) and its thin SVD
    at ``gesdd``'s count; ``kernel="fraq"``: :func:`kernel_svd_flops` of the rank-p factors
    at rank p."""
    _no_table5("FedSVD", model)
    if kernel == "fraq":
        return kernel_svd_flops(d, D, p, p)
    if kernel != "dense":
        raise ValueError(f"kernel(={kernel!r}) must be 'dense' or 'fraq'")
    return float(gemm_flops(d, p, D) + svd_flops(D, d))


def fedmomentum_model(d: int, D: int, r: int, p: int, *, model: str, kernel: str = "dense") -> float:
    """FedMomentum's FLOP model (``FedMomentum.flop_model``), ``model="full"`` only: every
    triplet of the stacked aggregate (rank r) is decomposed before its energy rule cuts, so the
    output rank p does not enter. ``kernel="dense"``: the aggregate's GEMM (2 d D r) and its
    thin SVD; ``kernel="fraq"``: :func:`kernel_svd_flops` at rank s = min(d, r)."""
    _no_table5("FedMomentum", model)
    if kernel == "fraq":
        return kernel_svd_flops(d, D, r, min(d, r))
    if kernel != "dense":
        raise ValueError(f"kernel(={kernel!r}) must be 'dense' or 'fraq'")
    return float(gemm_flops(d, r, D) + svd_flops(D, d))


def peft_svd_flops(m: int, n: int, r: int, p: int, *, full_matrices: bool = True) -> float:
    """peft's svd merge (``add_weighted_adapter(..., combination_type="svd")``, peft 0.21) of
    one m x n module: each client's dense delta B_k A_k (2 m n r_k, summing to 2 m n r over
    the stacked rank r), their weighted sum (elementwise), ``torch.linalg.svd`` of the m x n
    sum (``gesdd``; ``full_matrices=True`` is peft's default, False its thin variant
    ``svd_full_matrices=False``) and U_p diag(S_p) (2 m p^2, a GEMM). The orientation is
    peft's: m the output side (``lora_B``'s rows), where U lives; only that last GEMM depends
    on it. A per-module rank (``rank_pattern``) asks peft for the largest p and slices: pass
    that p."""
    for name, v in (("m", m), ("n", n), ("r", r), ("p", p)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"{name}(={v!r}) must be an int >= 0")
    if p > min(m, n):
        raise ValueError(f"p(={p}) must be <= min(m, n)(={min(m, n)})")
    return float(gemm_flops(m, r, n) + svd_flops(m, n, full_matrices=full_matrices) + gemm_flops(m, p, p))
