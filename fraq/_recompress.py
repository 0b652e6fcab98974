r"""Coordinate-space recompression of a stacked aggregate (the paper's Section 3.3).

The pipeline, one function per step, top to bottom in :func:`_pipeline`: orient, basis,
coordinates and Gram, eigenproblem, energy rule, map back, unorient. Which basis and
which Gram form a call runs is fixed once, from the FLOP counts of :mod:`fraq.flops` at
the call's (d, D, r) (:class:`fraq._plan.Plan`, :func:`fraq.flops.cheapest_path`): with
r >= d the basis is the identity and the coordinate space has d dimensions (the paper's
Appendix, general rank), so the cost is linear in r there. The mechanisms around it
live beside it, each in one module: the checked options and the plan
(:mod:`fraq._plan`), the CPU chunk and thread schedule
(:func:`fraq._parallel.over_chunks`), the range verdict and rescue (:mod:`fraq._range`),
the Gram forms and their cancellation guard (:mod:`fraq._gram`), and the verdicts on a
pass with the fallback each failed one takes (:mod:`fraq._fallbacks`). The pipeline
reads the device once per pass (:func:`fraq._fallbacks.read`), and the energy rule, the
noise floor and every verdict are decided on the host from that read; the common case
(finite, in range, no cancelling clients) runs the math once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from fraq import _gram, _range, _static
from fraq._eigen import eigh, resolve
from fraq._energy import energy_rule, gram_budget, rounding_eps
from fraq._fallbacks import Pass, settle
from fraq._orient import orient, unorient
from fraq._parallel import over_chunks
from fraq._plan import Options, Plan, check_options
from fraq._validation import check_pair, check_rank
from fraq.backends import REGISTRY
from fraq.result import RecompressResult, empty_result, join_results

__all__ = ["recompress"]

INFO_RULES = {"rescaled": "sum", "product_gram_count": "sum", "below_tau": "sum", "graded_basis": "sum",
              "factored_unresolved": "sum"}
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
    eigensolver: str = "auto",
    pipeline: str = "auto",
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
        eigensolver: where the r x r eigenproblems are solved (:mod:`fraq._eigen`):
            ``"device"`` (``torch.linalg.eigh`` where the factors are), ``"host"`` (LAPACK
            on the CPU, the Grams copied there and back), ``"cupy"`` (CuPy's batched
            solver on a CUDA device, through DLPack), or ``"auto"`` (the default:
            ``"cupy"`` on CUDA where CuPy imports, else ``"device"``; a route becomes a
            device's default only from an end-to-end measurement on that device). The
            result does not depend on the route beyond the eigensolver's rounding.
        pipeline: ``"stepwise"`` (the steps below, each verdict decided on the host as it
            comes), ``"static"`` (one pass at fixed shapes with one host read,
            :mod:`fraq._static`, where it applies: the ``cholesky`` basis of float32 data
            with a factored Gram; the stepwise pipeline elsewhere, and for a batch whose
            verdicts fail there), or ``"auto"`` (the default: the device's entry in
            :data:`fraq._plan.PIPELINE_DEFAULTS`). Both give the same ranks up to the
            rounding at the rule's thresholds; ``info["pipeline"]`` records the one that ran.

    Returns:
        :class:`fraq.RecompressResult`; ``info["gram"]`` is the requested form,
        ``info["eigensolver"]`` the route the eigenproblems took,
        ``info["product_gram_count"]`` counts the matrices whose Gram went through H (under
        ``gram="auto"`` also every matrix whose factored Gram cancels or loses a client's
        term to underflow), ``info["factored_unresolved"]`` (present only then) those whose
        explicitly requested factored Gram cannot resolve the aggregate: kept, and said,
        ``info["rescaled"]`` those that took the rescaled path, ``info["graded_basis"]`` those
        whose identity basis (r >= d) was replaced by the backend's because the kept
        spectrum reached below 8 sqrt(eps) sigma_1 (:func:`fraq._fallbacks._ungraded`), ``info["below_tau"]`` those
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

    References: the FRAQ paper (``docs/paper/fraq-paper.tex``), Eckart and Young (1936),
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
    B, A, s = _factors(B, A)
    options = check_options(tau=tau, rank=rank, backend=backend, eig_dtype=eig_dtype, gram=gram,
                            eigensolver=eigensolver, pipeline=pipeline, limit=s if s > 0 else None)
    return _recompress_impl(Plan.of(options, B, A), B, A)


def recompress_checked(options: Options, B: torch.Tensor, A: torch.Tensor) -> RecompressResult:
    """:func:`recompress` with options checked already (:func:`fraq._plan.check_options`,
    which knows no shapes): the whole-model aggregator checks its options once and hands
    them here for every group. Checked here, as :func:`recompress` checks them: the factors,
    and a fixed rank against this call's min(d, r)."""
    B, A, s = _factors(B, A)
    if options.rank is not None and s > 0:
        check_rank(options.rank, s)
    return _recompress_impl(Plan.of(options, B, A), B, A)


def _factors(B: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The checked pair, detached (values only: no autograd graph, see :func:`recompress`'s
    Gradients), and s = min(m, n, r), the largest rank a call can keep."""
    check_pair(B, A)
    if B.requires_grad or A.requires_grad:
        B, A = B.detach(), A.detach()
    return B, A, min(B.shape[-2], B.shape[-1], A.shape[-1])


@dataclass
class Started:
    """One call of :func:`start_checked`: its plan and checked factors, and its static pass
    where one is queued (None: the call runs the stepwise pipeline in :func:`finish_started`)."""

    plan: Plan
    B: torch.Tensor
    A: torch.Tensor
    static: _static.Started | None


def start_checked(options: Options, B: torch.Tensor, A: torch.Tensor) -> Started:
    """:func:`recompress_checked` in two halves, for a caller with several calls to make
    (the whole-model aggregator's shape groups): this one checks the call (the same checks,
    raised before any work) and queues its static pass where the plan takes it, reading
    nothing on the host; :func:`read_started` then reads every queued pass in one host read,
    and :func:`finish_started` gives each call's result, exactly :func:`recompress_checked`'s.
    The device runs one call's pass while the host queues the next, where one read per call
    would make the host wait on each in turn."""
    return start_checked_all(options, [(B, A)])[0]


def start_checked_all(options: Options, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[Started]:
    """:func:`start_checked` for every pair of ``pairs`` (a whole model's shape groups):
    each call checked before any work, then every static pass queued with the r x r stage
    run once over the calls that share it (:func:`fraq._static.start_many`: equal stacked
    rank, one eigenproblem batch, one energy rule, one verdict table), reading nothing on
    the host. Each call's result is :func:`recompress_checked`'s on its own pair: the same
    operations on each matrix, in larger batches."""
    checked = []
    for B, A in pairs:
        B, A, s = _factors(B, A)
        if options.rank is not None and s > 0:
            check_rank(options.rank, s)
        checked.append((Plan.of(options, B, A), B, A))
    static = [i for i, (plan, _, _) in enumerate(checked) if plan.static]
    passes = dict(zip(static, _static.start_many([checked[i] for i in static]))) if static else {}
    return [Started(plan, B, A, passes.get(i)) for i, (plan, B, A) in enumerate(checked)]


def read_started(started: list[Started]) -> list[np.ndarray | None]:
    """Each call's rows of its static pass's packed values (None: no pass queued), every
    queued pass read in one host read per device (:func:`fraq._static.read`)."""
    out: list[np.ndarray | None] = [None] * len(started)
    by_device: dict[torch.device, list[int]] = {}
    for i, st in enumerate(started):
        if st.static is not None:
            by_device.setdefault(st.static.packed.device, []).append(i)
    for idx in by_device.values():
        for i, host in zip(idx, _static.read([started[i].static for i in idx])):
            out[i] = host
    return out


def finish_started(started: Started, host: np.ndarray | None) -> RecompressResult:
    """The result of a started call from its rows of :func:`read_started`: the static pass's
    where its verdicts hold, else the stepwise pipeline's on the call's factors."""
    if started.static is not None and host is not None:
        res = _static.finish(started.plan, started.static, host)
        if res is not None:
            return res
    return _stepwise(started.plan, started.B, started.A)


def _recompress_impl(plan: Plan, B: torch.Tensor, A: torch.Tensor) -> RecompressResult:
    """Validated arguments -> result: the static pipeline where the plan takes it and its
    verdicts hold, else the stepwise pipeline (:func:`_stepwise`)."""
    if plan.static:
        res = _static.run(plan, B, A)
        if res is not None:
            return res
    return _stepwise(plan, B, A)


def _stepwise(plan: Plan, B: torch.Tensor, A: torch.Tensor) -> RecompressResult:
    """The stepwise pipeline on the batch flattened, applied whole or chunk by chunk."""
    batch = B.shape[:-2]
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    nb = math.prod(batch)
    d, D = min(m, n), max(m, n)
    run = partial(_pipeline, plan, (B, A), batch)

    def join(parts: list[RecompressResult], bounds: list[int]) -> RecompressResult:  # only when chunked
        return join_results(parts, bounds, batch, {**REGISTRY[plan.backend].info_rules, **INFO_RULES})

    return over_chunks(run, join, plan.workspace_bytes(d, D, r), B.reshape(nb, m, r), A.reshape(nb, r, n),
                       item_work=(d + D) * r * r)


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
    at = Pass(basis=plan.fast_basis_fn(X), X=X, Y=Y, factored=plan.factored)
    at, coords, eig, rd = settle(plan, whole, at, s, partial(_coordinates_and_eigen, plan))  # 3. and 4.
    if rd.e is not None or plan.out_dtype != plan.cdt:  # in range otherwise (see fraq._range.verdict)
        _range.check_representable(whole, rd.lam[:, 0], rd.e, plan.out_dtype, partial(_name_matrix, batch, offset))
    budget = gram_budget(rd.lam.sum(-1), s, rounding_eps(plan.cdt, plan.edt), rd.n_sum if at.factored else None)
    p, energy, short, q = energy_rule(rd.lam, plan.tau, plan.rank, budget)  # 5. energy rule, on the host
    B, A = _map_back(plan, at, coords, eig[1], p, transposed)  # 6. map back and 7. unorient
    info = {"rescaled": at.rescaled, "gram": plan.gram, "eigensolver": resolve(plan.eigensolver, B.device),
            "product_gram_count": 0 if at.factored else nb,
            "below_tau": int(short.sum()), "graded_basis": nb if plan.identity and "basis" not in at.basis.info else 0,
            **at.basis.info, "pipeline": "stepwise"}
    if rd.unjudged:  # gram="factored" asked for: the matrices that form cannot resolve (fraq._fallbacks.read)
        info["factored_unresolved"] = rd.unjudged
    lam = rd.lam if (q >= s).all() else np.where(np.arange(s) < q[:, None], rd.lam, 0.0)  # past q: rounding
    return _finish(plan, batch, B, A, p, energy, lam, rd.e, info, transposed)


def _name_matrix(batch: tuple, offset: int, k: int) -> str:
    """Matrix k of a chunk starting at ``offset``, by its index in the caller's batch, for messages."""
    return f" (matrix {tuple(int(i) for i in np.unravel_index(k + offset, batch))} of the batch)" if batch else ""


def _coordinates_and_eigen(plan: Plan, at: Pass) -> tuple[_gram.Coordinates, tuple | None]:
    """3. coordinates C and H = C Y (or W_Y) and the Gram, 4. its eigenproblem (None when refused)."""
    coords = _gram.coordinates(at.basis.C, at.Y, at.factored)
    return coords, eigh(coords.G, plan.edt, plan.eigensolver)



def _map_back(plan: Plan, at: Pass, coords: _gram.Coordinates, U: torch.Tensor, p: np.ndarray,
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
                            backend=plan.backend, transposed=transposed, info=info,
                            host_rank=tuple(p.tolist()))
