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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fraq._validation import compute_dtype
from fraq.aggregators._kernel import check_kernel
from fraq.aggregators._linalg import batched
from fraq.aggregators.base import Aggregator, AggregatorState, Group, GroupOutput, ModuleSpec
from fraq.aggregators.layer import ClientLayer, Draw, Seeds
from fraq.aggregators.payload import WARM_START, Downlink, Factors
from fraq.flops import florg_model

__all__ = ["FLoRG", "FlorgLayer", "FlorgLinear", "FlorgState", "KERNELS", "projections", "florg_delta"]

KERNELS = ("eigh", "gram")
"""The values of FLoRG's ``kernel`` option (:class:`FLoRG`); the first is the default."""


def _dense_factor(S: torch.Tensor, r: int) -> torch.Tensor:
    """The leading min(r, k) rows of Lambda^(1/2) P^T from the k x k Gram S^T S of the row
    stack S (*, R, k): one GEMM and a dense symmetric eigensolver, O(R k^2 + k^3)."""
    lam, V = batched(torch.linalg.eigh, torch.matmul(S.mT, S))  # ascending
    q = min(r, lam.shape[-1])
    lam = lam[..., -q:].flip(-1).clamp_min(0)
    return lam.sqrt().unsqueeze(-1) * V[..., :, -q:].flip(-1).mT  # (*, q, k)


def _gram_factor(S: torch.Tensor, r: int) -> torch.Tensor:
    """The same factor from the R x R Gram S S^T: its leading min(r, R, k) eigenvectors W_r
    are S's leading left singular vectors, and W_r^T S = Sigma_r V_r^T, O(R^2 k + R^3)."""
    _, W = batched(torch.linalg.eigh, torch.matmul(S, S.mT))  # ascending
    q = min(r, W.shape[-1], S.shape[-1])
    return torch.matmul(W[..., :, -q:].flip(-1).mT, S)  # (*, q, k)


@dataclass(frozen=True)
class FlorgState(AggregatorState):
    """module -> the global A (r, min(m, n)) sent last round, the Procrustes anchor."""

    aggregator = "florg"
    adapters: Mapping[str, torch.Tensor]

    def to_record(self) -> dict:
        return {"adapters": dict(self.adapters)}

    @classmethod
    def from_record(cls, record: dict) -> FlorgState:
        adapters = dict(record["adapters"])
        if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in adapters.items()):
            raise ValueError("FlorgState adapters must map module names to tensors")
        return cls(adapters)


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


class FlorgLinear(nn.Module):
    r"""FLoRG's adapted linear layer: :math:`y = x (W + s L A^\top A R)^\top + b`.

    One trainable matrix ``A`` (r, k), k = min(m, n); ``L`` (m, k) and ``R`` (k, n) are the
    fixed seeded semi-orthogonal projections of :func:`projections`.
    """

    def __init__(self, base: nn.Linear, A: torch.Tensor, L: torch.Tensor, R: torch.Tensor, scale: float):
        super().__init__()
        self.base_layer = base
        self.A = nn.Parameter(A.to(base.weight.dtype).clone())
        self.register_buffer("L", L.to(base.weight.dtype), persistent=False)
        self.register_buffer("R", R.to(base.weight.dtype), persistent=False)
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = (x @ self.R.mT) @ self.A.mT  # (..., r)
        return self.base_layer(x) + self.scale * ((h @ self.A) @ self.L.mT)


class FlorgLayer(ClientLayer):
    """FLoRG's clients: one matrix A (r, min(m, n)) per module, update ``s L A^T A R``.

    The projections (L, R) of the j-th target module are :func:`projections` seeded by
    ``seeds("florg", j)``, built once per run. The initial A must be nonzero (a zero A gets
    no gradient), so the clients start from the pretrained weights minus the initial
    adapter's update (:meth:`offset`): the model before training is the pretrained one.
    """

    peft_lora = False

    def __init__(self, targets: Mapping[str, tuple[int, int]], seeds: Seeds):
        super().__init__(targets, seeds)
        self._projections: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def projections(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Module -> the fixed (L, R), seeded per module."""
        if self._projections is None:
            self._projections = {name: projections(m, n, seed=self.seeds(FLoRG.name, j) % 2**31)
                                 for j, (name, (m, n)) in enumerate(self.targets.items())}
        return self._projections

    def fresh(self, name: str, rank: int, scale: float, draw: Draw) -> Factors:
        k = min(self.targets[name])
        _, A = draw(k, k, rank)
        return Factors(None, A, scale)

    def delta(self, name: str, f: Factors) -> torch.Tensor:
        L, R = self.projections[name]
        return florg_delta(L.double(), f.A.double(), R.double(), f.scale)

    def offset(self, start: Mapping[str, Factors]) -> dict[str, tuple[Factors, ...]]:
        return {n: (Factors(None, f.A, -f.scale),) for n, f in start.items()}

    def module(self, name: str, base: nn.Module, start: Factors, scale: float) -> nn.Module:
        return FlorgLinear(base, start.A, *self.projections[name], scale)

    def upload(self, module: nn.Module) -> tuple[torch.Tensor | None, torch.Tensor]:
        return None, module.A.detach().float().cpu().clone()


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

    ``kernel="gram"`` (FLoRG at its best) takes the same factor from the R x R Gram of
    the row stack, R = K r, instead of the k x k one: with :math:`S = U \Sigma V^\top`,
    :math:`\tilde A = \Sigma_r V_r^\top = U_r^\top S`, and :math:`U_r` are the leading
    eigenvectors of :math:`S S^\top` (:func:`_gram_factor`): O(R^2 k + R^3) in place of
    O(k^3), the same :math:`\tilde A^\top \tilde A` to rounding wherever the spectrum has a
    gap at r (an eigenvector's error is eps ||S||^2 over its gap in either Gram).

    Downlink per client and module: r min(m, n) parameters (this rule gives the paper's
    4.01% for LLaMA-3.2-3B but 5.00%, not 1.70%, for RoBERTa-base).
    Flops per module (:func:`fraq.flops.florg_flops`, the class's ``flop_model``): 2 R k^2
    (Gram) + 14 k^3 / 3 (``syevd`` with vectors); ``kernel="gram"``: 2 R^2 k (Gram) + 14 R^3 / 3
    (``syevd``) + 2 R r k; a round with a previous A adds its Procrustes step, O(r^2 k + r^3).

    Args:
        kernel: ``"eigh"`` (default: the k x k Gram, as the method is described) or
            ``"gram"`` (the R x R Gram).
    """

    name = "florg"
    client_init = WARM_START
    display_name = "FLoRG"
    paper_order = 6  # its row in the paper's Tables 1-3
    downlink_rule = "r min(m, n)"
    heterogeneous_ranks = False
    single_matrix = True
    state_type = FlorgState
    dense_factorization = True
    partial_first_round = True  # round 1 has no previous A to align to
    not_an_adapter = "FLoRG clients train one matrix per module, not peft's (lora_A, lora_B)"
    no_delta = not_an_adapter

    kernel_variants = ("gram",)
    flop_model = staticmethod(florg_model)

    def __init__(self, *, kernel: str = "eigh"):
        self.kernel = check_kernel(kernel, KERNELS)
        self.dense_factorization = kernel == "eigh"

    def client_layer(self, targets: Mapping[str, tuple[int, int]], seeds: Seeds) -> FlorgLayer:
        return FlorgLayer(targets, seeds)

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
        _, S = group.stacked(cdt, scaled=False)  # (*, K r, k): rows sqrt(a_k) A_k
        At = _gram_factor(S, r) if self.kernel == "gram" else _dense_factor(S, r)
        q = At.shape[-2]
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
