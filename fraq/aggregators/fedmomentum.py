"""FedMomentum: the exact aggregate's top-r triplets as the next adapter, the rest merged.

Yan et al., "FedMomentum: Preserving LoRA Training Momentum in Federated Fine-Tuning",
arXiv:2603.08014.
"""

from __future__ import annotations

import torch

import fraq
from fraq._validation import check_tau, compute_dtype
from fraq.aggregators._kernel import DEFAULT_DENSE_BYTES, triplets, use_kernel
from fraq.aggregators._linalg import first_columns, first_rows, select
from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import WARM_START, Downlink, Factors
from fraq.flops import fedmomentum_model

__all__ = ["DEFAULT_RESIDUAL_TAU", "FedMomentum"]

DEFAULT_RESIDUAL_TAU = 0.9999
"""The energy threshold of the residual (FedLLM-Factory's ``--residual_threshold`` default)."""


class FedMomentum(Aggregator):
    r"""The aggregate's top r triplets become the adapter; the next ones are merged into W.

    .. math::
        M = \sum_k a_k s_k B_k A_k = U \Sigma V^\top,\qquad q = \min\{j : \textstyle\sum_{i \le j}
        \sigma_i^2 \ge \tau \sum_i \sigma_i^2\},\\
        B' = U_{:, :r'} (\Sigma_{:r'} / s)^{1/2},\quad A' = (\Sigma_{:r'} / s)^{1/2} V^\top_{:r'},
        \quad r' = \min(r, q),\qquad
        R = U_{:, r':q}\, \Sigma_{r':q}\, V^\top_{r':q, :}.

    Every client adds R to its frozen weights and warm-starts from (B', A') at its scale s
    (zero-padded to its rank r when r' < r): the adapter keeps the round's dominant
    directions, and its optimizer's "momentum" with them, while
    :math:`W + R + s B'A' = W + M_q`, the aggregate up to the last 1 - tau of its energy
    (all of it at ``tau=1``).

    What is followed: the paper (its abstract and summaries were read; no code by its
    authors was found) states the mathematically correct aggregate, an SVD of it, the
    dominant components rebuilt into LoRA modules of the same rank and the residual
    components merged into the backbone. The formulas are those of the FedMomentum of
    FedLLM-Factory (github.com/boyi-liu/FedLLM-Factory, ``alg/fedmomentum.py``): data-size
    weights, the residual's rank by the energy threshold tau (default 0.9999), the balanced
    split :math:`B' = U\Sigma^{1/2}`, :math:`A' = \Sigma^{1/2} V^\top`, and a randomized SVD
    with K r sketch columns, which is the exact thin SVD here (M has rank at most
    sum_k r_k = K r), taken exactly. Two differences: the LoRA scales enter (that code sums
    :math:`B_k A_k` unscaled and merges the residual unscaled while the adapter is applied
    at s, which agrees only at s = 1: here :math:`s B'A' + R = M_q` at any s, and B', A' are
    that code's factors of M / s); and R is kept as exact low-rank factors
    :math:`(U \Sigma)_{r':q}`, :math:`V^\top_{r':q}`, sent and merged as such, instead of a
    dense m x n matrix added to the weights.

    Where the triplets come from is ``kernel`` (:mod:`fraq.aggregators._kernel`):
    ``"dense"`` (the default: M formed and decomposed, as that code does) or ``"fraq"``
    (:func:`fraq.svd` of the weighted stacks, all their min(m, n, sum_k r_k) triplets:
    O((m + n) r^2), no m x n matrix). Both give the same adapter and residual products to
    float32 rounding where the spectrum has gaps at r' and q.

    A client's rank r_k and scale s_k are its own (r and s above): with mixed ranks each client
    gets the top r_k triplets as its adapter and the rest up to q as its residual, from the
    one SVD (that code has one rank for all; with one rank this is its formula).

    Downlink per client k and module: (m + n)(r_k + q - r'_k) parameters,
    (m + n) max(r_k, q): the adapter, zero-padded to r_k, and the residual's factors.

    Args:
        tau: the residual's energy threshold in (0, 1] (default :data:`DEFAULT_RESIDUAL_TAU`).
        kernel: ``"dense"`` (default) or ``"fraq"``.
        max_dense_bytes: the dense kernel's bound on the dense matrices held at once
            (default 1 GiB).
    """

    name = "fedmomentum"
    client_init = WARM_START
    display_name = "FedMomentum"
    downlink_rule = "(m + n) max(r_k, p)"
    checks_finite = False  # fraq.stack does
    dense_factorization = True
    kernel_variants = ("fraq",)
    flop_model = staticmethod(fedmomentum_model)
    not_an_adapter = "its residual is merged into the base weights, it is not a LoRA adapter"

    def __init__(self, *, tau: float = DEFAULT_RESIDUAL_TAU, kernel: str = "dense",
                 max_dense_bytes: int = DEFAULT_DENSE_BYTES):
        self.tau = check_tau(tau)
        use_kernel(self, kernel, max_dense_bytes)

    def _group(self, group: Group, state) -> GroupOutput:
        spec = group.spec
        cdt = compute_dtype(spec.dtype)
        Bs, As = group.client_factors()
        Bst, Ast = fraq.stack(Bs, As, group.weights, spec.scales, dtype=cdt)
        parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]] = []  # per module: U, S, Vh, q
        for _, left, S, right in triplets(Bst, Ast, kernel=self.kernel, rank=None,
                                          max_dense_bytes=self.max_dense_bytes):
            q = select(S, tau=self.tau, rank=None)[0]
            for U, Sv, Vh, qi in zip(group.split(left), group.split(S), group.split(right),
                                     q.reshape(-1).tolist()):
                parts.append((U, Sv, Vh, qi))
        variants = sorted(set(zip(spec.ranks, spec.scales)))
        ranks = spec.ranks[0] if len(set(spec.ranks)) == 1 else spec.ranks
        out: GroupOutput = {}
        for mod, (U, S, Vh, q) in zip(group.specs, parts):
            made = {v: self._downlink(U, S, Vh, q, *v, spec.dtype) for v in variants}
            out[mod.name] = (tuple(made[v] for v in zip(spec.ranks, spec.scales)), ranks)
        return out

    @staticmethod
    def _downlink(U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor, q: int, r: int, s: float,
                  dtype: torch.dtype) -> Downlink:
        """A client of rank r and scale s: the adapter from the top min(r, q) triplets, zero-padded
        to r, and the residual r'..q as low-rank factors to merge."""
        rk = min(r, q)
        root = (S[:rk] / s).sqrt()
        B = first_columns(U[:, :rk] * root, r).to(dtype)
        A = first_rows(root[:, None] * Vh[:rk], r).to(dtype)
        if q <= rk:
            return Downlink(sent=(B, A), start=Factors(B, A, s))
        Br, Ar = (U[:, rk:q] * S[rk:q]).to(dtype), Vh[rk:q].contiguous().to(dtype)
        return Downlink(sent=(B, A, Br, Ar), merge=(Factors(Br, Ar, 1.0),), start=Factors(B, A, s))
