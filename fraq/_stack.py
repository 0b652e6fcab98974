"""Exact weighted stacking of client LoRA factors (the paper's Eq. 7)."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from fraq._parallel import chunk_bounds, map_chunks
from fraq._range import amax
from fraq._validation import check_client_numbers, check_finite, check_pair

__all__ = ["fill_stacks", "normalized_weights", "stack"]


def normalized_weights(weights: Sequence[float] | torch.Tensor | None, count: int) -> list[float]:
    """Aggregation weights :math:`a_k = n_k / \\sum_j n_j` (uniform when ``weights`` is None).

    The weights are divided by the largest one before they are summed, so any finite
    non-negative weights (1e308 included) normalize without overflow.
    """
    if weights is None:
        return [1.0 / count] * count
    w = check_client_numbers("weights", weights, count, nonnegative=True)
    top = max(w)
    if top <= 0.0:
        raise ValueError(f"weights(={w}) must not all be zero")
    w = [x / top for x in w]
    total = math.fsum(w)
    return [x / total for x in w]


def stack(
    Bs: Sequence[torch.Tensor],
    As: Sequence[torch.Tensor],
    weights: Sequence[float] | torch.Tensor | None = None,
    scales: Sequence[float] | torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Stack K clients' LoRA factors so that their product is the exact aggregate.

    .. math::
        B = [\sqrt{a_1} B_1, \dots, \sqrt{a_K} B_K], \qquad
        A = [\sqrt{a_1} s_1 A_1; \dots; \sqrt{a_K} s_K A_K], \qquad
        BA = \sum_k a_k s_k B_k A_k .

    The weight is split as :math:`\sqrt{a_k}` on both factors (the paper's Eq. 7, not
    FLoRA's public code, which puts all of it on A): the product is the same, but the
    two stacks stay equally well scaled, which is what a QR of either one sees.

    Args:
        Bs: K tensors of shape (*, m, r_k); ranks r_k may differ, batch shapes may not.
        As: K tensors of shape (*, r_k, n).
        weights: K non-negative numbers (data sizes, say), normalized inside to sum to
            one. Default: uniform 1/K.
        scales: K LoRA scales s_k = alpha_k / r_k (or alpha_k / sqrt(r_k) with rsLoRA).
            Default: 1.
        dtype: dtype of the stacks; default the clients' common dtype. Pass
            ``torch.float32`` to keep bf16 clients' stacks free of a second rounding.
            Every weighted client factor must fit it (see Raises).

    Returns:
        ``(B, A)`` of shapes (*, m, r) and (*, r, n), r = sum_k r_k. ``B`` is laid out
        column-major (``B.mT`` is contiguous) so the QR in :func:`fraq.recompress` reads
        it without a transposing copy; ``A`` is row-major.

    Raises:
        ValueError: a factor holds a NaN or an infinity; or a weighted client factor,
            sqrt(a_k) B_k or sqrt(a_k) s_k A_k, would leave the normal range of ``dtype``
            in some matrix: its largest entry above ``finfo(dtype).max`` (it would become
            inf) or, for a nonzero factor, below ``finfo(dtype).tiny`` (all its entries
            would be subnormal or zero, losing digits silently). Nothing is rescaled
            behind the caller's back: float16 (range 6.1e-5 to 65504) is the usual case,
            and ``dtype=torch.float32`` the usual remedy.

    Cost: one pass to stack them, (m + n) r multiplications per matrix, and one over the
    stacks to check them (the largest entries of each client's block per matrix, one host
    synchronization for all clients); only a block that fails is checked again from the
    client's own factors, to name it.

    Examples:
        >>> import torch, fraq
        >>> g = torch.Generator().manual_seed(0)
        >>> Bs = [torch.randn(32, r, generator=g, dtype=torch.float64) for r in (4, 8)]
        >>> As = [torch.randn(r, 24, generator=g, dtype=torch.float64) for r in (4, 8)]
        >>> B, A = fraq.stack(Bs, As, weights=[30, 10], scales=[2.0, 0.5])
        >>> B.shape, A.shape
        (torch.Size([32, 12]), torch.Size([12, 24]))
        >>> exact = 0.75 * 2.0 * Bs[0] @ As[0] + 0.25 * 0.5 * Bs[1] @ As[1]
        >>> bool(torch.linalg.norm(B @ A - exact) <= 1e-13 * torch.linalg.norm(exact))
        True
    """
    Bs, As = list(Bs), list(As)
    if len(Bs) == 0:
        raise ValueError("Bs is empty: stack needs at least one client")
    if len(Bs) != len(As):
        raise ValueError(f"Bs and As must have one entry per client: len(Bs)={len(Bs)}, len(As)={len(As)}")
    K = len(Bs)
    for k in range(K):
        check_pair(Bs[k], As[k], f"Bs[{k}]", f"As[{k}]")
    ref_b, ref_a = Bs[0], As[0]
    for k in range(1, K):
        if Bs[k].shape[:-1] != ref_b.shape[:-1]:
            raise ValueError(
                f"Bs[{k}].shape={tuple(Bs[k].shape)} does not match Bs[0].shape={tuple(ref_b.shape)} "
                "outside the rank dimension (*, m, r_k)"
            )
        if As[k].shape[:-2] + As[k].shape[-1:] != ref_a.shape[:-2] + ref_a.shape[-1:]:
            raise ValueError(
                f"As[{k}].shape={tuple(As[k].shape)} does not match As[0].shape={tuple(ref_a.shape)} "
                "outside the rank dimension (*, r_k, n)"
            )
        if Bs[k].dtype != ref_b.dtype:
            raise TypeError(f"Bs[{k}].dtype={Bs[k].dtype} differs from Bs[0].dtype={ref_b.dtype}")
        if Bs[k].device != ref_b.device:
            raise ValueError(f"Bs[{k}] is on {Bs[k].device}, Bs[0] on {ref_b.device}")
    a = normalized_weights(weights, K)
    s = [1.0] * K if scales is None else check_client_numbers("scales", scales, K, nonnegative=False)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype(={dtype!r}) must be a floating torch.dtype")
    dtype = dtype or ref_b.dtype
    B, A = _stack_impl(Bs, As, a, s, dtype)
    if not _stacked_in_range(B, A, [b.shape[-1] for b in Bs], dtype):
        _check_weighted_range(Bs, As, a, s, dtype)
    return B, A


def _stacked_in_range(B: torch.Tensor, A: torch.Tensor, ranks: list[int], dtype: torch.dtype) -> bool:
    """Whether every client's weighted factors, as written into the stacks, are finite, at
    most :func:`_check_weighted_range`'s limit and, matrix by matrix, nonzero and normal:
    then that check has nothing to refuse (each stored entry is the weighted factor rounded
    once, so a stored block whose largest entry is normal and below the limit is one whose
    weighted factor is). Two reductions per stack for all clients at once (per row of the
    (*, r, m) buffer B is the transpose of, and of A), one host read, where the check reads
    each client's factors in turn; a block that is zero, subnormal, non-finite or above
    the limit (or an empty stack) sends the call to the check itself, which names the
    client or passes it (a client whose factor is exactly zero, or whose weight or scale
    is 0)."""
    nb = B.numel() // max(B.shape[-2] * B.shape[-1], 1)
    if B.numel() == 0 or A.numel() == 0 or min(ranks) == 0 or not B.mT.is_contiguous() or not A.is_contiguous():
        return False
    r = B.shape[-1]
    rows_b, rows_a = B.mT.reshape(nb, r, B.shape[-2]), A.reshape(nb, r, A.shape[-1])
    # amax and amin, not aminmax: on the CPU the pair is several times faster along a row
    ext = torch.stack([rows_b.amax(-1), rows_b.amin(-1), rows_a.amax(-1), rows_a.amin(-1)]).double().numpy()
    top = np.maximum(ext[0::2], -ext[1::2])  # (2, nb, r): |entry| max per row, NaN kept
    starts = np.cumsum([0] + ranks[:-1])
    blocks = np.maximum.reduceat(top, starts, axis=-1)  # (2, nb, K): per factor, matrix and client
    fi = torch.finfo(dtype)
    return bool(((blocks >= fi.tiny) & (blocks <= fi.max / (1 + 4 * fi.eps))).all())


def _check_weighted_range(Bs, As, a, s, dtype):
    """Refuse NaN/inf factors and weighted factors that leave ``dtype``'s normal range.

    The per-matrix largest entries of every client factor are read in one host
    synchronization; a non-finite one is then located by :func:`check_finite`.
    """
    factors = Bs + As
    nb = math.prod(Bs[0].shape[:-2])  # every client has this batch shape
    if nb == 0:
        return
    tops = torch.stack([_largest_entries(t, nb) for t in factors]).double()  # (2K, nb)
    live = torch.where(tops > 0, tops, math.inf)
    stats = torch.stack([tops.amax(dim=1), live.amin(dim=1)], dim=1).tolist()
    fi = torch.finfo(dtype)
    limit = fi.max / (1 + 4 * fi.eps)  # rounding of the weighted value cannot reach inf
    K = len(Bs)
    for j, (hi, lo) in enumerate(stats):
        k = j % K
        name = f"Bs[{k}]" if j < K else f"As[{k}]"
        if not math.isfinite(hi):
            check_finite(name, (Bs + As)[j])
        c = math.sqrt(a[k]) * (1.0 if j < K else abs(s[k]))
        what = f"sqrt(a_{k})={math.sqrt(a[k]):.3g}" + ("" if j < K else f" * scales[{k}]={s[k]:.3g}")
        if hi * c > limit:
            raise ValueError(
                f"{name} times {what} has entries up to {hi * c:.3g}, above the largest {dtype} "
                f"({fi.max:.3g}): it would overflow to inf; stack in a wider dtype (dtype=torch.float32)"
            )
        if c > 0 and math.isfinite(lo) and lo * c < fi.tiny:
            raise ValueError(
                f"{name} times {what} has a nonzero matrix whose largest entry is {lo * c:.3g}, below the "
                f"smallest normal {dtype} ({fi.tiny:.3g}): it would underflow to subnormal numbers or 0; "
                "stack in a wider dtype (dtype=torch.float32) or rescale the client's factors"
            )


def _largest_entries(t, nb):
    """max |t| per matrix (:func:`fraq._range.amax`), flattened to (nb,)."""
    return amax(t).reshape(nb)


def _stack_impl(Bs, As, a, s, dtype):
    batch = Bs[0].shape[:-2]
    m, n = Bs[0].shape[-2], As[0].shape[-1]
    r = sum(b.shape[-1] for b in Bs)
    device = Bs[0].device
    # B is written into a (*, r, m) buffer and returned as its transpose: column-major.
    Bt = torch.empty(*batch, r, m, dtype=dtype, device=device)
    A = torch.empty(*batch, r, n, dtype=dtype, device=device)
    fill_stacks(Bt.mT, A, zip(Bs, As), a, s)
    return Bt.mT, A


Factor = torch.Tensor | Sequence[torch.Tensor]
"""One client's factor: a tensor, or L per-module matrices written as their stack (L, *, *)."""


def fill_stacks(B: torch.Tensor | None, A: torch.Tensor, clients: Iterable[tuple[Factor | None, Factor]],
                a: Sequence[float], s: Sequence[float], *, in_dtype: bool = False) -> None:
    r"""Write Eq. 7's weighted stacks into the preallocated ``B`` (*, m, r) and ``A`` (*, r, n).

    Client k's factors go to columns (rows of A) ``lo:lo + r_k`` in client order, as
    :math:`\sqrt{a_k} B_k` and :math:`\sqrt{a_k} s_k A_k`. ``clients[k]`` is ``(B_k, A_k)``:
    tensors (*, m, r_k) and (*, r_k, n), or two sequences of L per-module matrices (m, r_k)
    and (r_k, n), copied straight into their slices as their stack (then * is (L,)), so a
    whole-model group of modules needs no (L, m, r_k) intermediate. This is the one
    implementation of the stacking: :func:`stack` and the aggregators' groups
    (:meth:`fraq.aggregators.Group.stacked`) both call it. With ``B`` None only ``A`` is
    written (single-matrix uploads, whose B_k are None).

    Precision: every weighted factor is rounded once, into the stacks' dtype. When the
    copy into the slice is exact (the stacks' dtype holds the client's) the slice is copied
    and then scaled in place while it is in cache (float16 and bfloat16 products are
    computed in float32 and rounded once, as torch does for them); otherwise (a narrower
    dtype than the client's) the factor is scaled in at least float32 and rounded on the
    way in.

    ``in_dtype=True`` says the caller has checked that every factor is in the stacks' dtype
    (:func:`fraq.aggregators.validate_updates` does, per module), so no factor's dtype is
    read again here: that is one attribute read per (client, module) pair, the Python cost
    of a round that grows with the model.

    It trusts its arguments (the callers validate) and never synchronizes with the host:
    a caller may fill disjoint stacks from several threads or streams. On a CPU with more
    than one torch thread, a batch of stacks worth sharing (:func:`fraq._parallel.chunk_bounds`)
    is filled chunk by chunk of matrices, one thread per chunk, each copy on its thread
    alone (:func:`fraq._parallel.map_chunks`), as :func:`fraq.recompress` shares its batch;
    a batch of one chunk is filled whole on the caller (a chunk's slicing costs ops and
    shares nothing).
    """
    clients = list(clients)
    if A.dim() < 3 or A.shape[0] < 2 or A.device.type != "cpu" or torch.get_num_threads() < 2:
        _fill(B, A, clients, a, s, None, in_dtype)
        return
    bounds = chunk_bounds(A.shape[0], (A[0].numel() + (0 if B is None else B[0].numel())) * A.element_size())
    if len(bounds) == 2:  # one chunk: the whole stacks on the caller, without a chunk's slicing
        _fill(B, A, clients, a, s, None, in_dtype)
        return

    def chunk(Ac: torch.Tensor, lo: int) -> None:
        span = slice(lo, lo + Ac.shape[0])
        _fill(None if B is None else B[span], Ac, clients, a, s, span, in_dtype)

    map_chunks(chunk, bounds, A, with_offset=True)


def _fill(B: torch.Tensor | None, A: torch.Tensor, clients: list, a: Sequence[float], s: Sequence[float],
          span: slice | None, in_dtype: bool = False) -> None:
    """:func:`fill_stacks` on stacks that hold the matrices ``span`` of each client's factors (all: None)."""
    if _one_copy(B, A, clients, in_dtype):
        if span is not None:
            clients = [(None if Bk is None else Bk[span], Ak[span]) for Bk, Ak in clients]
        _fill_one_copy(B, A, clients, a, s)
        return
    if _one_cat(B, A, clients):
        if span is not None:
            clients = [(None if Bk is None else Bk[span], Ak[span]) for Bk, Ak in clients]
        _fill_one_cat(B, A, clients, a, s)
        return
    lo = 0
    for (Bk, Ak), ak, sk in zip(clients, a, s):
        hi = lo + (Ak.shape[-2] if isinstance(Ak, torch.Tensor) else Ak[0].shape[-2])
        root = math.sqrt(ak)
        if B is not None:
            _put(B[..., lo:hi], Bk if span is None else Bk[span], root)
        _put(A[..., lo:hi, :], Ak if span is None else Ak[span], root * sk)
        lo = hi


def _one_copy(B: torch.Tensor | None, A: torch.Tensor, clients: list, in_dtype: bool = False) -> bool:
    """Whether every client's factors are per-module lists in the stacks' own dtype (known
    where ``in_dtype``), and the stacks' rows are contiguous: then each stack is filled by
    one copy (:func:`_fill_one_copy`)."""
    if A.dim() != 3 or not A.is_contiguous() or (B is not None and not B.mT.is_contiguous()):
        return False
    if in_dtype:
        return not any(isinstance(Ak, torch.Tensor) for _, Ak in clients)
    return all(not isinstance(Ak, torch.Tensor) and all(t.dtype == A.dtype for t in Ak)
               and (B is None or all(t.dtype == B.dtype for t in Bk)) for Bk, Ak in clients)


def _one_cat(B: torch.Tensor | None, A: torch.Tensor, clients: list) -> bool:
    """Whether every client's factors are tensors in the stacks' own dtype and the stacks are
    laid out as :func:`_stack_impl` makes them (A row-major, B column-major): then each stack
    is one concatenation along the rank (:func:`_fill_one_cat`)."""
    if not A.is_contiguous() or (B is not None and not B.mT.is_contiguous()):
        return False
    return all(isinstance(Ak, torch.Tensor) and Ak.dtype == A.dtype
               and (B is None or (isinstance(Bk, torch.Tensor) and Bk.dtype == B.dtype)) for Bk, Ak in clients)


def _fill_one_cat(B: torch.Tensor | None, A: torch.Tensor, clients: list, a: Sequence[float],
                  s: Sequence[float]) -> None:
    """Each stack in one concatenation of the clients' factors along the rank (B through its
    transpose, the row-major buffer it views), then scaled by one broadcast multiply per
    stack (:func:`_column_factors`): exact copies and the per-client rounding of :func:`_put`,
    in two ops a stack where a copy and a multiply per client took 2 K."""
    torch.cat([Ak for _, Ak in clients], dim=-2, out=A)
    if B is not None:
        torch.cat([Bk.mT for Bk, _ in clients], dim=-2, out=B.mT)
    _scale_blocks(B, A, tuple(Ak.shape[-2] for _, Ak in clients), a, s)


def _scale_blocks(B: torch.Tensor | None, A: torch.Tensor, ranks: tuple[int, ...], a: Sequence[float],
                  s: Sequence[float]) -> None:
    """Client k's block of B's columns times sqrt(a_k) and of A's rows times sqrt(a_k) s_k."""
    roots = tuple(math.sqrt(ak) for ak in a)
    if B is not None:
        B.mul_(_column_factors(roots, ranks, B.dtype, B.device))
    A.mul_(_column_factors(tuple(r * sk for r, sk in zip(roots, s)), ranks, A.dtype, A.device).unsqueeze(-1))


def _fill_one_copy(B: torch.Tensor | None, A: torch.Tensor, clients: list, a: Sequence[float],
                   s: Sequence[float]) -> None:
    """Each stack in one copy, then scaled in place client by client.

    A (L, r, n) is L x K blocks of rows, module by module and within a module client by
    client: the concatenation of every A_{k,l} along the rows, written into A seen as
    (L r, n). B (L, m, r) is column-major, the transpose of an (L, r, m) buffer, which is
    likewise the concatenation of every B_{k,l}^T. The copies are exact (same dtype), and
    each client's slice is then scaled once, as :func:`_put` does, by one broadcast multiply
    per stack (:func:`_column_factors`).
    """
    L = A.shape[0]
    torch.cat([Ak[l] for l in range(L) for _, Ak in clients], out=A.view(-1, A.shape[-1]))
    if B is not None:
        torch.cat([Bk[l].mT for l in range(L) for Bk, _ in clients], out=B.mT.view(-1, B.shape[-2]))
    _scale_blocks(B, A, tuple(Ak[0].shape[-2] for _, Ak in clients), a, s)


@functools.lru_cache(maxsize=256)
def _column_factors(factors: tuple[float, ...], ranks: tuple[int, ...], dtype: torch.dtype,
                    device: torch.device) -> torch.Tensor:
    """Client k's factor repeated r_k times: one vector (r,) that scales every client's slice
    of a stack in one broadcast multiply, instead of one multiply per client.

    Held in the dtype the multiply computes in (float32 for half-precision stacks, as a Python
    scalar would be: the product is rounded once, into the stack) and made once per weights,
    ranks and device: a round with the weights of an earlier one (the usual federated case:
    the clients' data sizes) sends nothing to the device. Each entry is the Python float a
    per-client ``mul_`` would take, rounded the same way, so the stacks are bit for bit
    those of per-client scaling."""
    vals = [c for c, rk in zip(factors, ranks) for _ in range(rk)]
    return torch.tensor(vals, dtype=torch.promote_types(dtype, torch.float32), device=device)


def _put(out: torch.Tensor, src: Factor, c: float) -> None:
    """``out = c * src`` (``src`` a tensor or a list to stack), rounded once into ``out.dtype``."""
    tensor = isinstance(src, torch.Tensor)
    dtype = src.dtype if tensor else src[0].dtype
    if torch.promote_types(dtype, out.dtype) == out.dtype:
        if tensor:
            out.copy_(src)
        else:
            torch.stack(list(src), out=out)
        out.mul_(c)
        return
    x = src if tensor else torch.stack(list(src))
    out.copy_(x.to(torch.promote_types(dtype, torch.float32)) * c)
