"""FLoRIST: thin SVDs of both stacks, an SVD of the small core, an energy threshold.

Ramesh and Dass, "FLoRIST: Singular Value Thresholding for Efficient and Accurate
Federated Fine-Tuning of Large Language Models", arXiv:2506.09199 (MLSys 2026).

Two kernels (the method's ``kernel`` option, ``florist:kernel=qr``), one output:

- ``"svd"`` (the default: what the authors' code runs): a thin SVD of each stack, then
  the SVD of the r x r core;
- ``"qr"`` (FLoRIST at its best): the stacks' SVDs replaced by orthonormal bases from the
  basis backend FRAQ runs on the same device and dtype (:func:`fraq.backends.resolve_backend`:
  Householder on the CPU, Cholesky QR with its per-matrix Householder fallback on CUDA),
  and the core's SVD batched (:func:`core_svd`). Only the singular vectors of the stacks
  were ever needed up to a rotation, so the product, the singular values of the core and
  hence the rank are the same; the cost drops from two SVDs to two QRs, about the FLOPs of
  FRAQ itself (the textbook QR-QR-SVD with FLoRIST's energy rule).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

import fraq
from fraq import _eigen
from fraq._validation import check_tau, check_tau_or_rank, compute_dtype
from fraq.aggregators._kernel import check_kernel
from fraq._layout import tall_product
from fraq._parallel import whole_batch_threads
from fraq.aggregators._linalg import product_floor, select, thin_svd
from fraq.backends import get_backend, resolve_backend
from fraq.aggregators.base import Aggregator, Group, GroupOutput
from fraq.aggregators.payload import WARM_START, Downlink, Factors
from fraq.flops import florist_model

__all__ = ["CORE_ROUTES", "FLoRIST", "KERNELS", "core_svd", "florist_qr_recompress", "florist_recompress"]

KERNELS = ("svd", "qr")
"""The values of FLoRIST's ``kernel`` option (module docstring); the first is the default."""

CORE_ROUTES = ("auto", "svd", "eigh")
"""How :func:`core_svd` decomposes the r x r core: ``"svd"``, a batched thin SVD (LAPACK's
``gesdd`` one matrix per thread on the CPU); ``"eigh"``, the batched symmetric eigensolver
FRAQ uses (:func:`fraq._eigen.eigh`) on the augmented matrix; ``"auto"``: ``"eigh"`` on
CUDA (where torch's SVD of a batch of small matrices loops matrix by matrix), else ``"svd"``."""


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
    p, pmax, keep = select(SP, tau=tau, rank=rank, floor=None if tau is None else product_floor(B, A))
    Bg = tall_product(UB, UP[..., :, :pmax] * (SP[..., :pmax] * keep).unsqueeze(-2))
    Ag = torch.matmul(VhP[..., :pmax, :] * keep.unsqueeze(-1), VhA)
    return Bg, Ag, p


def core_svd(K: torch.Tensor, route: str = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Thin SVD ``K = U diag(S) Vh`` of a batch of small cores K (*, a, b), S descending.

    ``route`` (:data:`CORE_ROUTES`) ``"eigh"`` solves the symmetric eigenproblem of the
    augmented matrix

    .. math::
        M = \begin{pmatrix} 0 & K \\ K^\top & 0 \end{pmatrix}, \qquad
        M \begin{pmatrix} u_i \\ \pm v_i \end{pmatrix} = \pm\sigma_i
        \begin{pmatrix} u_i \\ \pm v_i \end{pmatrix},

    whose s = min(a, b) largest eigenvalues are the singular values, each eigenvector
    :math:`(u_i; v_i)/\sqrt 2`. Unlike the Gram :math:`K^\top K` it does not square the
    condition number: every singular value is within about eps ||K||_2 of the exact one
    (a backward-stable eigensolver on M, ||M||_2 = ||K||_2). A singular vector whose value
    sits within eps ||K|| of its negative partner (sigma_i near 0) is mixed with it; it
    then carries a weight of at most about eps ||K|| in any product, rounding level.
    Cost: the eigensolver on (a + b) x (a + b), about 8x an a x a SVD's FLOPs, bought for
    one batched launch sequence on CUDA instead of a loop.
    """
    if route not in CORE_ROUTES:
        raise ValueError(f"route(={route!r}) must be one of {list(CORE_ROUTES)}")
    if route == "auto":
        route = "eigh" if K.device.type == "cuda" else "svd"
    if route == "svd":
        return thin_svd(K)
    a, b = K.shape[-2], K.shape[-1]
    s = min(a, b)
    M = K.new_zeros(*K.shape[:-2], a + b, a + b)
    M[..., :a, a:] = K
    M[..., a:, :a] = K.mT
    lam, X = _eigen.eigh(M, K.dtype)
    lam, X = lam[..., -s:].flip(-1), X[..., -s:].flip(-1)
    root2 = 2.0 ** 0.5
    return X[..., :a, :] * root2, lam.clamp_min(0), X[..., a:, :].mT * root2


def florist_qr_recompress(B: torch.Tensor, A: torch.Tensor, *, tau: float | None = None, rank: int | None = None,
                          route: str = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""FLoRIST on the QR kernel: stacks B (*, m, r), A (*, r, n); arguments trusted.

    .. math::
        B = Q_B C_B,\quad A^\top = Q_A C_A,\quad C_B C_A^\top = U S V^\top,\\
        B_g = Q_B U_{:p} S_{:p},\qquad A_g = (Q_A V_{:p})^\top,

    the bases from FRAQ's basis backend for the device and dtype
    (:func:`fraq.backends.resolve_backend` with ``"auto"``), the core by :func:`core_svd`
    (``route``), p by the energy rule on S^2 as :func:`florist_recompress`'s, and each
    basis applied to the p kept columns only. Returns ``(B_g, A_g, p)`` as
    :func:`florist_recompress` does: zero past each matrix's own p, p int64.

    Flops per module (d, D the sides, s = min(d, r)): the two bases (Householder:
    2 (d + D) r^2 - 4/3 r^3), the core product 2 s^2 r, its SVD O(s^3), and each basis
    applied to p columns (Householder: about 4 (d + D) s p).
    """
    basis = get_backend(resolve_backend("auto", B.device, B.dtype))
    QB, QA = basis(B), basis(A.mT)
    U, S, Vh = core_svd(torch.matmul(QB.C, QA.C.mT), route)
    p, pmax, keep = select(S, tau=tau, rank=rank, floor=None if tau is None else product_floor(B, A))
    Bg = QB.apply(U[..., :, :pmax] * (S[..., :pmax] * keep).unsqueeze(-2))
    Ag = QA.apply(Vh[..., :pmax, :].mT * keep.unsqueeze(-2)).mT
    return Bg, Ag, p


class FLoRIST(Aggregator):
    r"""Recompress the weighted stack through thin SVDs of both factors.

    With :math:`(B_s, A_s)` from :func:`fraq.stack`,

    .. math::
        B_s = U_B S_B V_B^\top,\quad A_s = U_A S_A V_A^\top,\quad
        P = S_B V_B^\top U_A S_A = U_P S_P V_P^\top,\\
        B_g = U_B U_{P,:p} S_{P,:p},\qquad A_g = (V_P^\top V_A^\top)_{:p},

    where p is the smallest rank whose leading :math:`\sigma_i^2` hold at least ``tau``
    of :math:`\sum_i \sigma_i^2` (the same rule, :func:`fraq.select_rank`, as FRAQ, with
    FRAQ's floor of the product's rounding: a value that no computation from these factors
    can tell from zero counts as zero, so exactly cancelling clients give rank 0 rather
    than a rank of rounding noise; in exact arithmetic the paper's rule unchanged).
    :math:`B_g A_g` is a best rank-p approximation of the exact aggregate, so FLoRIST and
    FRAQ agree on p and on the product; they differ in cost. Each thin SVD runs on its
    factor's tall orientation (``A_s`` is decomposed as :math:`A_s^\top`), the layout
    LAPACK is fastest on, and a batch is split across threads as FRAQ's is.

    Every client downloads the one rank-p global adapter (scale 1: the product already
    carries the LoRA scales) and warm-starts from it; a client of rank r_k keeps its first
    r_k components, or zero-pads when r_k > p. In a batch each module has its own p.

    ``kernel="qr"`` (module docstring, :func:`florist_qr_recompress`) replaces the two
    thin SVDs by the orthonormal bases FRAQ uses and batches the core's SVD: the same p
    and the same product to float32 rounding, at about FRAQ's FLOPs.

    Downlink per client and module: (m + n) p parameters.
    Flops per module (d, D the sides, r = sum r_k): 4 (d + D) r^2 (thin SVDs)
    + O(r^3) + 2 (d + D) r p, the paper's Eq. 26; ``kernel="qr"``, 2 (d + D) r^2 (QRs)
    + O(r^3) + 4 (d + D) r p (:func:`fraq.flops.florist_model`).

    Args:
        tau: energy threshold in (0, 1]; 0.90 by default (the FLoRIST paper uses 0.85
            for mixed ranks).
        kernel: ``"svd"`` (default, as the authors' code runs) or ``"qr"``.
    """

    name = "florist"
    client_init = WARM_START
    display_name = "FLoRIST"
    paper_order = 7  # its row in the paper's Tables 1-3
    downlink_rule = "(m + n) p"
    flop_model = staticmethod(florist_model)
    energy_rule = True
    checks_finite = False  # fraq.stack does
    kernel_variants = ("qr",)

    def __init__(self, *, tau: float = 0.90, kernel: str = "svd"):
        self.tau = check_tau(tau)
        self.kernel = check_kernel(kernel, KERNELS)

    def _recompress(self, B: torch.Tensor, A: torch.Tensor, *, tau: float | None, rank: int | None = None):
        with whole_batch_threads(B, A):  # FRAQ's thread rule for a batch run whole, at these shapes
            if self.kernel == "qr":
                return florist_qr_recompress(B, A, tau=tau, rank=rank)
            return florist_recompress(B, A, tau=tau, rank=rank)

    def _group(self, group: Group, state) -> GroupOutput:
        spec = group.spec
        Bs, As = group.client_factors()
        Bst, Ast = fraq.stack(Bs, As, group.weights, spec.scales, dtype=compute_dtype(spec.dtype))
        Bg, Ag, p = self._recompress(Bst, Ast, tau=self.tau)
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
        Bg, Ag, p = self._recompress(Bst, Ast, tau=tau, rank=rank)
        return Bg.to(Bs[0].dtype), Ag.to(Bs[0].dtype), (int(p) if p.dim() == 0 else p)
