"""FLoRG: one trainable matrix per module, Gram averaging, Procrustes alignment.

Meng et al., arXiv:2602.17095. No public code; the method is taken from secondary
sources (``shared/reference/baselines.md``). What is uncertain, and what this module
chose:

- aggregation weights, 1/N or data size: the data weights a_k (uniform when the
  clients' weights are equal);
- the initialization of A (it must be nonzero: a zero A gets zero gradient) and the
  target modules: client-side, not the server's concern;
- the first round has no previous A to align to: A~ is sent unrotated;
- eigenvalues of the averaged Gram below zero (rounding) are clamped to zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from fraq._validation import compute_dtype
from fraq.aggregators._linalg import batched
from fraq.aggregators.base import Aggregator, Group, GroupOutput, ModuleSpec
from fraq.aggregators.payload import WARM_START, Downlink, Factors

__all__ = ["FLoRG", "FlorgState", "projections", "florg_delta"]


@dataclass(frozen=True)
class FlorgState:
    """module -> the global A (r, min(m, n)) sent last round, the Procrustes anchor."""

    adapters: Mapping[str, torch.Tensor]


def projections(m: int, n: int, *, seed: int = 0, dtype: torch.dtype = torch.float32
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """FLoRG's fixed seeded semi-orthogonal L (m, k) and R (k, n), k = min(m, n).

    L has orthonormal columns and R orthonormal rows (QR of a Gaussian matrix in float64),
    so the update s L A^T A R has the singular values of s A^T A.
    """
    for name, v in (("m", m), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}(={v!r}) must be a positive int")
    k = min(m, n)
    g = torch.Generator().manual_seed(seed)
    L, _ = torch.linalg.qr(torch.randn(m, k, generator=g, dtype=torch.float64))
    R, _ = torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64))
    return L.to(dtype), R.mT.contiguous().to(dtype)


def florg_delta(L: torch.Tensor, A: torch.Tensor, R: torch.Tensor, scale: float) -> torch.Tensor:
    """The dense update ``scale * L A^T A R`` (m, n) of a FLoRG adapter A (r, k)."""
    return scale * (L @ (A.mT @ A) @ R)


class FLoRG(Aggregator):
    r"""Average the clients' Gram matrices, re-factor, align to last round.

    Client k trains one matrix :math:`A_k` (r x k), k = min(m, n), and its update is
    :math:`s L A_k^\top A_k R` with fixed L, R (:func:`projections`). Because L and R are
    shared and semi-orthogonal, the aggregate update is :math:`s L Q R` with

    .. math::
        Q = \sum_j a_j A_j^\top A_j = P^\top \Lambda P,\qquad
        \tilde A = \Lambda_r^{1/2} P_{:r},\qquad
        A_{prev} \tilde A^\top = U S V^\top,\qquad A_{new} = U V^\top \tilde A,

    the best rank-r Gram, factored, then rotated (orthogonal Procrustes) onto the previous
    round's A so that clients' warm starts move as little as possible; the rotation leaves
    :math:`A_{new}^\top A_{new} = \tilde A^\top \tilde A` unchanged. Q is formed by one
    GEMM of the weighted row stack, :math:`Q = S^\top S` with
    :math:`S = [\sqrt{a_1} A_1; \dots]`, and decomposed by a dense symmetric eigensolver;
    the k x k eigenproblem is the method (the paper's timing counts it).

    Every client must have the same rank and scale per module. Clients upload
    ``(None, A_k)``. See the module docstring for what is uncertain.

    Downlink per client and module: r min(m, n) parameters (this rule gives the paper's
    4.01% for LLaMA-3.2-3B but 5.00%, not 1.70%, for RoBERTa-base).
    Flops per module: 2 K r k^2 (Gram) + about 9 k^3 (eigh with vectors) + O(r^2 k).
    """

    name = "florg"
    client_init = WARM_START
    heterogeneous_ranks = False
    single_matrix = True

    def _check_state(self, state, specs: Sequence[ModuleSpec]):
        if state is None:
            return None
        if not isinstance(state, FlorgState):
            raise TypeError(f"state must be a FlorgState (the previous result.state), got {type(state).__name__}")
        for spec in specs:
            if spec.name not in state.adapters:
                raise ValueError(f"state has no adapter for module {spec.name!r}")
            shape = tuple(state.adapters[spec.name].shape)
            if shape != (spec.ranks[0], spec.n):
                raise ValueError(f"state.adapters[{spec.name!r}].shape={shape}, the uploads need "
                                 f"{(spec.ranks[0], spec.n)}")
        return state

    def _group(self, group: Group, state: FlorgState | None) -> GroupOutput:
        spec = group.spec
        r = spec.ranks[0]
        cdt = compute_dtype(spec.dtype)
        _, As = group.client_factors()
        S = torch.cat([A.to(cdt) * math.sqrt(a) for A, a in zip(As, group.weights)], dim=-2)  # (*, K r, k)
        Q = torch.matmul(S.mT, S)
        lam, V = batched(torch.linalg.eigh, Q)  # ascending
        q = min(r, lam.shape[-1])
        lam = lam[..., -q:].flip(-1).clamp_min(0)
        P = V[..., :, -q:].flip(-1).mT  # (*, q, k)
        At = lam.sqrt().unsqueeze(-1) * P
        if q < r:
            At = torch.cat([At, At.new_zeros(*At.shape[:-2], r - q, At.shape[-1])], dim=-2)
        if state is not None:
            prev = group.stack_modules([state.adapters[n] for n in group.names]).to(cdt)
            U, _, Vh = torch.linalg.svd(torch.matmul(prev, At.mT))
            At = torch.matmul(torch.matmul(U, Vh), At)
        At = At.to(spec.dtype)
        s = spec.scales[0]
        out: GroupOutput = {}
        for mod, A in zip(group.specs, group.split(At)):
            out[mod.name] = (Downlink(sent=(A,), start=Factors(None, A, s)), r)
        return out

    def _finish(self, specs, downlinks, state):
        return FlorgState({spec.name: downlinks[0][spec.name].start.A for spec in specs}), {}
