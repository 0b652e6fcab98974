"""Coordinate-space recompression of a stacked aggregate (the paper's Section 3.3)."""

from __future__ import annotations

import math

import torch

from fraq._orient import orient, unorient
from fraq._parallel import batch_map, map_chunks, one_thread
from fraq._range import amax, exponent, scale_pow2
from fraq._validation import check_eig_dtype, check_finite, check_pair, check_rank, check_tau, compute_dtype
from fraq.backends import get_backend, resolve_backend
from fraq.backends.factored_gram import factored_gram_parts, factored_rows
from fraq.result import RecompressResult

__all__ = ["recompress", "select_rank", "noise_floor", "GRAMS"]

GRAMS = ("auto", "product", "factored")
"""Values of ``recompress(gram=...)``: ``"auto"`` (default) is factored unless clients cancel."""

CANCEL_LIMIT = 2.0
"""``gram="auto"`` forms the Gram factored while rho_F^2 <= CANCEL_LIMIT * s (see
:func:`_cancels`): generic LoRA stacks sit at about s / 2, a factor 4 below."""


def recompress(
    B: torch.Tensor,
    A: torch.Tensor,
    *,
    tau: float | None = None,
    rank: int | None = None,
    backend: str = "auto",
    eig_dtype: torch.dtype | None = None,
    gram: str = "auto",
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

    Range, scaling and bad values. Guaranteed: any finite ``B`` and ``A`` (subnormal
    entries included) whose aggregate's largest singular value sigma_1 lies in
    [tiny, max / 2] of the result's dtype (float32: 1.2e-38 to 1.7e38; float64: 2.2e-308
    to 9.0e307; float16: 6.1e-5 to 32752) give a result as accurate as the same factors
    at unit scale. Outside that range the factor carrying the singular values would be
    subnormal (fewer digits than eps promises) or infinite, so a ValueError gives sigma_1
    and max|B|, max|A| instead; a zero aggregate is not an underflow and gives rank 0.
    How: the squared quantities are only ever looked at in their small forms. After
    the basis, C (s x r), the Gram G (s x s) and, for ``gram="factored"``, Y Y^T
    (r x r) are range-checked per matrix (G in the narrower of the compute and
    eigensolver dtypes); the verdict, the largest rank and sigma_1's range are read in
    the call's single host synchronization, so well-scaled input pays no extra pass
    over the factors. A matrix that fails is recomputed (slow path) after its factors
    are checked for NaN/Inf (a ValueError naming the factor and index) and each of
    X and Y is scaled by an exact power of two, 2^-e_X and 2^-e_Y, that brings its
    largest entry into [0.5, 1); the scale 2^(e_X + e_Y) is put back on the
    singular-value side at the end, so the orthonormal factor stays orthonormal.
    Scaling both factors (not only C) is what covers a product X Y (or Y Y^T) that
    under- or overflows although each factor is representable.

    Empty problems: with r, m or n zero (s = 0) the aggregate is the zero matrix, and
    its best approximation of any rank is itself, of rank 0, in both modes (zero-width
    factors, energy 1). An empty batch keeps the requested width in fixed-rank mode.

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
        rank: fixed output rank p, 1 <= p <= min(d, r) (any p >= 1 when min(d, r) = 0).
            An int, or a 0-dimensional integer tensor (a bool is refused).
        backend: name of the basis backend (:data:`fraq.backends.BACKENDS`), or ``"auto"``
            (the default): the device's default, ``householder`` on CPU and CUDA today
            (see :data:`fraq.backends.DEVICE_DEFAULTS` for the measurements behind it).
            ``result.backend`` records the one that ran.
        eig_dtype: dtype of the r x r eigenproblem, torch.float32 or torch.float64;
            default float64 (see Precision).
        gram: ``"product"`` (the paper's steps: H = C Y, G = H H^T, R_p = U_p^T H),
            ``"factored"`` (G = C (Y Y^T) C^T and R_p = (U_p^T C) Y, so H is never
            formed: (2d + D) r^2 instead of (2d + 3D) r^2 leading-order flops, but the
            Gram's rounding scales with ||C||^2 ||Y||^2 instead of ||C Y||^2, so it loses
            accuracy when clients' updates cancel; see
            :mod:`fraq.backends.factored_gram`), or ``"auto"`` (the default): factored,
            except that a batch in which some matrix's clients cancel (||C||_F^2 ||Y||_F^2
            above :data:`CANCEL_LIMIT` s ||C Y||_F^2, read in the same synchronization) is
            redone through H. Measured (``make bench-roofline``, README): the factored Gram
            saves 10-20% of the CPU time on the LoRA presets, with the same error above the
            float64 optimum on LoRA stacks and on condition numbers up to 1e10.

    Returns:
        :class:`fraq.RecompressResult`; ``info["gram"]`` is the requested form and
        ``info["product_gram_count"]`` counts the matrices whose Gram went through H;
        ``info["rescaled"]`` counts the matrices that
        took the rescaled (slow) path.

    Gradients: the inputs' values are used (``B.detach()``, ``A.detach()``); inputs
    that require grad (``nn.Parameter``) are accepted and the result does not require
    grad, like every aggregator's (the eigenvalue cut is not differentiable anyway).

    Flops, leading order per matrix (Eq. 12, Gram by a general GEMM here):
    2 d r^2 (QR) + 2 D r^2 (H) + 2 D r^2 (G) + O(r^3) + 4 d r p + 2 D r p through H;
    factored, 2 D r^2 (Y Y^T) + O(r^3) replace H and G.

    References: the FRAQ paper (``shared/paper/fraq-paper.tex``), Eckart and Young (1936),
    doi:10.1007/BF02288367.
    """
    check_pair(B, A)
    B, A = B.detach(), A.detach()  # values only: no autograd graph (see Gradients above)
    if (tau is None) == (rank is None):
        raise ValueError(f"pass exactly one of tau and rank, got tau={tau!r}, rank={rank!r}")
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    s = min(m, n, r)
    if tau is not None:
        tau = check_tau(tau)
    else:
        rank = check_rank(rank, s if s > 0 else None)
    backend = resolve_backend(backend, B.device)
    basis_fn = get_backend(backend)
    if gram not in GRAMS:
        raise ValueError(f"gram(={gram!r}) must be one of {list(GRAMS)}")
    if eig_dtype is not None:
        check_eig_dtype(eig_dtype)
    return _recompress_impl(B, A, tau, rank, backend, basis_fn, eig_dtype, gram)


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


CHUNK_BYTES = 16 * 2**20
"""Working set a CPU chunk aims at (bytes): the float64 copy of X and H^T, per matrix
8 d r + 4 D s, summed over the chunk's matrices (at least one matrix per chunk).

Why chunks: a batched step writes its whole intermediate at once (H^T of 28 LLaMA-3.2-3B
up-projections is 58 MB), and an allocation that large is mapped fresh from the OS on
every call (glibc maps anything above 32 MB) and page-faulted in on first touch, which
costs about as much as the GEMM that fills it; the float32 -> float64 copy of X is
several times slower into fresh memory than into reused memory. Run chunk by chunk,
each intermediate is small enough for the allocator to hand back and reuse, and stays
in cache for the next step. A batch below the budget runs whole: chunks of small
matrices only add per-call overhead (measured with ``make bench-roofline``). On CUDA a
batch always runs whole, in one synchronization."""


FANOUT_BYTES = 2 * 2**20
"""Working set (bytes, as for :data:`CHUNK_BYTES`) from which a CPU batch is shared by the
threads chunk by chunk, each chunk's whole pipeline on one thread. Below it the batch
runs whole, GEMMs on MKL's threads: the per-chunk calls would cost more than they share.
Measured (``make bench-roofline``, 2 threads): 12 RoBERTa-base modules (8.8 MB) take
about 2/3 of the time split in two chunks than whole with MKL's threads."""


def _chunk_bounds(nb: int, d: int, D: int, r: int) -> list[int]:
    """Chunk edges of a CPU batch of nb matrices, each chunk's working set about
    :data:`CHUNK_BYTES` (at least one matrix); with t > 1 torch threads, at least t chunks
    when the batch has t matrices and :data:`FANOUT_BYTES` of work, so that every thread
    runs a share of the pipeline on one core (see :func:`fraq._parallel.map_chunks`)."""
    per = 8 * d * r + 4 * D * min(d, r)
    count = max(1, math.ceil(nb * per / CHUNK_BYTES))
    threads = torch.get_num_threads()
    if threads > 1 and nb * per >= FANOUT_BYTES:
        count = max(count, threads)
    count = min(count, nb)
    return [nb * i // count for i in range(count + 1)]


def _recompress_impl(B, A, tau, rank, backend_name, basis_fn, eig_dtype, gram="auto"):
    """Validated arguments -> result: on a CPU, a batch runs chunk by chunk (:data:`CHUNK_BYTES`)."""
    batch = B.shape[:-2]
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    nb = math.prod(batch)
    if B.device.type == "cpu" and nb > 1 and min(m, n, r) > 0:
        bounds = _chunk_bounds(nb, min(m, n), max(m, n), r)
        if len(bounds) > 2:
            return _recompress_chunked(B, A, tau, rank, backend_name, basis_fn, eig_dtype, gram, bounds)
    return _recompress_batch(B, A, tau, rank, backend_name, basis_fn, eig_dtype, gram)


def _recompress_chunked(B, A, tau, rank, backend_name, basis_fn, eig_dtype, gram, bounds):
    """The batch run chunk by chunk (each chunk exactly as :func:`_recompress_batch` runs a
    batch), the chunks' results assembled, factors zero-padded to the largest rank."""
    batch = B.shape[:-2]
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    nb = math.prod(batch)
    Bf, Af = B.reshape(nb, m, r), A.reshape(nb, r, n)

    def chunk(Bc, Ac, first):  # ``first``: the chunk's batch indices, for messages naming a matrix
        return _recompress_batch(Bc, Ac, tau, rank, backend_name, basis_fn, eig_dtype, gram,
                                 offset=int(first[0]), whole=(B, A))

    parts = map_chunks(chunk, bounds, Bf, Af, torch.arange(nb))
    pmax = max(res.B.shape[-1] for res in parts)
    Bg, Ag = _like(parts[0].B, (nb, m, pmax)), _like(parts[0].A, (nb, pmax, n))

    def place(Bo, Ao, first):  # one chunk's factors into their slice of the outputs
        res = parts[bounds.index(int(first[0]))]
        p = res.B.shape[-1]
        Bo[..., :p] = res.B
        Ao[:, :p, :] = res.A
        if p < pmax:
            Bo[..., p:] = 0
            Ao[:, p:, :] = 0

    # The copies run on the threads that computed the chunks, one thread each: an OpenMP
    # team woken here would keep spinning into the next call's fan-out.
    map_chunks(place, bounds, Bg, Ag, torch.arange(nb))
    with one_thread():
        rank_out = torch.cat([res.rank for res in parts]).reshape(batch)
        energy = torch.cat([res.energy for res in parts]).reshape(batch)
        sv = torch.cat([res.singular_values for res in parts]).reshape(*batch, -1)
    head = parts[0]
    return RecompressResult(
        B=Bg.reshape(*batch, m, pmax), A=Ag.reshape(*batch, pmax, n), rank=rank_out, energy=energy,
        singular_values=sv, tau=tau, backend=head.backend, transposed=head.transposed,
        info=_merge_info([res.info for res in parts]),
    )


def _like(t: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """An empty (nb, rows, cols) tensor laid out as the chunk result ``t``: row-major, or
    column-major matrices when ``t`` is (so the chunks' copies run contiguous to contiguous)."""
    if t.dim() == 3 and not t.is_contiguous() and t.mT.is_contiguous():
        return t.new_empty(shape[0], shape[2], shape[1]).mT
    return t.new_empty(shape)


def _merge_info(infos: list[dict]) -> dict:
    """One ``info`` for a batch computed in parts: counts (``*_count``, ``rescaled``) add up,
    ``steps`` and ``residual`` take the worst part, ``converged`` all parts, anything else
    (backend, fallback kind, schedule) the first part that sets it."""
    out: dict = {}
    for info in infos:
        for k, v in info.items():
            if k not in out or out[k] is None:
                out[k] = v
            elif k.endswith("_count") or k == "rescaled":
                out[k] += v
            elif k in ("steps", "residual") and v is not None:
                out[k] = max(out[k], v)
            elif k == "converged":
                out[k] = out[k] and v
    return out


def _recompress_batch(B, A, tau, rank, backend_name, basis_fn, eig_dtype, gram="auto", offset=0, whole=None):
    """The pipeline on one batch (all of it, or one CPU chunk: then ``B``, ``A`` are
    (c, m, r), (c, r, n), the chunk starts at matrix ``offset`` of the caller's factors
    ``whole`` = (B, A), and error messages name values and matrices in those)."""
    out_dtype = B.dtype
    cdt = compute_dtype(out_dtype)
    edt = eig_dtype or torch.float64
    batch = B.shape[:-2]
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    # Orient along the smaller side (Eq. 9) and flatten the batch to one dimension.
    X, Y, transposed = orient(B, A)
    d, D = X.shape[-2], Y.shape[-1]
    s = min(d, r)
    nb = math.prod(batch)
    if s == 0 or nb == 0:
        return _empty_result(batch, m, n, s, cdt, out_dtype, tau, rank, backend_name, transposed, B.device)

    X = X.reshape(nb, d, r).to(cdt)
    Y = Y.reshape(nb, r, D).to(cdt)

    # Fast path: only the small intermediates (C, the Grams, the eigenvalues) are looked
    # at, and one host synchronization reads the verdict together with the largest rank.
    # A backend that offers ``deferred`` leaves its per-matrix fallback verdict pending, to
    # be read in that same synchronization (see fraq.backends.base.Backend).
    # With gram="auto" the Gram is formed factored (no H) unless some matrix's clients
    # cancel (:func:`_cancels`); that verdict is read in the same synchronization, and
    # the batch is then redone through H (counted in info["product_gram_count"]).
    basis = getattr(basis_fn, "deferred", basis_fn)(X)
    factored, guard = gram != "product", gram == "auto"
    product_count = nb if gram == "product" else 0
    while True:
        Ht, G, WY = _coordinates(basis.C, Y, factored)
        ok = _fast_path_ok(basis.C, G, WY, cdt, edt)
        cancels = _cancels(basis.C, WY, G, ok, s) if factored and guard else None
        lam, U, p, energy = _spectrum(G, ok, s, cdt, edt, tau, rank)
        all_ok, pmax, energy0, lo, hi, rejected, cancelling = _host_stats(ok, p, energy, lam, None, basis.rejected,
                                                                          cancels)
        if rejected:  # the fast basis was wrong somewhere: complete it and redo the pipeline
            basis = basis.complete()
        elif cancelling:  # the factored Gram would lose accuracy somewhere: redo through H
            factored, product_count = False, nb
        else:
            break
    e = None  # M = 2^e Q C Y per matrix once the factors have been rescaled
    rescaled = 0
    if not all_ok:
        rescaled = int((~ok).sum())
        whole = (B, A) if whole is None else whole
        Y0 = Y
        while True:  # as above: the rescaled matrices' cancellation verdict read with the rank
            basis, Y, Ht, G, WY, e = _rescaled(whole, X, Y0, ok, basis_fn, backend_name, factored)
            cancels = _cancels(basis.C, WY, G, torch.ones_like(ok), s) if factored and guard else None
            lam, U, p, energy = _spectrum(G, None, s, cdt, edt, tau, rank)
            _, pmax, energy0, lo, hi, _, cancelling = _host_stats(None, p, energy, lam, e, None, cancels)
            if not cancelling:
                break
            factored, product_count = False, nb
    _check_representable(*((B, A) if whole is None else whole), lam, e, out_dtype, lo, hi, offset)

    Up = U[..., :pmax].to(cdt)
    if tau is not None and pmax > 0:
        keep = torch.arange(pmax, device=p.device) < p.unsqueeze(-1)  # (nb, pmax)
        Up = Up * keep.unsqueeze(-2).to(cdt)
    L = basis.apply(Up)  # (nb, d, pmax), orthonormal columns
    Rp = factored_rows(Up, basis.C, Y) if Ht is None else torch.matmul(Ht, Up).mT  # (nb, pmax, D)
    sv = lam.to(cdt).sqrt()
    if e is not None:  # the scale goes on the singular-value side only; L stays orthonormal
        Rp = scale_pow2(Rp, e.view(-1, 1, 1), parts=3)
        sv = scale_pow2(sv, e.view(-1, 1), parts=3)

    Bg, Ag = unorient(L, Rp, transposed)
    Bg = Bg.reshape(*batch, m, pmax).to(out_dtype)
    Ag = Ag.reshape(*batch, pmax, n).to(out_dtype)
    sv = sv.reshape(*batch, s)
    if len(batch) == 0:
        rank_out, energy_out = pmax, energy0
    else:
        rank_out, energy_out = p.reshape(batch), energy.to(cdt).reshape(batch)
    return RecompressResult(
        B=Bg, A=Ag, rank=rank_out, energy=energy_out, singular_values=sv, tau=tau,
        backend=backend_name, transposed=transposed,
        info=dict(basis.info, rescaled=rescaled, gram=gram, product_gram_count=product_count),
    )


def _coordinates(C, Y, factored):
    """(Ht, G, W_Y): the coordinates' transpose Ht = (C Y)^T = Y^T C^T (D x s; None when
    ``factored``), their Gram G = Ht^T Ht = H H^T, and W_Y = Y Y^T (None unless
    ``factored``, where G = C W_Y C^T).

    H is held as its transpose, row-major (D x s): the three products that touch it,
    Y^T C^T, Ht^T Ht and Ht U_p, then all read their long dimension contiguously, which
    BLAS runs 1.5-2x faster than the same products on a row-major H (s x D) for the
    LoRA shapes (s ~ 10^2, D ~ 10^3) on CPUs: same flops, better kernels.
    """
    if factored:
        G, WY = factored_gram_parts(C, Y)
        return None, G, WY
    Ht = torch.matmul(Y.mT, C.mT)
    return Ht, torch.matmul(Ht.mT, Ht), None


def _in_range(t, lo, hi):
    """Per matrix: (lo <= max|t| <= hi, t == 0). NaN and inf fail the first test."""
    a = amax(t)
    return (a >= lo) & (a <= hi), a == 0


def _fast_path_ok(C, G, WY, cdt, edt):
    """Per matrix (nb,) bool: the unscaled computation can be trusted.

    C must be far from underflow (a factor of subnormal numbers loses digits in its QR)
    and from overflow; G (in the narrower of the compute and eigensolver dtypes) and
    W_Y must keep the squared spectrum down to the noise floor eps * lambda_1 normal and
    its sum finite. An exactly zero X (C = 0, G = 0) is a zero aggregate, not an
    underflow; a zero G with a nonzero C may be either, and takes the rescaled path.
    """
    fc, fe = torch.finfo(cdt), torch.finfo(edt)
    fg = fc if fc.max <= fe.max else fe
    c_ok, c_zero = _in_range(C, fc.tiny / fc.eps, fc.max * fc.eps)
    g_ok, g_zero = _in_range(G, fg.tiny / fg.eps**2, fg.max * fg.eps)
    ok = c_ok & g_ok
    if WY is not None:
        ok = ok & _in_range(WY, fc.tiny / fc.eps**2, fc.max * fc.eps)[0]
    return ok | (c_zero & g_zero)


def _cancels(C, WY, G, ok, s):
    r"""Per matrix (nb,) bool: the factored Gram :math:`G = C (YY^\top) C^\top` could lose
    accuracy, because the clients' updates cancel.

    The factored Gram rounds like :math:`\varepsilon\lVert C\rVert^2\lVert Y\rVert^2`,
    the product form like :math:`\varepsilon\lVert C\rVert\lVert Y\rVert\lVert CY\rVert`:
    they differ by :math:`\rho = \lVert C\rVert\lVert Y\rVert / \lVert CY\rVert`, which is
    about 1 when nothing cancels and grows as the aggregate shrinks below its factors
    (measured on the LoRA presets: spectral rho^2 = 1.01-1.03). Measured in Frobenius norms,
    which cost three traces, rho_F^2 of generic factors is about s / 2 (34-39 at s = 64-80
    on the presets); a matrix is refused above :data:`CANCEL_LIMIT` times s. A matrix
    whose Gram is out of range (``ok`` False) is not judged here: it is judged again once
    the rescaled path has brought it into range.
    """
    cf = C.double().square().sum(dim=(-2, -1))
    yf = WY.double().diagonal(dim1=-2, dim2=-1).sum(-1)
    gf = G.double().diagonal(dim1=-2, dim2=-1).sum(-1)
    return ok & ~(cf * yf <= (CANCEL_LIMIT * max(s, 1)) * gf)


def _rescaled(whole, X, Y, ok, basis_fn, backend_name, factored):
    """The slow path: each factor scaled by an exact power of two per matrix, X = 2^ex Xs,
    Y = 2^ey Ys, and the basis and Gram formed again from Xs and Ys.

    Only the matrices that failed :func:`_fast_path_ok` are scaled (the others are
    recomputed as they were). Returns (basis, Ys, Ht, G, W_Y, e) with M = 2^e Q C Ys, e = ex + ey.
    ``whole`` = the caller's (B, A): a NaN or Inf there (in any matrix: the call fails
    either way) is named by its index in them.
    """
    check_finite("B", whole[0])
    check_finite("A", whole[1])
    zero = torch.zeros((), dtype=torch.int64, device=X.device)
    ex = torch.where(ok, zero, exponent(X))
    ey = torch.where(ok, zero, exponent(Y))
    Xs = scale_pow2(X, -ex.view(-1, 1, 1), parts=2)
    Ys = scale_pow2(Y, -ey.view(-1, 1, 1), parts=2)
    basis = basis_fn(Xs)
    Ht, G, WY = _coordinates(basis.C, Ys, factored)
    if not bool(torch.isfinite(amax(G)).all()):
        raise RuntimeError(f"backend {backend_name!r} returned non-finite coordinates for finite, unit-scaled factors")
    return basis, Ys, Ht, G, WY, ex + ey


def _spectrum(G, ok, s, cdt, edt, tau, rank):
    """Eigen-decomposition of G in ``edt`` (matrices with ``ok`` False replaced by zeros,
    so that the eigensolver never sees a non-finite Gram), the noise floor, the rank and
    the retained energy. Returns (lam, U, p, energy), lam descending."""
    Ge = G.to(edt)
    if ok is not None:
        Ge = torch.where(ok.view(-1, 1, 1), Ge, torch.zeros((), dtype=edt, device=Ge.device))
    lam, U = batch_map(torch.linalg.eigh, Ge)
    lam, U = lam.flip(-1), U.flip(-1)
    floor = noise_floor(lam[..., :1], s, cdt)
    lam = torch.where(lam > floor, lam, torch.zeros_like(lam))
    cums = torch.cumsum(lam, dim=-1)
    if tau is not None:
        p = _rank_from_cumsum(cums, tau)
    else:
        p = torch.full((lam.shape[0],), rank, dtype=torch.int64, device=lam.device)
    total = cums[..., -1]
    kept = torch.gather(cums, -1, (p - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1)
    kept = torch.where(p > 0, kept, torch.zeros_like(kept))
    energy = torch.where(total > 0, kept / torch.where(total > 0, total, 1), torch.ones_like(total))
    return lam, U, p, energy


def _log2_sigma1(lam, e):
    """log2 of each matrix's largest singular value 2^e sqrt(lam_1), -inf for a zero one."""
    lam1 = lam[:, 0].double()
    l2 = 0.5 * torch.log2(lam1)
    return l2 if e is None else l2 + e.double()


def _host_stats(ok, p, energy, lam, e, rejected, cancels):
    """The one host synchronization: (all ok, largest rank, energy of matrix 0, the smallest
    and largest log2 sigma_1 over the nonzero aggregates, the number of matrices whose
    deferred basis was ``rejected`` and the number whose factored Gram ``cancels`` (0 when None))."""
    l2 = _log2_sigma1(lam, e)
    live = torch.isfinite(l2)
    lo = torch.where(live, l2, math.inf).amin()
    hi = torch.where(live, l2, -math.inf).amax()
    one = torch.ones((), dtype=torch.float64, device=p.device)
    flag = one if ok is None else ok.all().double()
    nrej = 0 * one if rejected is None else rejected.sum().double()
    ncan = 0 * one if cancels is None else cancels.sum().double()
    stats = torch.stack([flag, p.amax().double(), energy[0].double(), lo, hi, nrej, ncan]).tolist()
    all_ok, pmax, energy0, lo, hi, nrej, ncan = stats
    return bool(all_ok), int(pmax), energy0, lo, hi, int(nrej), int(ncan)


def _check_representable(B, A, lam, e, out_dtype, lo, hi, offset=0):
    """Refuse an aggregate whose singular values the result's dtype cannot hold.

    sigma_1 must lie in [tiny, max / 2] of the output dtype: below tiny the factor that
    carries the singular values would be subnormal (fewer digits than eps promises);
    above max / 2 it, or its rounding, would overflow.
    """
    batch = B.shape[:-2]
    fo = torch.finfo(out_dtype)
    lo_lim, hi_lim = math.log2(fo.tiny), math.log2(fo.max) - 1
    if lo >= lo_lim and hi <= hi_lim:
        return
    l2 = _log2_sigma1(lam, e).tolist()
    k = next(i for i, v in enumerate(l2) if math.isfinite(v) and not lo_lim <= v <= hi_lim)
    where = f" (matrix {_unravel(k + offset, batch)} of the batch)" if batch else ""
    what = "underflow" if l2[k] < lo_lim else "overflow"
    hint = " or pass float32 factors" if compute_dtype(out_dtype) != out_dtype else ""
    raise ValueError(
        f"B @ A has largest singular value {_fmt_pow2(l2[k])}{where}, outside what {out_dtype} can hold "
        f"in the result, [{fo.tiny:.3g}, {fo.max / 2:.3g}]: its singular-value factor would {what} "
        f"(max|B|={float(B.abs().max()):.3g}, max|A|={float(A.abs().max()):.3g}). Scale B or A by a "
        f"power of two (and the merged adapter by the inverse){hint}."
    )


def _fmt_pow2(l2):
    """2^l2 in decimal notation, also where it under/overflows a Python float."""
    dec = l2 * math.log10(2)
    k = math.floor(dec)
    return f"{10 ** (dec - k):.2f}e{k:+03d}"


def _unravel(k, batch):
    idx = []
    for size in reversed(batch):
        idx.append(k % size)
        k //= size
    return tuple(reversed(idx))


def _empty_result(batch, m, n, s, cdt, out_dtype, tau, rank, backend_name, transposed, device):
    """No matrices (an empty batch) or no directions (r, m or n zero).

    With s = min(m, n, r) = 0 the aggregate is the zero m x n matrix, and its best
    approximation of any rank is itself, of rank 0: the result has rank 0 and zero-width
    factors in both modes (a fixed rank p cannot be reached, and p zero columns would not
    be orthonormal). An empty batch of s > 0 problems keeps the requested width p.
    """
    p = 0 if rank is None or s == 0 else rank
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
