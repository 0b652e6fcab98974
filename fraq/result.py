"""The value returned by :func:`fraq.recompress`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["RecompressResult"]


@dataclass(frozen=True)
class RecompressResult:
    """A rank-p global adapter and the spectrum it was cut from.

    Attributes:
        B: (*, m, p_max) global LoRA B factor, scale 1 (``alpha = p``). When m <= n its
            columns are orthonormal; when m > n the rows of ``A`` are.
        A: (*, p_max, n) global LoRA A factor. ``B @ A`` is a best rank-p_i approximation
            of each matrix's exact aggregate (Eckart-Young). In a batch, columns of ``B``
            and rows of ``A`` past a matrix's own rank p_i are exact zeros.
        rank: selected rank; a Python int for an unbatched call, an int64 tensor of
            the batch shape otherwise.
        energy: retained fraction of the squared Frobenius norm, sum_{i<=p} sigma_i^2 /
            sum_i sigma_i^2, in the compute dtype (1 for an all-zero aggregate).
        singular_values: (*, min(d, r)) singular values of the aggregate, descending, in
            the compute dtype. Those below the Gram's noise floor are reported as 0.
        tau: the energy threshold used, or None in fixed-rank mode.
        backend: name of the basis backend.
        transposed: True when m > n, i.e. the computation ran on the transpose.
        info: backend diagnostics (fallbacks taken, iteration counts).
    """

    B: torch.Tensor
    A: torch.Tensor
    rank: int | torch.Tensor
    energy: float | torch.Tensor
    singular_values: torch.Tensor
    tau: float | None
    backend: str
    transposed: bool
    info: dict = field(default_factory=dict)

    @property
    def max_rank(self) -> int:
        """Width of the padded factors, the largest rank in the batch."""
        return self.B.shape[-1]

    def downlink_params(self) -> int:
        """Parameters broadcast for this adapter: sum over matrices of (m + n) p_i."""
        m, n = self.B.shape[-2], self.A.shape[-1]
        ranks = self.rank if isinstance(self.rank, torch.Tensor) else torch.tensor(self.rank)
        return int(ranks.sum().item()) * (m + n)
