"""FedEx-LoRA: FedIT averages plus the exact residual, merged into the frozen base weights.

Singhal et al., "FedEx-LoRA: Exact Aggregation for Federated and Efficient Fine-Tuning
of Foundation Models", arXiv:2410.09432.
"""

from __future__ import annotations

from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.fedit import weighted_sum
from fraq.aggregators.payload import WARM_START, Downlink, Factors

__all__ = ["FedExLoRA"]


class FedExLoRA(Aggregator):
    r"""FedIT's averaged adapter plus the residual that makes the round exact.

    .. math::
        B_g = \sum_k a_k B_k,\quad A_g = \sum_k a_k A_k,\quad
        R = \sum_k a_k s B_k A_k - s B_g A_g = B_s A_s - s B_g A_g,

    with :math:`(B_s, A_s)` the weighted stack of :func:`fraq.stack`. Each client adds R
    to its frozen weights and warm-starts from (B_g, A_g) at scale s, so
    :math:`W + R + s B_g A_g = W + \sum_k a_k s B_k A_k` exactly.

    R is never formed as an m x n matrix here: it is sent as its factors, the stack and
    the averaged adapter, and the client forms it while merging. That is the paper's
    count of the residual as a FLoRA-sized payload (110% of FLoRA for RoBERTa-base with
    10 rank-8 clients). FedEx-LoRA's public code uses uniform 1/K weights and adds the
    residual transposed (right for GPT-2's Conv1D, wrong for nn.Linear); here the weights
    are the data weights and R has the weight's (out, in) = (m, n) layout.

    Every client must have the same rank and scale per module.

    Downlink per client and module: (m + n)(sum_k r_k + r) parameters.
    Flops: 2 K (m + n) r per module (the average) plus the stack's scaling.
    """

    name = "fedex-lora"
    client_init = WARM_START
    display_name = "FedEx-LoRA"
    paper_order = 2  # its row in the paper's Tables 1-3
    downlink_rule = "(m + n)(sum_k r_k + r)"
    heterogeneous_ranks = False
    checks_finite = False  # Group.stacked does
    not_an_adapter = "its exact residual is merged into the base weights, it is not a LoRA adapter"

    def _group(self, group: Group, state) -> GroupOutput:
        a = group.weights
        s = group.spec.scales[0]
        Bst, Ast = group.stacked()
        per_module = [group.module_factors(k) for k in range(len(a))]
        Bg = weighted_sum([b for b, _ in per_module], a)  # FedIT's average, same kernels
        Ag = weighted_sum([g for _, g in per_module], a)
        out: GroupOutput = {}
        pieces = zip(group.specs, group.split(Bst), group.split(Ast), Bg, Ag)
        for spec, B, A, b, g in pieces:
            merge = (Factors(B, A, 1.0), Factors(b, g, -s))
            out[spec.name] = (Downlink(sent=(B, A, b, g), merge=merge, start=Factors(b, g, s)), spec.ranks[0])
        return out
