r"""Coordinate-space recompression of a stacked aggregate (the paper's Section 3.3).

The pipeline, one function per step, top to bottom in :func:`_pipeline`: orient, basis,
coordinates and Gram, eigenproblem, energy rule, map back, unorient. Which basis and
which Gram form a call runs is fixed once, from the FLOP counts of :mod:`fraq.flops` at
the call's (d, D, r) (:class:`Plan`, :func:`fraq.flops.cheapest_path`): with r >= d the
basis is the identity and the coordinate space has d dimensions (the paper's Appendix,
general rank), so the cost is linear in r there. The mechanisms
around it live beside it, each in one module: the CPU chunk and thread schedule
(:func:`fraq._parallel.over_chunks`), the range verdict and rescue (:mod:`fraq._range`),
the Gram forms and their cancellation guard (:mod:`fraq._gram`). The pipeline reads the
device once: the eigenvalues and a few numbers per matrix come back together
(:func:`_read`), and the energy rule, the noise floor and every verdict are decided on
the host from them. A verdict that fails takes the first applicable entry of
:data:`FALLBACKS` and the pass is run again; the common case (finite, in range, no
cancelling clients) runs the math once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import torch

from fraq import _gram, _range
from fraq._energy import energy_rule, gram_budget, noise_floor, rounding_eps, select_rank
from fraq._gram import CANCEL_LIMIT, GRAMS
from fraq._orient import orient, unorient
from fraq._parallel import batch_map, over_chunks
from fraq._validation import check_eig_dtype, check_pair, check_rank, check_tau, compute_dtype
from fraq.backends import AUTO, REGISTRY, resolve_backend
from fraq.backends.base import Backend, Basis, identity_basis
from fraq.flops import cheapest_path
from fraq.result import RecompressResult, empty_result, join_results

__all__ = ["CANCEL_LIMIT", "GRAMS", "Options", "Plan", "check_options", "recompress", "select_rank", "noise_floor"]

INFO_RULES = {"rescaled": "sum", "product_gram_count": "sum", "below_tau": "sum", "graded_basis": "sum"}
"""How recompress's own ``info`` keys combine over chunks (see :func:`fraq.backends.base.merge_info`)."""


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
    Eckart-Young). Q is never formed: ``L_p`` is the stored reflectors applied to the
    zero-padded U_p. With r >= d (more stacked directions than the short side, e.g. 96
    clients of rank 8 on a 768-wide layer) col(X) is all of R^d: Q = I_d, C = X, so
    H = X Y is the aggregate itself and G its d x d Gram, whatever ``backend`` names
    (every orthonormal basis of R^d is a rotation of I_d). The result always has the
    LoRA orientation ``B`` (m x p), ``A`` (p x n); when m > n the factors are
    transposed back.

    The rank is either fixed (``rank=p``) or chosen by the energy rule (Eq. 11): the
    smallest p whose leading eigenvalues hold at least ``tau`` of the total, the Gram's
    trace ||B A||_F^2. Its contract (:mod:`fraq._energy`): p holds at least ``tau`` of the
    energy of the exact aggregate of the factors as given, up to min(d, r) * eps of the
    energy, and p is no larger than the float64 rule's at ``tau`` plus that. What is
    rounding is decided by two bounds, both unchanged when the factors are rescaled
    against each other (B c, A / c): an eigenvalue at or below ``(k eps N)^2``, N =
    sum_k ||x_k|| ||y_k||, is below the rounding of the product itself and counts as an
    exact zero (exactly cancelling clients, or an all-zero aggregate, give rank 0);
    trailing directions that together hold at most ``s * eps * tr G``, the Gram's own
    rounding summed, are not kept, so ``tau=1`` keeps the numerical rank (duplicate
    clients give the rank of one). A result that keeps less than ``tau`` that way is
    counted in ``info["below_tau"]``. With r, m or n zero the
    aggregate is the zero matrix and the result has rank 0 in both modes (its best
    approximation of any rank is itself); an empty batch keeps the requested width.

    Batched input (*, m, r) / (*, r, n) runs as one batch of kernels (on a CPU, a large
    batch chunk by chunk, the chunks shared by the threads). Each matrix gets its own
    rank: ``rank`` is then an int64 tensor of the batch shape and ``B``/``A`` are padded
    with exact zeros to the largest rank in the batch.

    Range: any finite factors (subnormal entries included) whose aggregate's largest
    singular value lies in [tiny, max / 2] of the result's dtype give a result as
    accurate as at unit scale, for every exact backend and every ``gram``; outside it a
    ValueError gives the value (:mod:`fraq._range` says how). A NaN or Inf in ``B`` or
    ``A`` is a ValueError naming the factor and the index.

    Precision: float32 and float64 compute in their own dtype; float16 and bfloat16
    compute in float32 and ``B``/``A`` come back in the input dtype (spectrum and energy
    in float32). The r x r eigenproblem runs in ``eig_dtype``, float64 by default: the
    Gram's rounding is mostly relative to its entries, which are graded like the
    spectrum, but a float32 eigensolver adds a normwise error eps * lambda_1 that blurs
    every direction below sqrt(eps) * sigma_1; a float64 one does not
    (``python -m benchmarks.run eig_precision`` measures the difference).

    Args:
        B: (*, m, r) stacked B factor, e.g. from :func:`fraq.stack`.
        A: (*, r, n) stacked A factor.
        tau: energy threshold in (0, 1]. Exactly one of ``tau`` and ``rank``.
        rank: fixed output rank p, 1 <= p <= min(d, r) (any p >= 1 when min(d, r) = 0).
            An int, or a 0-dimensional integer tensor (a bool is refused).
        backend: name of the basis backend (:data:`fraq.backends.BACKENDS`), or ``"auto"``
            (the default): the device's default (:data:`fraq.backends.DEVICE_DEFAULTS`).
            ``result.backend`` records the one that ran.
        eig_dtype: dtype of the r x r eigenproblem, torch.float32 or torch.float64;
            default float64 (see Precision).
        gram: ``"product"`` (the paper's steps), ``"factored"`` (G = C (Y Y^T) C^T, H
            never formed: fewer flops while r is small against d and D, but less
            accurate when clients' updates cancel), or ``"auto"`` (the default): the
            form of fewer FLOPs at this shape (:func:`fraq.flops.cheapest_path`:
            factored for LoRA stacks, through H once r passes about D / 2 or d), and a
            factored batch whose clients cancel is redone through H (see :mod:`fraq._gram`).

    Returns:
        :class:`fraq.RecompressResult`; ``info["gram"]`` is the requested form,
        ``info["product_gram_count"]`` counts the matrices whose Gram went through H,
        ``info["rescaled"]`` those that took the rescaled path, ``info["graded_basis"]`` those
        whose identity basis (r >= d) was replaced by the backend's because the kept
        spectrum reached below 8 sqrt(eps) sigma_1 (:func:`_ungraded`), ``info["below_tau"]`` those
        whose kept energy is below ``tau`` because the rest is rounding (see the energy
        rule above), and ``info["basis"]`` is
        ``"identity"`` where r >= d made the basis the identity (then ``backend`` ran nothing).

    Gradients: the inputs' values are used (``B.detach()``, ``A.detach()``); inputs
    that require grad (``nn.Parameter``) are accepted and the result does not require
    grad, like every aggregator's (the eigenvalue cut is not differentiable anyway).

    Flops, leading order per matrix (Eq. 12, Gram by a general GEMM here), r < d:
    2 d r^2 (QR) + 2 D r^2 (H) + 2 D r^2 (G) + O(r^3) + 4 d r p + 2 D r p through H;
    factored, 2 D r^2 (Y Y^T) + O(r^3) replace H and G. r >= d: 2 d r D (H = X Y) +
    2 d^2 D (G) + 14 d^3 / 3 (eigenproblem, ``syevd``) + 2 d p D, at most the dense product B @ A plus
    its Gram and a d x d eigenproblem (:func:`fraq.flops.fraq_flops`).

    References: the FRAQ paper (``shared/paper/fraq-paper.tex``), Eckart and Young (1936),
    doi:10.1007/BF02288367.

    Examples:
        >>> import torch, fraq
        >>> from fraq.reference import optimal_error, relative_error
        >>> g = torch.Generator().manual_seed(0)
        >>> Bs = [torch.randn(64, 4, generator=g) for _ in range(3)]
        >>> As = [torch.randn(4, 48, generator=g) for _ in range(3)]
        >>> B, A = fraq.stack(Bs, As, weights=[3, 2, 1])
        >>> res = fraq.recompress(B, A, rank=6)
        >>> res.B.shape, res.A.shape
        (torch.Size([64, 6]), torch.Size([6, 48]))
        >>> excess = relative_error(B, A, res.B, res.A) - optimal_error(B, A, 6)
        >>> bool(excess < 1e-5)
        True
    """
    check_pair(B, A)
    if B.requires_grad or A.requires_grad:  # values only: no autograd graph (see Gradients above)
        B, A = B.detach(), A.detach()
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    s = min(m, n, r)
    options = check_options(tau=tau, rank=rank, backend=backend, eig_dtype=eig_dtype, gram=gram,
                            limit=s if s > 0 else None)
    return _recompress_impl(Plan.of(options, B, A), B, A)


@dataclass(frozen=True)
class Options:
    """What a caller asks of :func:`recompress`, checked, before any shape is known.

    The whole-model aggregator (:class:`fraq.aggregators.Fraq`) checks its options with
    :func:`check_options` once, at construction, and hands them to every call.

    Attributes:
        tau, rank: the energy threshold or the fixed rank (exactly one is set).
        backend: a registered name or ``"auto"`` (resolved per device by :class:`Plan`).
        eig_dtype: the eigensolver's dtype.
        gram: the requested Gram form (:data:`GRAMS`).
    """

    tau: float | None
    rank: int | None
    backend: str = AUTO
    eig_dtype: torch.dtype = torch.float64
    gram: str = "auto"

    def kwargs(self) -> dict:
        """These options as :func:`recompress`'s keyword arguments."""
        return dict(tau=self.tau, rank=self.rank, backend=self.backend, eig_dtype=self.eig_dtype, gram=self.gram)


def check_options(*, tau=None, rank=None, backend: str = AUTO, eig_dtype=None, gram: str = "auto",
                  limit: int | None = None) -> Options:
    """:class:`Options` from :func:`recompress`'s arguments, or the error naming the argument
    and its value; ``limit`` caps a fixed rank (min(d, r) of a call; None: any rank >= 1)."""
    if (tau is None) == (rank is None):
        raise ValueError(f"pass exactly one of tau and rank, got tau={tau!r}, rank={rank!r}")
    if tau is not None:
        tau = check_tau(tau)
    else:
        rank = check_rank(rank, limit)
    if backend != AUTO:
        resolve_backend(backend, "cpu")  # the name's check and message; "auto" resolves per device
    if not isinstance(gram, str) or gram not in GRAMS:
        raise ValueError(f"gram(={gram!r}) must be one of {list(GRAMS)}")
    edt = torch.float64 if eig_dtype is None else check_eig_dtype(eig_dtype)
    return Options(tau=tau, rank=rank, backend=backend, eig_dtype=edt, gram=gram)


@dataclass(frozen=True)
class Plan:
    """What a call computes, fixed once from its checked options and its shapes.

    Attributes:
        tau, rank: the energy threshold or the fixed rank (exactly one is set).
        backend: the basis backend's resolved name (``result.backend``).
        basis_fn: the basis of X this call runs: the backend's, or the identity (r >= d).
        fast_basis_fn: the same with its verdict left pending (the backend's registered
            ``deferred``), else ``basis_fn``: the first pass's basis.
        identity: the basis is I_d (:func:`fraq.flops.cheapest_path`).
        factored: the first pass forms the Gram factored.
        guard: a factored Gram is checked for cancelling clients (``gram="auto"``).
        equilibrate: X's columns are equilibrated against Y's rows before the basis
            (:func:`fraq._range.equilibrate`): a backend not invariant to column scaling.
        gram: the requested Gram form (:data:`GRAMS`), recorded in ``info``.
        out_dtype, cdt, edt: the result's dtype, the compute dtype, the eigensolver's.
    """

    tau: float | None
    rank: int | None
    backend: str
    basis_fn: Backend
    fast_basis_fn: Backend
    identity: bool
    factored: bool
    guard: bool
    equilibrate: bool
    gram: str
    out_dtype: torch.dtype
    cdt: torch.dtype
    edt: torch.dtype

    @classmethod
    def of(cls, options: Options, B: torch.Tensor, A: torch.Tensor) -> Plan:
        """The plan of checked ``options`` on factors B (*, m, r), A (*, r, n): the path of
        fewer FLOPs at (d, D, r) (:func:`fraq.flops.cheapest_path`; ``p`` is the fixed rank,
        or 0 under the energy rule, which enters only the O(p) terms)."""
        m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
        d, D = min(m, n), max(m, n)
        name = resolve_backend(options.backend, B.device)
        path = cheapest_path(d, D, r, min(options.rank or 0, d, r), form=options.gram)
        spec = REGISTRY[name]
        basis_fn = identity_basis if path.identity else spec.fn
        fast = basis_fn if path.identity or spec.deferred is None else spec.deferred
        return cls(tau=options.tau, rank=options.rank, backend=name, basis_fn=basis_fn, fast_basis_fn=fast,
                   identity=path.identity, factored=path.factored, guard=options.gram == "auto" and path.factored,
                   equilibrate=not (path.identity or spec.scale_invariant),
                   gram=options.gram, out_dtype=B.dtype, cdt=compute_dtype(B.dtype), edt=options.eig_dtype)

    def workspace_bytes(self, d: int, D: int, r: int) -> int:
        """Bytes one matrix's pass holds beside its inputs, what the CPU chunks are sized by:
        the oriented factor and its basis (2 d r), H^T (D s) or Y Y^T (r^2), in the compute dtype."""
        s = min(d, r)
        work = (d * r if self.identity else 2 * d * r) + (r * r if self.factored else D * s)
        return (torch.finfo(self.cdt).bits // 8) * work


def _recompress_impl(plan: Plan, B: torch.Tensor, A: torch.Tensor) -> RecompressResult:
    """Validated arguments -> result: the batch flattened, applied whole or chunk by chunk."""
    batch = B.shape[:-2]
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    nb = math.prod(batch)
    d, D = min(m, n), max(m, n)
    run = partial(_pipeline, plan, (B, A), batch)

    def join(parts: list[RecompressResult], bounds: list[int]) -> RecompressResult:  # only when chunked
        return join_results(parts, bounds, batch, {**REGISTRY[plan.backend].info_rules, **INFO_RULES})

    return over_chunks(run, join, plan.workspace_bytes(d, D, r), B.reshape(nb, m, r), A.reshape(nb, r, n))


@dataclass(frozen=True)
class _Pass:
    """What one pass of the pipeline runs with; a fallback returns a changed copy.

    ``X``/``Y`` are the oriented factors (scaled by 2^-e per matrix once rescaled),
    ``factored`` the Gram form, ``e`` (nb,) int64 the scale exponents or None,
    ``rescaled`` the number of matrices that took the rescaled path.
    """

    basis: Basis
    X: torch.Tensor
    Y: torch.Tensor
    factored: bool
    e: torch.Tensor | None = None
    rescaled: int = 0


@dataclass(frozen=True)
class _Reading:
    """The pass's one host read, per matrix (numpy): ``lam`` (nb, s) the Gram's eigenvalues,
    descending, zero at or below the product's noise floor (and where negative); ``n_sum``
    N = sum_k ||c_k|| ||y_k|| (:func:`fraq._gram.scale_sum`); ``ok`` in range; ``cancels`` (factored Gram under the guard, else None); ``rejected`` (a deferred
    basis, else None); ``lam1`` the Gram's largest eigenvalue (NaN where the solver refused
    it); ``e`` the scale exponents (None before rescaling)."""

    lam: np.ndarray
    n_sum: np.ndarray
    ok: np.ndarray
    cancels: np.ndarray | None
    rejected: np.ndarray | None
    lam1: np.ndarray
    e: np.ndarray | None


@dataclass(frozen=True)
class _Fallback:
    """A way out of a failed verdict: ``needed(reading, pass, plan)``, then ``apply(pass, reading, plan, whole)``."""

    name: str
    needed: Callable[[_Reading, _Pass, Plan], bool]
    apply: Callable[[_Pass, _Reading, Plan, tuple], _Pass]


def _rescale(at: _Pass, rd: _Reading, plan: Plan, whole: tuple) -> _Pass:
    """The matrices out of range redone from exactly scaled factors (:func:`fraq._range.rescaled`)."""
    bad = torch.from_numpy(~rd.ok).to(at.X.device)
    X, Y, e = _range.rescaled(whole, at.X, at.Y, bad)  # an equilibrated X stays so: one scale per factor
    return replace(at, basis=plan.basis_fn(X), X=X, Y=Y, e=e, rescaled=int((~rd.ok).sum()))


GRADED = 64.0
"""The identity basis is refused when a kept eigenvalue lies below GRADED * eps * lambda_1
(sigma_p / sigma_1 below 8 sqrt(eps)): see :func:`_ungraded`."""


def _ungraded(rd: _Reading, at: _Pass, plan: Plan) -> bool:
    """Whether an identity-basis pass keeps a direction its Gram cannot resolve to first order.

    With Q = I_d the Gram is that of the aggregate itself, rounded normwise: each
    eigenvalue is only eps * lambda_1 accurate, so a kept direction with
    sigma_p / sigma_1 near sqrt(eps) comes back with its subspace and singular value
    wrong at first order (measured: sin of the largest principal angle 0.99 and sigma_p
    70% off at kappa 1e6, p = 48 of 64, float32). A Householder basis makes C upper
    triangular, the Gram graded like the spectrum and its small eigenvalues accurate in
    relative terms (sin 4e-4 on the same input, as the textbook QR-QR-SVD), at the cost
    of one QR of X (2 d^2 r): the pass is redone with it where the rank the rule keeps
    (or the fixed rank) reaches below :data:`GRADED` * eps * lambda_1."""
    if at.basis.info.get("basis") != "identity" or plan.identity is False:
        return False
    eps = rounding_eps(plan.cdt)
    lam = rd.lam
    if plan.tau is not None:
        p, _, _, _ = energy_rule(lam, plan.tau, None, gram_budget(lam.sum(-1), lam.shape[-1], eps))
    else:
        p = np.full(lam.shape[0], plan.rank)
    p = np.clip(p, 1, lam.shape[-1])
    kept = lam[np.arange(lam.shape[0]), p - 1]
    return bool(((lam[:, 0] > 0) & (kept < GRADED * eps * lam[:, 0])).any())


def _graded(at: _Pass, rd: _Reading, plan: Plan, whole: tuple) -> _Pass:
    """The pass redone on the backend's own basis of X (Householder by default; X equilibrated
    first for a backend that is not column-scale invariant)."""
    X, Y = at.X, at.Y
    if not REGISTRY[plan.backend].scale_invariant:
        X, Y = _range.equilibrate(X, Y)
    return replace(at, basis=REGISTRY[plan.backend].fn(X), X=X, Y=Y)


FALLBACKS = (
    _Fallback("deferred basis completed", lambda rd, at, plan: rd.rejected is not None and bool(rd.rejected.any()),
              lambda at, rd, plan, whole: replace(at, basis=at.basis.complete())),
    _Fallback("rescaled", lambda rd, at, plan: at.e is None and not rd.ok.all(), _rescale),
    _Fallback("product Gram", lambda rd, at, plan: rd.cancels is not None and bool(rd.cancels.any()),
              lambda at, rd, plan, whole: replace(at, factored=False)),
    _Fallback("graded basis", _ungraded, _graded),
)
"""The fallbacks, in the order they are tried after a pass: a deferred basis that rejected
some matrix is completed; matrices out of range are rescaled (once); a factored Gram
whose clients cancel is formed through H; an identity basis that would keep directions
its Gram cannot resolve is replaced by the backend's (:func:`_ungraded`). Each entry
applies at most once per call."""


def _pipeline(plan: Plan, whole: tuple, batch: tuple, B: torch.Tensor, A: torch.Tensor,
              offset: int) -> RecompressResult:
    """The steps on a flattened batch B (nb, m, r), A (nb, r, n) that starts at matrix
    ``offset`` of the caller's factors ``whole`` (of batch shape ``batch``)."""
    X, Y, transposed = orient(B, A)  # 1. orient along the smaller side (Eq. 9)
    nb, s = X.shape[0], min(X.shape[-2], X.shape[-1])
    if s == 0 or nb == 0:
        return empty_result(plan, batch, B.shape[-2], A.shape[-1], s, transposed, B.device)
    if X.dtype != plan.cdt:
        X, Y = X.to(plan.cdt), Y.to(plan.cdt)
    if plan.equilibrate:  # a basis that is not column-scale invariant sees col(X), not the factors' scales
        X, Y = _range.equilibrate(X, Y)
    # 2. basis: the identity (r >= d), or the backend's, a deferred one leaving its verdict to the host read
    at = _Pass(basis=plan.fast_basis_fn(X), X=X, Y=Y, factored=plan.factored)
    at, coords, eig, rd = _settle(plan, whole, at, s)  # 3. coordinates and Gram, 4. eigenproblem
    if rd.e is not None or plan.out_dtype != plan.cdt:  # in range otherwise (see fraq._range.verdict)
        _range.check_representable(whole, rd.lam[:, 0], rd.e, plan.out_dtype, partial(_name_matrix, batch, offset))
    budget = gram_budget(rd.lam.sum(-1), s, rounding_eps(plan.cdt, plan.edt), rd.n_sum if at.factored else None)
    p, energy, short, q = energy_rule(rd.lam, plan.tau, plan.rank, budget)  # 5. energy rule, on the host
    B, A = _map_back(plan, at, coords, eig[1], p, transposed)  # 6. map back and 7. unorient
    info = {"rescaled": at.rescaled, "gram": plan.gram, "product_gram_count": 0 if at.factored else nb,
            "below_tau": int(short.sum()), "graded_basis": nb if plan.identity and "basis" not in at.basis.info else 0,
            **at.basis.info}
    lam = rd.lam if (q >= s).all() else np.where(np.arange(s) < q[:, None], rd.lam, 0.0)  # past q: rounding
    return _finish(plan, batch, B, A, p, energy, lam, rd.e, info, transposed)


def _settle(plan: Plan, whole: tuple, at: _Pass, s: int):
    """Passes of steps 3 and 4 until no fallback applies: (pass, coordinates, (lam, U), reading)."""
    while True:
        coords = _gram.coordinates(at.basis.C, at.Y, at.factored)
        eig = _eigen(coords.G, plan.edt)
        if eig is None and at.e is not None:
            raise RuntimeError(f"backend {plan.backend!r}: the eigensolver failed on finite, unit-scaled factors")
        rd = _read(plan, at, coords, eig, s)
        if at.e is not None and not np.isfinite(rd.lam1).all():
            raise RuntimeError(f"backend {plan.backend!r} returned non-finite coordinates for finite, "
                               "unit-scaled factors")
        fallback = next((f for f in FALLBACKS if f.needed(rd, at, plan)), None)
        if fallback is None:
            return at, coords, eig, rd
        at = fallback.apply(at, rd, plan, whole)


def _name_matrix(batch: tuple, offset: int, k: int) -> str:
    """Matrix k of a chunk starting at ``offset``, by its index in the caller's batch, for messages."""
    return f" (matrix {tuple(int(i) for i in np.unravel_index(k + offset, batch))} of the batch)" if batch else ""


def _eigen(G: torch.Tensor, edt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(lam, U) of each Gram (lower triangle) in ``edt``, ascending; None when the solver
    refuses a non-finite Gram (every matrix then takes the rescaled path, which names a
    NaN or Inf in the input)."""
    try:
        return batch_map(torch.linalg.eigh, G.to(edt))
    except torch.linalg.LinAlgError:
        return None


def _read(plan: Plan, at: _Pass, coords: _gram.Coordinates, eig, s: int) -> _Reading:
    """The pass's verdicts, decided on the host from its one read (:func:`_to_host`): the
    eigenvalues, max|C| (:func:`fraq._range.stats`), N = sum_k ||c_k|| ||y_k|| (the
    factors' scale, invariant to rescaling C's columns against Y's rows: the product's
    noise floor and the Gram guard), a deferred basis's rejections, the scale exponents
    and the diagonal of W_Y."""
    device = {"c_max": _range.stats(at.basis.C), "n_sum": _gram.scale_sum(at.basis.C, at.Y)}
    guard = plan.guard and at.factored
    if eig is not None:
        device["lam"] = eig[0]
    if at.basis.rejected is not None:
        device["rejected"] = at.basis.rejected
    if at.e is not None:
        device["e"] = at.e
    if coords.WY is not None:
        device["w_diag"] = coords.WY.diagonal(dim1=-2, dim2=-1)
    host = _to_host(device)
    lam = host["lam"] if eig is not None else np.full((host["c_max"].shape[0], s), np.nan)
    w_diag = host.get("w_diag")
    with np.errstate(over="ignore", invalid="ignore"):  # a sum of a matrix out of range may overflow: it fails
        w_max = None if w_diag is None else w_diag.max(-1).tolist()
        g_trace = lam.sum(-1).tolist() if guard else None
    n_sum = host["n_sum"]
    ok = _range.verdict(host["c_max"].tolist(), lam[:, -1].tolist(), w_max, plan.cdt, plan.edt)
    cancels = ok & _gram.cancels(n_sum.tolist(), g_trace, s) if guard else None
    lam = lam[:, ::-1]
    d, r = at.X.shape[-2], at.X.shape[-1]
    floor = noise_floor(n_sum, d, r, rounding_eps(plan.cdt, plan.edt))[:, None]
    return _Reading(lam=np.where(lam > floor, lam, 0.0), n_sum=n_sum, ok=ok, cancels=cancels,
                    rejected=host["rejected"] > 0 if "rejected" in host else None, lam1=lam[:, 0],
                    e=host["e"].astype(np.int64) if "e" in host else None)


def _to_host(device: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The one host synchronization: per-matrix values ((nb,) or (nb, k), any real or bool
    dtype) read as one float64 array and handed back by name, each in its own shape."""
    columns = [t.unsqueeze(-1) if t.dim() == 1 else t for t in device.values()]
    host = torch.cat(columns, -1) if len(columns) > 1 else columns[0]
    host = (host if host.device.type == "cpu" else host.cpu()).numpy().astype(np.float64, copy=False)
    out, k = {}, 0
    for (name, t), c in zip(device.items(), columns):  # slices: np.split costs ~20 us a call here
        out[name] = host[:, k] if t.dim() == 1 else host[:, k:k + c.shape[-1]]
        k += c.shape[-1]
    return out


def _map_back(plan: Plan, at: _Pass, coords: _gram.Coordinates, U: torch.Tensor, p: np.ndarray,
              transposed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The retained directions mapped back: L_p = Q U_p (orthonormal columns) and R_p = U_p^T H,
    columns past each matrix's own rank exact zeros, the scale 2^e on R_p; then unoriented."""
    s, pmax = U.shape[-1], int(p.max())
    Up = (U if pmax == s else U[..., s - pmax:]).flip(-1)
    if Up.dtype != plan.cdt:
        Up = Up.to(plan.cdt)
    if plan.tau is not None and p.min() < pmax:
        Up = Up * _device(torch.from_numpy(np.arange(pmax) < p[:, None, None]), Up.device)
    L = at.basis.apply(Up)
    R = _gram.rows(coords, Up, at.basis.C, at.Y)
    if at.e is not None:  # the scale goes on the singular-value side only; L stays orthonormal
        R = _range.scale_pow2(R, at.e.view(-1, 1, 1), parts=3)
    return unorient(L, R, transposed)


def _device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` (no call at all when that is the CPU)."""
    return t if device.type == "cpu" else t.to(device)


def _finish(plan: Plan, batch: tuple, B: torch.Tensor, A: torch.Tensor, p: np.ndarray, energy: np.ndarray,
            lam: np.ndarray, e: np.ndarray | None, info: dict, transposed: bool) -> RecompressResult:
    """The result: the whole batch in the caller's shape (a chunk stays flat for
    :func:`fraq.result.join_results`), host numbers as tensors on the factors' device;
    ``lam`` the spectrum reported, ``e`` the scale exponents (None: unscaled)."""
    sv = np.sqrt(lam)
    if e is not None:
        sv = np.ldexp(sv, e[:, None])
    cnp = np.float64 if plan.cdt == torch.float64 else np.float32
    whole = B.shape[0] == math.prod(batch)
    shape = batch if whole else (B.shape[0],)
    if whole and not batch:
        rank, energy_out = int(p[0]), float(energy[0])
    else:
        rank = _device(torch.from_numpy(p.reshape(shape)), B.device)
        energy_out = _device(torch.from_numpy(energy.astype(cnp).reshape(shape)), B.device)
    sv = _device(torch.from_numpy(np.ascontiguousarray(sv, dtype=cnp).reshape(*shape, -1)), B.device)
    if whole and len(batch) != 1:
        B, A = B.reshape(*batch, *B.shape[-2:]), A.reshape(*batch, *A.shape[-2:])
    if B.dtype != plan.out_dtype:
        B, A = B.to(plan.out_dtype), A.to(plan.out_dtype)
    return RecompressResult(B=B, A=A, rank=rank, energy=energy_out, singular_values=sv, tau=plan.tau,
                            backend=plan.backend, transposed=transposed, info=info)
