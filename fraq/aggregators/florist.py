"""FLoRIST: thin SVDs of both stacks, an SVD of the small core, an energy threshold.

Ramesh and Dass, "FLoRIST: Singular Value Thresholding for Efficient and Accurate
Federated Fine-Tuning of Large Language Models", arXiv:2506.09199 (MLSys 2026).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

import fraq
from fraq._validation import check_tau, check_tau_or_rank, compute_dtype
from fraq.aggregators._linalg import select, thin_svd
from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import WARM_START, Downlink, Factors
from fraq.flops import florist_model

__all__ = ["FLoRIST", "florist_recompress"]


def florist_recompress(B: torch.Tensor, A: torch.Tensor, *, tau: float | None = None, rank: int | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""FLoRIST's recompression of stacks B (*, m, r), A (*, r, n); arguments trusted.

    Returns ``(B_g, A_g, p)``: B_g (*, m, p_max), A_g (*, p_max, n) zero past each
    matrix's own p, and p as an int64 tensor of the batch shape. See :class:`FLoRIST`.
    """
    UB, SB, VhB = thin_svd(B)
    UA, SA, VhA = thin_svd(A)
    P = torch.matmul(SB.unsqueeze(-1) * VhB, UA * SA.unsqueeze(-2))
    UP, SP, VhP = thin_svd(P)
    p, pmax, keep = select(SP, tau=tau, rank=rank)
    Bg = torch.matmul(UB, UP[..., :, :pmax] * (SP[..., :pmax] * keep).unsqueeze(-2))
    Ag = torch.matmul(VhP[..., :pmax, :] * keep.unsqueeze(-1), VhA)
    return Bg, Ag, p


class FLoRIST(Aggregator):
    r"""Recompress the weighted stack through thin SVDs of both factors.

    With :math:`(B_s, A_s)` from :func:`fraq.stack`,

    .. math::
        B_s = U_B S_B V_B^\top,\quad A_s = U_A S_A V_A^\top,\quad
        P = S_B V_B^\top U_A S_A = U_P S_P V_P^\top,\\
        B_g = U_B U_{P,:p} S_{P,:p},\qquad A_g = (V_P^\top V_A^\top)_{:p},

    where p is the smallest rank whose leading :math:`\sigma_i^2` hold at least ``tau``
    of :math:`\sum_i \sigma_i^2` (the same rule, :func:`fraq.select_rank`, as FRAQ).
    :math:`B_g A_g` is a best rank-p approximation of the exact aggregate, so FLoRIST and
    FRAQ agree on p and on the product; they differ in cost. Each thin SVD runs on its
    factor's tall orientation (``A_s`` is decomposed as :math:`A_s^\top`), the layout
    LAPACK is fastest on, and a batch is split across threads as FRAQ's is.

    Every client downloads the one rank-p global adapter (scale 1: the product already
    carries the LoRA scales) and warm-starts from it; a client of rank r_k keeps its first
    r_k components, or zero-pads when r_k > p. In a batch each module has its own p.

    Downlink per client and module: (m + n) p parameters.
    Flops per module (d, D the sides, r = sum r_k): 4 (d + D) r^2 (thin SVDs)
    + O(r^3) + 2 (d + D) r p, the paper's Eq. 26.

    Args:
        tau: energy threshold in (0, 1]; 0.90 by default (the FLoRIST paper uses 0.85
            for mixed ranks).
    """

    name = "florist"
    client_init = WARM_START
    display_name = "FLoRIST"
    paper_order = 7  # its row in the paper's Tables 1-3
    downlink_rule = "(m + n) p"
    flop_model = staticmethod(florist_model)
    energy_rule = True
    checks_finite = False  # fraq.stack does

    def __init__(self, *, tau: float = 0.90):
        self.tau = check_tau(tau)

    def _group(self, group: Group, state) -> GroupOutput:
        spec = group.spec
        Bs, As = group.client_factors()
        Bst, Ast = fraq.stack(Bs, As, group.weights, spec.scales, dtype=compute_dtype(spec.dtype))
        Bg, Ag, p = florist_recompress(Bst, Ast, tau=self.tau)
        Bg, Ag = Bg.to(spec.dtype), Ag.to(spec.dtype)
        out: GroupOutput = {}
        for mod, B, A, pi in zip(group.specs, group.split(Bg), group.split(Ag), p.reshape(-1).tolist()):
            B, A = B[..., :pi], A[..., :pi, :]
            out[mod.name] = (Downlink(sent=(B, A), start=Factors(B, A, 1.0)), pi)
        return out

    def aggregate_batch(self, Bs: Sequence[torch.Tensor], As: Sequence[torch.Tensor], *, rank: int | None = None,
                        tau: float | None = None, weights=None, scales=None
                        ) -> tuple[torch.Tensor, torch.Tensor, int | torch.Tensor]:
        """The global adapter of one batch of equal-shape modules, ``(B_g, A_g, p)``.

        ``Bs[k]`` (*, m, r_k), ``As[k]`` (*, r_k, n); ``rank`` or ``tau`` (default the
        instance's ``tau``). p is an int for unbatched input, else an int64 tensor. This
        is the per-module entry the benchmark suites time against ``fraq.recompress``.
        """
        Bst, Ast = fraq.stack(Bs, As, weights, scales, dtype=compute_dtype(Bs[0].dtype))
        tau, rank = check_tau_or_rank(tau, rank, self.tau, Bst, Ast)
        Bg, Ag, p = florist_recompress(Bst, Ast, tau=tau, rank=rank)
        return Bg.to(Bs[0].dtype), Ag.to(Bs[0].dtype), (int(p) if p.dim() == 0 else p)
