"""Seeded LoRA-like client factors for tests, benchmarks and the demo.

Trained LoRA adapters are not white noise: each client's update has a decaying
spectrum, and clients fine-tuning one base model on related data move partly shared
subspaces. White-noise factors would make every direction of the stack equally
important and the energy rule would keep almost all of them; these factors give the
rank selection something real to do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["lora_clients", "spectrum_matrix"]


def _orthonormal(shape: tuple[int, ...], g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(*shape, generator=g, dtype=torch.float64))
    return q.to(dtype)


def lora_clients(
    m: int,
    n: int,
    ranks: Sequence[int],
    *,
    batch: tuple[int, ...] = (),
    shared: float = 0.3,
    decay: float = 0.85,
    spread: float = 0.5,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """K clients' factors ``Bs[k]`` (*batch, m, r_k) and ``As[k]`` (*batch, r_k, n).

    Client k's update is U_k diag(sigma_k) V_k^T with sigma_{k,i} = c_k * decay^i, where
    the columns of U_k (V_k) mix a subspace shared by all clients (weight ``shared``) with
    a private one, and c_k varies across clients by a factor up to exp(``spread``).
    B_k = U_k diag(sqrt sigma) * 1e-2 and A_k = diag(sqrt sigma) V_k^T * 1e2 / sqrt(n),
    magnitudes like a trained adapter's (B grows from zero, A from a Kaiming start).
    """
    g = torch.Generator().manual_seed(seed)
    rmax = max(ranks)
    r_shared = min(rmax, m, n)
    Us = _orthonormal((*batch, m, r_shared), g, torch.float64)
    Vs = _orthonormal((*batch, n, r_shared), g, torch.float64)
    Bs, As = [], []
    for rk in ranks:
        k_sh = min(rk, r_shared)
        mix = torch.randn(*batch, r_shared, k_sh, generator=g, dtype=torch.float64) / r_shared**0.5
        Uk = shared**0.5 * (Us @ mix) + (1 - shared) ** 0.5 * torch.randn(
            *batch, m, k_sh, generator=g, dtype=torch.float64) / m**0.5
        Vk = shared**0.5 * (Vs @ mix) + (1 - shared) ** 0.5 * torch.randn(
            *batch, n, k_sh, generator=g, dtype=torch.float64) / n**0.5
        if rk > k_sh:
            Uk = torch.cat([Uk, torch.randn(*batch, m, rk - k_sh, generator=g, dtype=torch.float64) / m**0.5], -1)
            Vk = torch.cat([Vk, torch.randn(*batch, n, rk - k_sh, generator=g, dtype=torch.float64) / n**0.5], -1)
        c = torch.exp(spread * torch.rand(*batch, 1, generator=g, dtype=torch.float64))
        sigma = c * decay ** torch.arange(rk, dtype=torch.float64)
        root = sigma.sqrt()
        Bs.append((Uk * root.unsqueeze(-2) * 1e-2).to(dtype))
        As.append((root.unsqueeze(-1) * Vk.mT * (1e2 / n**0.5)).to(dtype))
    return Bs, As


def spectrum_matrix(
    m: int, n: int, singular_values: torch.Tensor, *, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factors (B, A) with B @ A = U diag(singular_values) V^T for random orthonormal U, V.

    The spectrum is known exactly, which is what condition-number sweeps need.
    """
    g = torch.Generator().manual_seed(seed)
    k = singular_values.shape[-1]
    U = _orthonormal((m, k), g, torch.float64)
    V = _orthonormal((n, k), g, torch.float64)
    sv = singular_values.to(torch.float64)
    return (U * sv).to(dtype), V.mT.contiguous().to(dtype)
