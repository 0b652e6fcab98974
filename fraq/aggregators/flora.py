"""FLoRA: exact stacking of heterogeneous-rank adapters, broadcast uncompressed.

Wang et al., "FLoRA: Federated Fine-Tuning Large Language Models with Heterogeneous
Low-Rank Adaptations", arXiv:2409.05976.
"""

from __future__ import annotations

from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import REINITIALIZE, Downlink, Factors

__all__ = ["FLoRA"]


class FLoRA(Aggregator):
    r"""Broadcast the weighted stack :math:`B_s A_s = \sum_k a_k s_k B_k A_k` (:func:`fraq.stack`).

    Every client merges the stack's product into its frozen base weights and starts a
    fresh adapter. The product is exact; the price is the downlink, the whole stack of
    rank r = sum_k r_k. The weight is split as sqrt(a_k) on both factors (the FRAQ
    paper's Eq. 7); FLoRA's public code puts it all on A, which gives the same product
    but worse-scaled stacks.

    Downlink per client and module: (m + n) sum_k r_k parameters (100% by definition).
    Flops: none beyond scaling, (m + n) r multiplications per module.
    """

    name = "flora"
    client_init = REINITIALIZE
    display_name = "FLoRA"
    paper_order = 1  # its row in the paper's Tables 1-3
    downlink_rule = "(m + n) sum_k r_k"
    checks_finite = False  # Group.stacked does
    from_stacks = True  # reads each group only through Group.stacked(): a RoundBuffer's stacks feed it
    finite_output = True  # see Aggregator.finite_output

    def _group(self, group: Group, state) -> GroupOutput:
        Bst, Ast = group.stacked()
        r = sum(group.spec.ranks)
        out: GroupOutput = {}
        for spec, B, A in zip(group.specs, group.split(Bst), group.split(Ast)):
            out[spec.name] = (Downlink(sent=(B, A), merge=(Factors(B, A, 1.0),)), r)
        return out
