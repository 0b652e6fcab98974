r"""The static pipeline of :func:`fraq.recompress`: one pass at fixed shapes, one host read.

For factors computed in float32 (float32, or bfloat16 and float16 upcast), a backend
registered with ``static=True`` (the ``cholesky`` basis: :class:`fraq.backends.BackendSpec`)
and the factored Gram (a LoRA stack below the general-rank regime,
what a whole-model aggregate runs per shape group), :func:`run` queues every step of a
batch at shapes fixed by (nb, d, r, D) alone, so nothing waits for the host until the end:

.. math::
    W = X^\top X = LL^\top,\quad G = L^\top (YY^\top) L = U\Lambda U^\top,\quad
    B_p = X L^{-\top} U_p,\quad A_p = (L U_p)^\top Y,

which is the stepwise pipeline's factored form with C = R = L^T (the ``cholesky``
basis, :mod:`fraq.backends.cholesky`). The energy rule with both rounding bounds
(:func:`fraq._energy.energy_rule_device`) and every verdict run on the device; the ranks,
the verdict and the energies are packed into one (nb, 5) float64 tensor and read once.
The retained directions are mapped back at the static width (all s under the energy rule,
columns past each matrix's rank masked to exact zeros) and cut at the largest rank on the
host after the read (a view). A batch where any verdict fails returns None, and the caller
runs the stepwise pipeline (:mod:`fraq._recompress`) on it: the same result as if this
pipeline did not exist.

**Precision.** X goes to float64 (exact) and W is formed there: products of float32
numbers are exact in float64, so W carries one rounding per sum and the Cholesky basis
keeps float32 orthogonality while kappa(X)^2 eps_64 <= eps_32 / 16 (the backend's
:data:`~fraq.backends.cholesky.CONDITION_MARGIN`). Y Y^T runs in float32 (the one pass
over the long side D, in the data's dtype), every other r x r step in float64, which
also holds the squared range of float32 data without under- or overflow. B_p is applied
in float64 (as the backend applies Q); A_p is a float32 GEMM over D.

**No scaling of the data.** In float64 nothing here under- or overflows, and scaling X's
columns by powers of two (:func:`fraq._range.equilibrate`) would only scale W's rows and
columns, L's rows and G's factors by exact powers that cancel: the arithmetic is the
same. What the scaling does change is the conditioning verdict, since kappa_F(R) is not
invariant to it while Q = X R^{-1} is. The verdict is taken at the column scaling
D = diag(W)^{-1/2} of the r x r Gram, within sqrt(r) of the best diagonal scaling (van
der Sluis, Numer. Math. 14, 1969): kappa_F(RD)^2 = r ||L^{-1} diag(W)^{1/2}||_F^2,
since ||RD||_F^2 = tr(DWD) = r.

**Verdicts** (all per matrix; a NaN fails every one):

* the Cholesky factorization succeeded and kappa_F(RD)^2 eps_64 <= eps_32 / 16;
* every column norm ||x_k|| = sqrt(W_kk) lies in [tiny / eps, max eps] of float32, so
  (L U_p)^T, whose entries are at most ||x_k||, is a normal float32 number;
* every row Gram W_Y,kk = ||y_k||^2 lies in [tiny / eps^2, max eps] of float32: Y Y^T in
  float32 neither underflows nor overflows (:func:`fraq._range.verdict` asks this of the
  largest entry only, after scaling Y's rows against X's columns; unscaled, each row
  must pass);
* lambda_1 lies in the range :func:`fraq._range.verdict` asks of it, and
  N = sum_k ||x_k|| ||y_k|| <= max eps of float32, so no term of the float32 GEMM for A_p
  overflows;
* with ``gram="auto"``, no cancelling clients (:func:`fraq._gram.cancels`: the stepwise
  pipeline forms their Gram through H).

Factors rescaled against each other by 1e23, a zero factor column, a NaN or an Inf fail
one of these and take the stepwise pipeline, which rescales, falls back, or names the
value.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from fraq._eigen import eigh, resolve
from fraq._energy import energy_rule_device, floor_constant, rounding_eps
from fraq._gram import CANCEL_LIMIT
from fraq._layout import tall_product
from fraq._orient import orient, unorient
from fraq._range import limits
from fraq._validation import compute_dtype
from fraq.backends import REGISTRY
from fraq.backends.cholesky import CONDITION_MARGIN
from fraq.result import RecompressResult

if TYPE_CHECKING:
    from fraq._plan import Plan

__all__ = ["Started", "applies", "finish", "read", "run", "start", "start_many"]


def applies(backend: str, dtype: torch.dtype, identity: bool, factored: bool, eigensolver: str) -> bool:
    """Whether a call can take this pipeline: a registered backend whose basis this pass
    computes (its registry entry's ``static``: the ``cholesky`` basis), data computed in
    float32 (float32, bfloat16, float16), below the general-rank regime (r < d), a factored
    Gram, and an eigensolver route that reads nothing on the host (``"host"`` copies the
    Grams there)."""
    return (REGISTRY[backend].static and compute_dtype(dtype) == torch.float32 and not identity and factored
            and eigensolver != "host")


def run(plan: Plan, B: torch.Tensor, A: torch.Tensor) -> RecompressResult | None:
    """The result of B (*, m, r), A (*, r, n) by the static pipeline, or None where a verdict
    fails (then nothing of this pass is used). ``plan`` must satisfy :func:`applies`."""
    started = start(plan, B, A)
    return None if started is None else finish(plan, started, read([started])[0])


@dataclass
class Started:
    """A static pass queued on the device and not yet read: its outputs at the static width,
    the packed verdicts, ranks and energies (:func:`_core`; ``packed`` the rows of this
    call; ``rows`` the tensor they are rows ``lo`` on of, several calls' when their r x r
    stage ran as one batch, else None), and the batch's shape and orientation for
    :func:`finish`."""

    batch: tuple
    transposed: bool
    out: dict
    packed: torch.Tensor
    rows: torch.Tensor | None = None
    lo: int = 0


def start(plan: Plan, B: torch.Tensor, A: torch.Tensor) -> Started | None:
    """Queue the pass of B (*, m, r), A (*, r, n): nothing is read on the host, so the
    device works while the caller queues more (:func:`read` then reads many passes at
    once). None where the pass cannot run (an empty batch or side, or the eigensolver
    refused a non-finite Gram): the caller runs the stepwise pipeline."""
    front = _front(plan, B, A)
    done = None if front is None else _start_core(plan, [front])
    return None if done is None else done[0]


def start_many(calls: list[tuple[Plan, torch.Tensor, torch.Tensor]]) -> list[Started | None]:
    """:func:`start` for several calls (a whole model's shape groups), each ``plan``
    satisfying :func:`applies`: each call's basis and Gram at its own shapes, then the
    r x r stage (eigenproblem, energy rule with its rounding bounds, verdicts, the packed
    values) once over every call that shares it (:func:`_core_key`: the same stacked
    rank, rule constants, dtypes and device), then each call's map back at its shapes.
    Every matrix gets exactly the operations it gets alone, in a larger batch: the r x r
    kernels run once per call instead of once per group. A batch whose eigenproblem is
    refused (a non-finite Gram) is split into its calls, each started alone."""
    fronts = [_front(plan, B, A) for plan, B, A in calls]
    out: list[Started | None] = [None] * len(calls)
    by_key: dict[tuple, list[int]] = {}
    for i, f in enumerate(fronts):
        if f is not None:
            by_key.setdefault(_core_key(calls[i][0], f), []).append(i)
    for idx in by_key.values():
        done = _start_core(calls[idx[0]][0], [fronts[i] for i in idx])
        if done is None and len(idx) > 1:
            done = [_start_core(calls[i][0], [fronts[i]]) for i in idx]
            done = [d[0] if d is not None else None for d in done]
        for i, st in zip(idx, done or [None] * len(idx)):
            out[i] = st
    return out


def read(started: list[Started]) -> list[np.ndarray]:
    """The packed rows of every pass in ``started``, read from the device in one host read
    (the passes on one device; their rows joined there first when they are rows of more
    than one tensor)."""
    if not started:
        return []
    sources = [s.packed if s.rows is None else s.rows for s in started]
    at: dict[int, int] = {}  # each distinct source tensor's first row in the joined read
    tensors, k = [], 0
    for t in sources:
        if id(t) not in at:
            at[id(t)] = k
            tensors.append(t)
            k += t.shape[0]
    joined = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
    host = (joined if joined.device.type == "cpu" else joined.cpu()).numpy()  # the one host read
    out = []
    for s, src in zip(started, sources):
        lo = at[id(src)] + s.lo
        out.append(host[lo:lo + s.packed.shape[0]])
    return out


def finish(plan: Plan, started: Started, host: np.ndarray) -> RecompressResult | None:
    """The result of a pass from its rows of :func:`read`, or None where a verdict failed
    (then nothing of the pass is used, and the caller runs the stepwise pipeline)."""
    if not host[:, 0].all():
        return None
    return _result(plan, started.batch, started.out, host, started.transposed)


@dataclass
class _Front:
    """One call's first steps (:func:`_front`): its batch and orientation, Y in the compute
    dtype, and its basis and Gram."""

    batch: tuple
    transposed: bool
    Y: torch.Tensor
    bg: BasisAndGram
    d: int
    r: int


def _front(plan: Plan, B: torch.Tensor, A: torch.Tensor) -> _Front | None:
    """Orient the call's factors and form its basis and Gram (:func:`basis_and_gram`);
    None for an empty batch or side (the stepwise pipeline's empty result)."""
    batch = B.shape[:-2]
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    nb = math.prod(batch)
    if nb == 0 or min(m, n, r) == 0:
        return None
    X, Y, transposed = orient(B.reshape(nb, m, r), A.reshape(nb, r, n))
    Y = Y.to(plan.cdt)  # no op for float32 data
    return _Front(batch, transposed, Y, basis_and_gram(X, Y), X.shape[-2], r)


def _core_key(plan: Plan, front: _Front) -> tuple:
    """Calls with equal keys share the r x r stage (:func:`start_many`): the same stacked
    rank r (hence s = r below the general-rank regime), floor constant, dtypes, rule and
    route, on one device. Every constant of the stage (:func:`_bounds`, the energy rule)
    is then the same for each of their matrices."""
    return (front.r, floor_constant(front.d, front.r), plan.tau, plan.rank, plan.cdt, plan.edt, plan.out_dtype,
            plan.guard, plan.eigensolver, front.bg.G.device)


def _start_core(plan: Plan, fronts: list[_Front]) -> list[Started] | None:
    """The r x r stage over every front's matrices as one batch (:func:`_core`), then each
    front's map back; None where the eigensolver refused the batch's Gram."""
    core = _core(plan, fronts)
    if core is None:
        return None
    Up, rule, packed = core
    single = len(fronts) == 1
    out, lo = [], 0
    for f in fronts:
        nb = f.bg.G.shape[0]
        hi = lo + nb
        sl = slice(lo, hi)
        Upf = Up if single else Up[sl]
        Bp, Ap = _back(plan, f, Upf)
        rank, energy, lam = (rule.counts[:, 1], rule.energy, rule.lam) if single else \
            (rule.counts[sl, 1], rule.energy[sl], rule.lam[sl])
        res = dict(L=Bp, R=Ap, rank=rank, energy=energy.to(plan.cdt), sv=lam.sqrt().to(plan.cdt))
        out.append(Started(f.batch, f.transposed, res, packed if single else packed[sl],
                           None if single else packed, lo))
        lo = hi
    return out


def _core(plan: Plan, fronts: list[_Front]):
    """The r x r stage on the device, one batch over every front's matrices: the
    eigenproblem, the energy rule (:func:`fraq._energy.energy_rule_device`), the verdicts
    (:func:`_verdict`) and the retained directions U_p (columns past each matrix's rank
    exact zeros), with the packed values the host reads; None where the eigensolver refused
    a non-finite Gram."""
    f0 = fronts[0]
    d, r = f0.d, f0.r
    s = min(d, r)
    if len(fronts) == 1:
        G, W, WY, Linv, info = f0.bg.G, f0.bg.W, f0.bg.WY, f0.bg.Linv, f0.bg.info
    else:  # every front's r x r parts as one batch
        G, W, WY, Linv, info = (torch.cat([getattr(f.bg, k) for f in fronts]) for k in ("G", "W", "WY", "Linv", "info"))
    eig = eigh(G, plan.edt, plan.eigensolver, check=False)
    if eig is None:
        return None
    lam, U = eig[0].to(torch.float64), eig[1].to(torch.float64)  # no op for the default float64 solver
    lam, U = lam.flip(-1), U.flip(-1)  # descending
    wd, yd = W.diagonal(dim1=-2, dim2=-1), WY.diagonal(dim1=-2, dim2=-1)
    n_sum = torch.sqrt(wd * yd).sum(-1)  # N = sum_k ||x_k|| ||y_k||
    rule = energy_rule_device(lam, n_sum, plan.tau, plan.rank, d=d, r=r,
                              eps=rounding_eps(plan.cdt, plan.edt), factored=True)
    kappa = torch.linalg.vector_norm(Linv * wd.sqrt().unsqueeze(-2), dim=(-2, -1))  # kappa_F(RD) / sqrt(r)
    ok = _verdict(plan, s, (d, r), info, kappa, wd, yd, lam[:, 0], n_sum, rule)
    Up = U if plan.rank is None else U[..., :plan.rank]
    if plan.rank is None:
        Up = Up * rule.keep.unsqueeze(-2)  # past each rank: exact zeros
    packed = torch.cat([ok.unsqueeze(-1), rule.counts, rule.energy.unsqueeze(-1)], -1)
    return Up, rule, packed


def _back(plan: Plan, front: _Front, Up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One front's retained directions mapped back at the static width: B_p = X L^{-T} U_p
    (Q U_p, applied in float64) and A_p = (L U_p)^T Y (a float32 GEMM over D)."""
    bg = front.bg
    Bp = tall_product(bg.Xw, torch.bmm(bg.Linv.mT, Up)).to(plan.cdt).to(plan.out_dtype)  # Q U_p = X R^{-1} U_p
    Ap = torch.bmm(torch.bmm(bg.L, Up).to(plan.cdt).mT, front.Y).to(plan.out_dtype)  # U_p^T C Y
    return Bp, Ap


class BasisAndGram(NamedTuple):
    """The pass's first steps (:func:`basis_and_gram`)."""

    Xw: torch.Tensor
    W: torch.Tensor
    L: torch.Tensor
    info: torch.Tensor
    Linv: torch.Tensor
    WY: torch.Tensor
    G: torch.Tensor


def basis_and_gram(X: torch.Tensor, Y: torch.Tensor) -> BasisAndGram:
    """The pass's basis and Gram of X (nb, d, r) and Y (nb, r, D) in the compute dtype: X in
    float64 (exact), W = X^T X (one rounding per sum), its Cholesky factor L (``info`` its
    verdict, read later) and L^{-1}, Y Y^T over the long side in Y's dtype then float64, and
    G = L^T (Y Y^T) L. Nothing is read on the host."""
    Xw = X.to(torch.float64)
    W = torch.bmm(Xw.mT, Xw)  # exact products, one rounding per sum
    L, info = torch.linalg.cholesky_ex(W)
    Linv = torch.linalg.solve_triangular(L, _eye(X.shape[-1], L.device), upper=False)
    WY = torch.bmm(Y, Y.mT).to(torch.float64)  # over the long side D, in float32
    G = torch.bmm(L.mT, torch.bmm(WY, L))  # C (Y Y^T) C^T, C = L^T
    return BasisAndGram(Xw, W, L, info, Linv, WY, G)


def _verdict(plan: Plan, s: int, dr: tuple[int, int], info, kappa, wd, yd, lam1, n_sum, rule) -> torch.Tensor:
    """Per matrix, bool: every verdict of the module docstring holds, as one (nb, 2 r + 5)
    table (the Cholesky info, kappa, lambda_1, N, the cancellation ratio, then each W_kk and
    each W_Y,kk) clamped to its bounds: a value is in range where clamping leaves it equal,
    which a NaN never is. The cancellation ratio rho^2 = N^2 / tr G is taken as floor / T,
    the floor (k eps N)^2 over the trace above it (at most tr G): a borderline matrix is
    judged to cancel and takes the stepwise pipeline, which judges it on tr G itself."""
    cancel = rule.floor / rule.total if plan.guard else n_sum
    values = torch.cat([t.unsqueeze(-1) for t in (info, kappa, lam1, n_sum, cancel)] + [wd, yd], -1)
    lo, hi = _bounds(plan.cdt, plan.edt, plan.out_dtype, s, dr, plan.guard, values.device)
    return (torch.clamp(values, lo, hi) == values).all(-1)


@functools.lru_cache(maxsize=64)
def _bounds(cdt: torch.dtype, edt: torch.dtype, out_dtype: torch.dtype, s: int, dr: tuple[int, int], guard: bool,
            device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The (lo, hi) rows of :func:`_verdict`'s table, made once per dtypes, shape and device.
    lambda_1 is also held to what the result's dtype can carry, sigma_1 in [tiny, max / 2]
    (:func:`fraq._range.check_representable`, which names a value outside it)."""
    c_lo, c_hi, g_lo, g_hi, w_lo, w_hi = limits(cdt, edt)
    fo = torch.finfo(out_dtype)
    g_lo, g_hi = max(g_lo, fo.tiny**2), min(g_hi, (fo.max / 2) ** 2)
    r = dr[1]  # kappa_F(RD)^2 = r ||L^{-1} diag(W)^{1/2}||_F^2 against the backend's limit
    limit = math.sqrt(torch.finfo(cdt).eps / (CONDITION_MARGIN * torch.finfo(torch.float64).eps) / r)
    inf = float("inf")
    k = floor_constant(*dr)
    cancel = CANCEL_LIMIT * max(s, 1) * (k * rounding_eps(cdt, edt)) ** 2 if guard else inf
    lo = [0.0, -inf, g_lo, -inf, -inf] + [c_lo**2] * r + [w_lo] * r
    hi = [0.0, limit, g_hi, c_hi, cancel] + [c_hi**2] * r + [w_hi] * r
    return (torch.tensor(lo, dtype=torch.float64, device=device),
            torch.tensor(hi, dtype=torch.float64, device=device))


@functools.lru_cache(maxsize=64)
def _eye(r: int, device: torch.device) -> torch.Tensor:
    """The r x r float64 identity on ``device``, made once (the right-hand side of L^{-1})."""
    return torch.eye(r, dtype=torch.float64, device=device)


def _result(plan: Plan, batch: tuple, out: dict, host: np.ndarray, transposed: bool) -> RecompressResult:
    """The result from the pass and its host read: factors cut at the largest rank (a view),
    the ranks and energies on the device, and as Python numbers where unbatched."""
    ranks = tuple(int(k) for k in host[:, 2])
    pmax = max(ranks) if plan.rank is None else plan.rank
    L, R = out["L"][..., :pmax], out["R"][..., :pmax, :]
    B, A = unorient(L, R, transposed)
    if batch:
        B, A = B.reshape(*batch, *B.shape[-2:]), A.reshape(*batch, *A.shape[-2:])
        rank, energy = out["rank"].reshape(batch), out["energy"].reshape(batch)
    else:
        B, A, rank, energy = B[0], A[0], ranks[0], float(host[0, 4])
    info = {"rescaled": 0, "gram": plan.gram, "eigensolver": resolve(plan.eigensolver, B.device),
            "product_gram_count": 0, "below_tau": int(((host[:, 2] > 0) & (host[:, 2] < host[:, 3])).sum()),
            "graded_basis": 0, "backend": plan.backend, "fallback": None, "fallback_count": 0,
            "pipeline": "static"}
    sv = out["sv"].reshape(*batch, -1)
    return RecompressResult(B=B, A=A, rank=rank, energy=energy, singular_values=sv, tau=plan.tau,
                            backend=plan.backend, transposed=transposed, info=info, host_rank=ranks)
