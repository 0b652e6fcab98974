"""FlexLoRA: dense aggregate, reduced SVD, each client truncated at its own rank.

Bai et al., "Federated Fine-tuning of Large Language Models under Heterogeneous Tasks
and Client Resources", arXiv:2402.11505.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

import fraq
from fraq._validation import check_tau_or_rank, compute_dtype
from fraq.aggregators._kernel import DEFAULT_DENSE_BYTES, RSVD_KERNELS, triplets, use_kernel
from fraq.aggregators._linalg import first_columns, first_rows, own_copy, product_floor, select
from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import WARM_START, Downlink, Factors
from fraq.flops import flexlora_model

__all__ = ["FlexLoRA"]


class FlexLoRA(Aggregator):
    r"""Dense aggregate, one reduced SVD, a per-client truncation.

    .. math::
        \Delta = \sum_k a_k s_k B_k A_k = B_s A_s = U \Sigma V^\top,\qquad
        B'_k = U_{:, :r_k} \Sigma_{:r_k} / s_k,\quad A'_k = V^\top_{:r_k, :},

    so client k's warm start at its own scale reproduces the best rank-r_k
    approximation of the aggregate, :math:`s_k B'_k A'_k = \Delta_{r_k}`.

    Where the triplets come from is ``kernel`` (:mod:`fraq.aggregators._kernel`):

    - ``"dense"`` (the default and the reference): the m x n matrix is formed by one GEMM
      of the weighted stacks (:func:`fraq.stack`), the cheapest way to form it, and
      decomposed by a reduced (economy) SVD on its tall orientation, never a full one; a
      batch is split across threads as FRAQ's is.
    - ``"fraq"``: the leading max_k r_k triplets of the same aggregate from the stacks,
      :func:`fraq.svd` (FRAQ's basis, Gram and eigenproblem, then a small rotation); the
      m x n matrix is never formed. Every client's truncation comes from that one SVD.
    - ``"rsvd"`` (FlexLoRA at its best as its users would run it): the same dense matrix,
      its leading max_k r_k triplets from :func:`torch.svd_lowrank` (q = max_k r_k + 10,
      two power iterations): near-optimal rather than optimal where the spectrum has no
      gap past q.

    The two give the same adapter products :math:`s_k B'_k A'_k` to float32 rounding
    wherever the spectrum has a gap at r_k (Wedin's bound, :func:`fraq.svd`); without a
    gap the rank-r_k truncation is not unique, and each kernel's is a best one, its error
    above the Eckart-Young optimum at rounding level. Use ``"fraq"`` whenever the stacked
    rank r = sum_k r_k is well below min(m, n) (every LoRA round: O((m + n) r^2) against
    O(m n min(m, n))); at r >= min(m, n) both cost a dense SVD's order.

    The public code hard-codes alpha = 16 and runs a full SVD; here each client's own
    scale is used. A client whose rank exceeds min(m, n) gets zero-padded factors.

    Memory (dense kernel): the dense matrices of a batch; a group is decomposed in chunks
    of at most ``max_dense_bytes`` of dense matrices (at least one matrix per chunk).

    Downlink per client k and module: (m + n) r_k parameters.
    Flops per module (d = min(m, n), D = max(m, n), r = sum r_k): dense, 2 d D r
    + about 4 D d^2 + O(d^3) (SVD with vectors), the paper's Eq. 25; ``kernel="fraq"``,
    :func:`fraq.recompress`'s at p = max r_k (about (2d + D) r^2) plus a D x p SVD
    (:func:`fraq.flops.flexlora_model`).

    Args:
        max_dense_bytes: bound on the dense matrices held at once (default 1 GiB).
        kernel: ``"dense"`` (default), ``"fraq"`` or ``"rsvd"`` (see above).
    """

    name = "flexlora"
    client_init = WARM_START
    display_name = "FlexLoRA"
    paper_order = 5  # its row in the paper's Tables 1-3
    downlink_rule = "(m + n) r_k"
    flop_model = staticmethod(flexlora_model)
    nested = True  # a truncated SVD: its rank-p result is the first p components of any larger one
    checks_finite = False  # fraq.stack does
    dense_factorization = True
    kernel_variants = ("fraq", "rsvd")

    def __init__(self, *, max_dense_bytes: int = DEFAULT_DENSE_BYTES, kernel: str = "dense"):
        use_kernel(self, kernel, max_dense_bytes, RSVD_KERNELS)

    def _group(self, group: Group, state) -> GroupOutput:
        spec = group.spec
        cdt = compute_dtype(spec.dtype)
        Bs, As = group.client_factors()
        Bst, Ast = fraq.stack(Bs, As, group.weights, spec.scales, dtype=cdt)
        variants = sorted(set(zip(spec.ranks, spec.scales)))
        pieces: dict[tuple[int, float], tuple[list, list]] = {v: ([], []) for v in variants}
        for _, left, S, right in triplets(Bst, Ast, kernel=self.kernel, rank=max(spec.ranks),
                                          max_dense_bytes=self.max_dense_bytes):
            for r, s in variants:
                q = min(r, S.shape[-1])
                B = left[..., :, :q] * (S[..., None, :q] / s)
                A = own_copy(right[..., :q, :])
                B, A = first_columns(B, r).to(spec.dtype), first_rows(A, r).to(spec.dtype)
                pieces[(r, s)][0].extend(group.split(B))
                pieces[(r, s)][1].extend(group.split(A))
        out: GroupOutput = {}
        for j, mod in enumerate(group.specs):
            made = {}
            for r, s in variants:
                B, A = pieces[(r, s)][0][j], pieces[(r, s)][1][j]
                made[(r, s)] = Downlink(sent=(B, A), start=Factors(B, A, s))
            out[mod.name] = (tuple(made[(r, s)] for r, s in zip(spec.ranks, spec.scales)), spec.ranks)
        return out

    def aggregate_batch(self, Bs: Sequence[torch.Tensor], As: Sequence[torch.Tensor], *, rank: int | None = None,
                        tau: float | None = None, weights=None, scales=None
                        ) -> tuple[torch.Tensor, torch.Tensor, int | torch.Tensor]:
        """One global truncation ``(B_g, A_g, p)`` of a batch of equal-shape modules.

        The same SVD as :meth:`aggregate` (by the instance's ``kernel``), cut at ``rank``
        or by the energy rule at ``tau`` (default ``max(r_k)``, the largest client's
        truncation) with all singular values on B_g (scale 1). Under the energy rule FRAQ's
        kernel takes every triplet of the stack (min(m, n, r) of them: the rest are zero)
        and applies the same rule to them. ``Bs[k]`` (*, m, r_k), ``As[k]`` (*, r_k, n)
        with at most one batch dimension. This is the per-module entry the benchmark
        suites time.
        """
        dtype = Bs[0].dtype
        cdt = compute_dtype(dtype)
        Bst, Ast = fraq.stack(Bs, As, weights, scales, dtype=cdt)
        if Bst.dim() > 3:
            raise ValueError(f"Bs[0].shape={tuple(Bs[0].shape)}: at most one batch dimension")
        if tau is None and rank is None:
            rank = min(max(b.shape[-1] for b in Bs), Bst.shape[-2], Ast.shape[-1])
        tau, rank = check_tau_or_rank(tau, rank, 1.0, Bst, Ast)
        Bgs, Ags, ps = [], [], []
        floor = None if tau is None else product_floor(Bst, Ast)  # unbatched: one value, used whole
        for rows, left, S, right in triplets(Bst, Ast, kernel=self.kernel, rank=rank,
                                             max_dense_bytes=self.max_dense_bytes):
            own = floor if floor is None or floor.dim() == 0 else floor[rows]
            p, pmax, keep = select(S, tau=tau, rank=rank, floor=own)
            Bgs.append(left[..., :, :pmax] * (S[..., :pmax] * keep).unsqueeze(-2))
            Ags.append(own_copy(right[..., :pmax, :] * keep.unsqueeze(-1)))
            ps.append(p)
        if Bst.dim() == 2:
            return Bgs[0].to(dtype), Ags[0].to(dtype), int(ps[0])
        pmax = max(b.shape[-1] for b in Bgs)
        Bg = torch.cat([first_columns(b, pmax) for b in Bgs]).to(dtype)
        Ag = torch.cat([first_rows(a, pmax) for a in Ags]).to(dtype)
        return Bg, Ag, torch.cat(ps)
