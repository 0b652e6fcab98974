"""FedSVD: clients train B on a shared A; the server re-factors the averaged adapter by its SVD.

Lee et al., "FedSVD: Adaptive Orthogonalization for Private Federated Learning with LoRA",
arXiv:2505.12805 (NeurIPS 2025); public code github.com/seanie12/fed-svd.
"""

from __future__ import annotations

from fraq._validation import compute_dtype
from fraq.aggregators._kernel import DEFAULT_DENSE_BYTES, triplets, use_kernel
from fraq.aggregators._linalg import first_columns, first_rows, own_copy
from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.fedit import weighted_sum
from fraq.aggregators.payload import WARM_START, Downlink, Factors
from fraq.flops import fedsvd_model

__all__ = ["FedSVD"]


class FedSVD(Aggregator):
    r"""The FedAvg adapter re-factored by its SVD: an orthonormal A, the spectrum on B.

    .. math::
        B_g = \sum_k a_k B_k,\quad A_g = \sum_k a_k A_k,\qquad
        B_g A_g = U \Sigma V^\top,\qquad B' = U_{:, :r} \Sigma_{:r},\quad A' = V^\top_{:r, :},

    and every client warm-starts from (B', A') at its scale s, training B only while A
    stays frozen (:meth:`trained_factors`; FFA-LoRA's split, which FedSVD runs on). Since
    :math:`B_g A_g` has rank at most r, :math:`B'A' = B_g A_g` exactly: the round changes
    no weight, only the parameterization, and the next round's A has orthonormal rows.
    With every client on the same frozen A (what these clients upload), :math:`A_g = A` and
    :math:`s B_g A_g = \sum_k a_k s B_k A_k` is the exact aggregate.

    This follows the public code exactly: its server averages the clients' ``lora_B`` with
    data-size weights (``model="ffa"``: ``lora_A`` is the server's own, frozen on every
    client; with ``model="fedavg"`` both are averaged, as here), then ``reinit_lora``
    (``misc/utils.py``) takes ``prod = lora_B @ lora_A``, ``V, S, Uh = torch.linalg.svd(prod,
    full_matrices=False)``, ``r = lora_A.size(0)`` and sets ``lora_A = Uh[:r]``,
    ``lora_B = V[:, :r] @ diag(S[:r])``: B' and A' above (the code's ``V`` is the left
    factor). The LoRA scale multiplies both sides alike, so it does not enter.

    Where the triplets come from is ``kernel`` (:mod:`fraq.aggregators._kernel`): ``"dense"``
    (the default, the public code's: the m x n product formed and decomposed) or ``"fraq"``
    (:func:`fraq.svd` of the factors B_g, A_g: O((m + n) r^2), no m x n matrix). Both give
    the same (B', A') up to the signs of the singular vectors (and a rotation inside a
    cluster of equal singular values), the same product to float32 rounding.

    Every client must have the same rank and scale per module. Where B_g A_g has rank
    below r (a first round whose clients' B are all zero), the rows of A' past it are an
    orthonormal completion with zero singular values, as the dense SVD's are.

    Downlink per client and module: (m + n) r parameters.
    Flops per module (d = min(m, n), D = max(m, n); :func:`fraq.flops.fedsvd_model`, the class's
    ``flop_model``): dense, 2 d D r + the d x D thin SVD with vectors (``gesdd``, 8 D d^2 +
    4 d^3 / 3 below LAPACK's QR-first threshold); ``kernel="fraq"``, about (2d + D) r^2 + 6 D r^2
    (recompression and the D x r SVD).

    Args:
        kernel: ``"dense"`` (default) or ``"fraq"``.
        max_dense_bytes: the dense kernel's bound on the dense matrices held at once
            (default 1 GiB).
    """

    name = "fedsvd"
    client_init = WARM_START
    display_name = "FedSVD"
    downlink_rule = "(m + n) r"
    heterogeneous_ranks = False
    dense_factorization = True
    kernel_variants = ("fraq",)
    flop_model = staticmethod(fedsvd_model)

    def __init__(self, *, kernel: str = "dense", max_dense_bytes: int = DEFAULT_DENSE_BYTES):
        use_kernel(self, kernel, max_dense_bytes)

    @classmethod
    def trained_factors(cls, round: int) -> str:
        """``"B"`` in every round: A is frozen on the clients (FFA-LoRA), re-set by the server."""
        super().trained_factors(round)  # its check of ``round``
        return "B"

    def _group(self, group: Group, state) -> GroupOutput:
        spec = group.spec
        r, s, cdt = spec.ranks[0], spec.scales[0], compute_dtype(spec.dtype)
        Bs, As = group.client_factors()
        Bg = weighted_sum([[b.to(cdt)] for b in Bs], group.weights)[0]  # FedAvg of the factors
        Ag = weighted_sum([[a.to(cdt)] for a in As], group.weights)[0]
        Bn, An = [], []
        for _, left, S, right in triplets(Bg, Ag, kernel=self.kernel, rank=r, max_dense_bytes=self.max_dense_bytes):
            q = min(r, S.shape[-1])
            Bn.extend(group.split(first_columns(left[..., :, :q] * S[..., None, :q], r).to(spec.dtype)))
            An.extend(group.split(first_rows(own_copy(right[..., :q, :]), r).to(spec.dtype)))
        out: GroupOutput = {}
        for mod, B, A in zip(group.specs, Bn, An):
            out[mod.name] = (Downlink(sent=(B, A), start=Factors(B, A, s)), r)
        return out
