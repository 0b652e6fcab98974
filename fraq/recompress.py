"""Coordinate-space recompression of a stacked aggregate (the paper's Section 3.3)."""

from __future__ import annotations

import torch

from fraq._parallel import batch_map
from fraq._validation import check_finite, check_pair, check_rank, check_tau, compute_dtype
from fraq.backends import get_backend
from fraq.backends.factored_gram import factored_gram, factored_rows
from fraq.result import RecompressResult

__all__ = ["recompress", "select_rank", "noise_floor"]


def recompress(
    B: torch.Tensor,
    A: torch.Tensor,
    *,
    tau: float | None = None,
    rank: int | None = None,
    backend: str = "householder",
    eig_dtype: torch.dtype | None = None,
    gram: str = "product",
) -> RecompressResult:
    r"""Best rank-p adapter of the aggregate ``B @ A``, without forming the m x n matrix.

    With d = min(m, n), D = max(m, n) and r the stacked rank, the product is oriented
    along the smaller side (Eq. 9), :math:`M = XY` with X (d x r) and Y (r x D). Then

    .. math::
        X = QC \;(\text{reduced Householder QR}),\quad H = CY,\quad
        G = HH^\top = U \Lambda U^\top,\quad
        L_p = QU_p,\quad R_p = U_p^\top H,

    and :math:`L_p R_p` is a best rank-p approximation of M (Proposition 1 and
    Eckart-Young). Q is never formed: ``L_p`` is obtained by applying the stored
    reflectors to the zero-padded U_p. When m > n the factors are transposed back, so
    the result always has the LoRA orientation ``B`` (m x p), ``A`` (p x n).

    The rank is either fixed (``rank=p``) or chosen by the energy rule (Eq. 11): the
    smallest p whose leading eigenvalues hold at least ``tau`` of the total. Eigenvalues
    below the Gram's noise floor, ``s * eps * lambda_1`` with s = min(d, r), are taken as
    exact zeros: they are rounding noise of the squared spectrum, not directions of the
    aggregate, so ``tau=1`` keeps the numerical rank (duplicate clients give half the
    stacked rank) and reproduces the aggregate, and an all-zero aggregate (every client's
    B still at LoRA's zero initialization) gives rank 0.

    Batched input (*, m, r) / (*, r, n) runs as one batch of kernels. Each matrix gets its
    own rank: ``rank`` is then an int64 tensor of the batch shape and ``B``/``A`` are
    padded with exact zeros to the largest rank in the batch.

    Scaling and bad values: the Gram matrix squares the spectrum, so it is checked after
    it is formed (r x r, free). When it is out of the range the eigensolver needs, the
    factors are checked for NaN/Inf (a ValueError naming the factor and index) and
    otherwise the coordinates are recomputed with an exact power-of-two scale on the
    small r x r factor, put back on the singular-value side at the end. Factors with
    entries from 1e-20 to 1e18 in float32 therefore neither underflow nor overflow, and
    well-scaled inputs pay no extra pass over the factors.

    Precision: float32 and float64 compute in their own dtype; float16 and bfloat16
    compute in float32 and ``B``/``A`` are cast back to the input dtype (spectrum and
    energy stay in float32). The r x r eigenproblem runs in ``eig_dtype``, float64 by
    default whatever the input dtype. The Gram is formed in the compute dtype, but its
    rounding errors are mostly relative to its entries, which are graded like the
    spectrum; a float32 eigensolver adds a normwise error eps * lambda_1 that blurs every
    direction below sqrt(eps) * sigma_1, a float64 one does not.
    ``python -m benchmarks.experiments.eig_precision`` measured, for float32 inputs of rank 64
    and condition number 1e6 / 1e8 / 1e10 cut at rank 32, a product error above the
    float64 optimum of 3.7e-6 / 1.4e-5 / 2.1e-6 with a float32 eigensolver and
    6.9e-12 / 5.0e-11 / 3.3e-10 with a float64 one (LoRA-like stacks: 3.8e-12 vs 8.5e-13),
    for about 0.3 ms more per 80 x 80 Gram on one CPU thread (eigh of 36 such matrices:
    15 ms in float32, 27 ms in float64).

    Args:
        B: (*, m, r) stacked B factor, e.g. from :func:`fraq.stack`.
        A: (*, r, n) stacked A factor.
        tau: energy threshold in (0, 1]. Exactly one of ``tau`` and ``rank``.
        rank: fixed output rank p, 1 <= p <= min(d, r).
        backend: name of the basis backend (:data:`fraq.backends.BACKENDS`).
        eig_dtype: dtype of the r x r eigenproblem; default float64 (see Precision).
        gram: ``"product"`` (the paper's steps: H = C Y, G = H H^T, R_p = U_p^T H) or
            ``"factored"`` (G = C (Y Y^T) C^T and R_p = (U_p^T C) Y, so H is never
            formed: (2d + D) r^2 instead of (2d + 3D) r^2 leading-order flops, but the
            Gram's rounding scales with ||C||^2 ||Y||^2 instead of ||C Y||^2, so it loses
            accuracy when clients' updates cancel; see
            :mod:`fraq.backends.factored_gram`).

    Returns:
        :class:`fraq.RecompressResult`.

    Flops, leading order per matrix (Eq. 12, Gram by a general GEMM here):
    2 d r^2 (QR) + 2 D r^2 (H) + 2 D r^2 (G) + O(r^3) + 4 d r p + 2 D r p.

    References: the FRAQ paper (``shared/paper/fraq-paper.tex``), Eckart and Young (1936),
    doi:10.1007/BF02288367.
    """
    check_pair(B, A)
    if (tau is None) == (rank is None):
        raise ValueError(f"pass exactly one of tau and rank, got tau={tau!r}, rank={rank!r}")
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    s = min(m, n, r)
    if tau is not None:
        tau = check_tau(tau)
    else:
        rank = check_rank(rank, s)
    basis_fn = get_backend(backend)
    if gram not in ("product", "factored"):
        raise ValueError(f"gram(={gram!r}) must be 'product' or 'factored'")
    if eig_dtype is not None and (not isinstance(eig_dtype, torch.dtype) or not eig_dtype.is_floating_point):
        raise TypeError(f"eig_dtype(={eig_dtype!r}) must be a floating torch.dtype")
    return _recompress_impl(B, A, tau, rank, backend, basis_fn, eig_dtype, gram == "factored")


def noise_floor(lam_max: torch.Tensor, s: int, dtype: torch.dtype) -> torch.Tensor:
    """Eigenvalues of the Gram at or below this are rounding noise (see :func:`recompress`)."""
    return lam_max * (max(s, 1) * torch.finfo(dtype).eps)


def select_rank(lam: torch.Tensor, tau: float) -> torch.Tensor:
    """Energy rule (Eq. 11) on descending non-negative eigenvalues ``lam`` (*, s).

    Returns the smallest p with sum_{i<=p} lam_i >= tau * sum_i lam_i, as int64 (*),
    and 0 where every eigenvalue is zero. The total is the last entry of the same
    cumulative sum, so at tau = 1 the rule stops exactly at the last nonzero eigenvalue.
    """
    return _rank_from_cumsum(torch.cumsum(lam, dim=-1), tau)


def _rank_from_cumsum(cums: torch.Tensor, tau: float) -> torch.Tensor:
    """The energy rule on the cumulative eigenvalue sums (*, s) (see :func:`select_rank`)."""
    total = cums[..., -1:]
    p = (cums < tau * total).sum(dim=-1) + 1
    return torch.where(total[..., 0] > 0, p, torch.zeros_like(p))


def _pow2_exponent(t: torch.Tensor) -> torch.Tensor:
    """Exponent e per matrix with max|t| = f * 2^e, 0.5 <= f < 1 (0 for a zero matrix)."""
    return torch.frexp(_amax(t)).exponent


def _amax(t: torch.Tensor) -> torch.Tensor:
    """max |t| per matrix (NaN if t holds a NaN); faster than an inf-norm reduction."""
    return t.abs().amax(dim=(-2, -1))


def _gram_in_range(G: torch.Tensor, C: torch.Tensor) -> bool:
    """True when G is finite and far enough from under/overflow for the eigensolver.

    The lower bound keeps the eigenvalues down to the noise floor (eps * lambda_1)
    normal numbers; the upper bound keeps their cumulative sum finite. A zero G with a
    nonzero C may be an underflow rather than a zero aggregate, so it is out of range too.
    """
    fi = torch.finfo(G.dtype)
    amax = _amax(G)
    if not bool(torch.isfinite(amax).all()):
        return False
    cmax = _amax(C)
    zero = amax == 0
    if bool((zero & (cmax > 0)).any()):
        return False
    ok = zero | ((amax >= fi.tiny / fi.eps**2) & (amax <= fi.max * fi.eps))
    return bool(ok.all())


def _coordinates(B, A, Y, C, factored):
    """The Gram G of the coordinates H = C Y, rescaled by a power of two if it would under/overflow.

    Returns (H, G, C_used, e) with M = 2^e Q C_used Y; H is None when ``factored``
    (G = C (Y Y^T) C^T). The fast path adds no pass over the factors: the Gram is
    checked after the fact. Only when it is out of range are the factors checked for
    NaN/Inf (named error) or, if finite, their magnitudes measured and C scaled so that
    C Y has entries of order 1. The scale goes on C (s x r), never on the large factors,
    and is a power of two, so it is exact.
    """

    def form(Cs):
        if factored:
            return None, factored_gram(Cs, Y)
        H = torch.matmul(Cs, Y)
        return H, torch.matmul(H, H.mT)

    H, G = form(C)
    if _gram_in_range(G, C):
        return H, G, C, None
    check_finite("B", B)
    check_finite("A", A)
    e = _pow2_exponent(C) + _pow2_exponent(Y)
    Cs = torch.ldexp(C, -e.view(-1, 1, 1).to(C.dtype))
    H, G = form(Cs)
    return H, G, Cs, e


def _recompress_impl(B, A, tau, rank, backend_name, basis_fn, eig_dtype, factored=False):
    out_dtype = B.dtype
    cdt = compute_dtype(out_dtype)
    edt = eig_dtype or torch.float64
    batch = B.shape[:-2]
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    transposed = m > n
    d, D = (n, m) if transposed else (m, n)
    s = min(d, r)

    # Orient along the smaller side (Eq. 9) and flatten the batch to one dimension.
    X, Y = (A.mT, B.mT) if transposed else (B, A)
    X = X.reshape(-1, d, r).to(cdt)
    Y = Y.reshape(-1, r, D).to(cdt)
    nb = X.shape[0]

    if s == 0 or nb == 0:
        return _empty_result(batch, m, n, s, cdt, out_dtype, tau, rank, backend_name, transposed, B.device)

    basis = basis_fn(X)
    H, G, Cu, e = _coordinates(B, A, Y, basis.C, factored)  # M = 2^e Q Cu Y
    lam, U = batch_map(torch.linalg.eigh, G.to(edt))
    lam = lam.flip(-1)
    U = U.flip(-1)
    floor = noise_floor(lam[..., :1], s, cdt)
    lam = torch.where(lam > floor, lam, torch.zeros_like(lam))

    cums = torch.cumsum(lam, dim=-1)
    if tau is not None:
        p = _rank_from_cumsum(cums, tau)
    else:
        p = torch.full((nb,), rank, dtype=torch.int64, device=lam.device)
    pmax = int(p.max().item())

    Up = U[..., :pmax].to(cdt)
    if tau is not None and pmax > 0:
        keep = torch.arange(pmax, device=p.device) < p.unsqueeze(-1)  # (nb, pmax)
        Up = Up * keep.unsqueeze(-2).to(cdt)
    L = basis.apply(Up)  # (nb, d, pmax), orthonormal columns
    Rp = factored_rows(Up, Cu, Y) if H is None else torch.matmul(Up.mT, H)  # (nb, pmax, D)
    if e is not None:
        Rp = torch.ldexp(Rp, e.view(-1, 1, 1).to(cdt))

    if transposed:
        Bg, Ag = Rp.mT, L.mT
    else:
        Bg, Ag = L, Rp
    Bg = Bg.reshape(*batch, m, pmax).to(out_dtype)
    Ag = Ag.reshape(*batch, pmax, n).to(out_dtype)

    total = cums[..., -1]
    kept = torch.gather(cums, -1, (p - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1)
    kept = torch.where(p > 0, kept, torch.zeros_like(kept))
    energy = torch.where(total > 0, kept / torch.where(total > 0, total, 1), torch.ones_like(total))
    sv = lam.to(cdt).sqrt()
    if e is not None:
        sv = torch.ldexp(sv, e.view(-1, 1).to(cdt))
    sv = sv.reshape(*batch, s)

    if len(batch) == 0:
        rank_out, energy_out = int(p[0].item()), float(energy[0].item())
    else:
        rank_out, energy_out = p.reshape(batch), energy.to(cdt).reshape(batch)
    return RecompressResult(
        B=Bg, A=Ag, rank=rank_out, energy=energy_out, singular_values=sv, tau=tau,
        backend=backend_name, transposed=transposed, info=dict(basis.info),
    )


def _empty_result(batch, m, n, s, cdt, out_dtype, tau, rank, backend_name, transposed, device):
    """No directions at all (r = 0, or an empty batch): a rank-0 adapter."""
    p = 0 if rank is None else rank
    B = torch.zeros(*batch, m, p, dtype=out_dtype, device=device)
    A = torch.zeros(*batch, p, n, dtype=out_dtype, device=device)
    sv = torch.zeros(*batch, s, dtype=cdt, device=device)
    if len(batch) == 0:
        rank_out, energy = p, 1.0
    else:
        rank_out = torch.full(batch, p, dtype=torch.int64, device=device)
        energy = torch.ones(batch, dtype=cdt, device=device)
    return RecompressResult(B=B, A=A, rank=rank_out, energy=energy, singular_values=sv, tau=tau,
                            backend=backend_name, transposed=transposed)
