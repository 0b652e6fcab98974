"""FlexLoRA: dense aggregate, reduced SVD, each client truncated at its own rank.

Bai et al., "Federated Fine-tuning of Large Language Models under Heterogeneous Tasks
and Client Resources", arXiv:2402.11505.
"""

from __future__ import annotations

import numbers

import torch

import fraq
from fraq._validation import compute_dtype
from fraq.aggregators._linalg import first_columns, first_rows, own_copy, thin_svd
from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import WARM_START, Downlink, Factors

__all__ = ["FlexLoRA"]


class FlexLoRA(Aggregator):
    r"""Dense aggregate, one reduced SVD, a per-client truncation.

    .. math::
        \Delta = \sum_k a_k s_k B_k A_k = B_s A_s = U \Sigma V^\top,\qquad
        B'_k = U_{:, :r_k} \Sigma_{:r_k} / s_k,\quad A'_k = V^\top_{:r_k, :},

    so client k's warm start at its own scale reproduces the best rank-r_k
    approximation of the aggregate, :math:`s_k B'_k A'_k = \Delta_{r_k}`.

    The dense m x n matrix is the method: it is formed here by one GEMM of the weighted
    stacks (:func:`fraq.stack`), the cheapest way to form it, and decomposed by a reduced
    (economy) SVD on its tall orientation, never a full one. The public code hard-codes
    alpha = 16 and runs a full SVD; here each client's own scale is used. A client whose
    rank exceeds min(m, n) gets zero-padded factors.

    Memory: the dense matrices of a batch; a group is decomposed in chunks of at most
    ``max_dense_bytes`` of dense matrices (at least one matrix per chunk).

    Downlink per client k and module: (m + n) r_k parameters.
    Flops per module (d = min(m, n), D = max(m, n), r = sum r_k): 2 d D r (dense)
    + about 4 D d^2 + O(d^3) (SVD with vectors), the paper's Eq. 25.

    Args:
        max_dense_bytes: bound on the dense matrices held at once (default 1 GiB).
    """

    name = "flexlora"
    client_init = WARM_START
    checks_finite = False  # fraq.stack does

    def __init__(self, *, max_dense_bytes: int = 2**30):
        if isinstance(max_dense_bytes, bool) or not isinstance(max_dense_bytes, numbers.Integral):
            raise TypeError(f"max_dense_bytes(={max_dense_bytes!r}) must be an int")
        if max_dense_bytes < 1:
            raise ValueError(f"max_dense_bytes(={max_dense_bytes}) must be positive")
        self.max_dense_bytes = int(max_dense_bytes)

    def _group(self, group: Group, state) -> GroupOutput:
        spec = group.spec
        m, n = spec.m, spec.n
        cdt = compute_dtype(spec.dtype)
        Bs, As = group.client_factors()
        Bst, Ast = fraq.stack(Bs, As, group.weights, spec.scales, dtype=cdt)
        transposed = m < n  # decompose the tall orientation, D x d
        variants = sorted(set(zip(spec.ranks, spec.scales)))
        L = len(group.specs)
        chunk = max(1, self.max_dense_bytes // max(1, m * n * cdt.itemsize)) if group.batched else 1
        pieces: dict[tuple[int, float], tuple[list, list]] = {v: ([], []) for v in variants}
        for lo in range(0, L, chunk):
            Bc, Ac = (Bst[lo:lo + chunk], Ast[lo:lo + chunk]) if group.batched else (Bst, Ast)
            dense = torch.matmul(Ac.mT, Bc.mT) if transposed else torch.matmul(Bc, Ac)
            U, S, Vh = thin_svd(dense)
            del dense
            left, right = (Vh.mT, U.mT) if transposed else (U, Vh)
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
