"""FedIT: factor-wise FedAvg of the clients' LoRA factors.

Zhang et al., "Towards Building the Federated GPT: Federated Instruction Tuning",
arXiv:2305.05644 (ICASSP 2024, doi:10.1109/ICASSP48485.2024.10447454).
"""

from __future__ import annotations

import torch

from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import WARM_START, Downlink, Factors

__all__ = ["FedIT", "weighted_sum"]


def weighted_sum(tensors: list[list[torch.Tensor]], weights: list[float]) -> list[torch.Tensor]:
    """``sum_k weights[k] * tensors[k][j]`` for every j, as new tensors.

    ``tensors[k]`` is client k's list of per-module tensors. The lists are combined with
    torch's multi-tensor (``_foreach``) kernels, the batched form of an elementwise
    update that needs no stacking copy (the kernels ``torch.optim`` uses). Inputs are not
    modified. Cost: K passes over the factors, 2 flops per element per client.
    """
    acc = torch._foreach_mul(tensors[0], weights[0])
    for k in range(1, len(tensors)):
        torch._foreach_add_(acc, tensors[k], alpha=weights[k])
    return acc


class FedIT(Aggregator):
    r"""Factor-wise averaging :math:`B_g = \sum_k a_k B_k`, :math:`A_g = \sum_k a_k A_k`.

    Every client must have the same rank and LoRA scale per module. The product
    :math:`s B_g A_g` is not the average of the updates (the cross terms
    :math:`a_j a_k B_j A_k`, j != k, remain); FedEx-LoRA and the stacking methods exist
    to remove them. Clients warm-start from (B_g, A_g) at their own scale s.

    The public FLoRA repository's FedIT branch has a typo that returns client 0's factors
    times a_0; this is plain factor averaging.

    Downlink per client and module: (m + n) r parameters.
    Flops: 2 K (m + n) r per module (one weighted sum).
    """

    name = "fedit"
    client_init = WARM_START
    display_name = "FedIT"
    paper_order = 3  # its row in the paper's Tables 1-3
    downlink_rule = "(m + n) r"
    heterogeneous_ranks = False

    def _group(self, group: Group, state) -> GroupOutput:
        K = len(group.weights)
        Bs, As = zip(*(group.module_factors(k) for k in range(K)))
        Bg = weighted_sum(list(Bs), group.weights)
        Ag = weighted_sum(list(As), group.weights)
        s = group.spec.scales[0]
        out: GroupOutput = {}
        for spec, B, A in zip(group.specs, Bg, Ag):
            out[spec.name] = (Downlink(sent=(B, A), start=Factors(B, A, s)), spec.ranks[0])
        return out
