"""Shared helpers for the tests: float64 references and eps-derived tolerances."""

from __future__ import annotations

import torch

from fraq.synthetic import lora_clients  # noqa: F401  (re-exported for the tests)


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of the dtype the computation runs in (bf16/fp16 compute in float32)."""
    return torch.finfo(dtype).eps


def dense_svd(M: torch.Tensor):
    """float64 SVD of an explicitly formed aggregate: the reference of record."""
    return torch.linalg.svd(M.double(), full_matrices=False)


def truncation_error(S: torch.Tensor, p: torch.Tensor | int) -> torch.Tensor:
    """sqrt(sum_{i>p} S_i^2): the Eckart-Young optimum for each matrix."""
    idx = torch.arange(S.shape[-1])
    p = torch.as_tensor(p).unsqueeze(-1)
    return torch.where(idx >= p, S, 0).square().sum(-1).sqrt()


def fro(M: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(M.double())
