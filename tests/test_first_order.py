"""First-order fidelity: principal angles and singular-value errors against float64, and the
identity basis refused where its Gram cannot resolve the kept directions."""

from __future__ import annotations

import math

import pytest
import torch

import fraq
from benchmarks.cases import conditioned
from benchmarks.measure.fidelity import fidelity, first_order
from benchmarks.measure.methods import get_method
from fraq.reference import reference_svd

F64 = torch.float64


def test_principal_angle_and_sigma_error_of_a_known_perturbation():
    """An adapter whose left subspace is the true one rotated by a known angle t in a plane
    with a discarded direction: sin = sin t; the singular values scaled by (1 + d): error d."""
    g = torch.Generator().manual_seed(0)
    U = torch.linalg.qr(torch.randn(20, 6, generator=g, dtype=F64)).Q
    V = torch.linalg.qr(torch.randn(15, 6, generator=g, dtype=F64)).Q
    S = torch.tensor([5.0, 4.0, 3.0, 1.0, 0.5, 0.1], dtype=F64)
    B, A = U * S, V.mT
    t, d = 1e-3, 2e-4
    Ur = U[:, :3].clone()
    Ur[:, 2] = math.cos(t) * U[:, 2] + math.sin(t) * U[:, 4]  # rotated toward a discarded direction
    Bg, Ag = Ur * (S[:3] * (1 + d)), V[:, :3].mT
    f = first_order(Bg, Ag, 3, *reference_svd(B, A), eps=2.0**-24)
    assert f.sin_left.item() == pytest.approx(math.sin(t), rel=1e-6)
    assert f.sin_right.item() < 1e-12
    assert f.sigma_error.item() == pytest.approx(d, rel=1e-3)
    gap = 3.0 - 1.0
    assert f.bound_first.item() == pytest.approx(15**0.5 * 2.0**-24 * 5.0 / gap)
    assert f.bound_squared.item() == pytest.approx(15**0.5 * 2.0**-24 * 25.0 / (9.0 - 1.0))


def test_angles_undefined_without_a_gap():
    """Equal singular values at p and p + 1: the rank-p subspace is not defined, angles are NaN."""
    g = torch.Generator().manual_seed(1)
    U = torch.linalg.qr(torch.randn(12, 4, generator=g, dtype=F64)).Q
    V = torch.linalg.qr(torch.randn(10, 4, generator=g, dtype=F64)).Q
    B, A = U * torch.tensor([2.0, 1.0, 1.0, 0.5], dtype=F64), V.mT
    f = fidelity(B, A, B[:, :2], A[:2], 2)
    assert math.isnan(f.first.sin_left.item()) and math.isnan(f.first.bound_first.item())
    assert f.first.sigma_error.item() < 1e-14


@pytest.mark.parametrize("rank", [48, 60])
def test_identity_basis_refused_below_sqrt_eps(rank):
    """r = d = 64, kappa 1e6, float32: the kept subspaces are within the first-order (Wedin)
    bound of the float64 SVD's, as the textbook QR-QR-SVD's are, because the identity basis is
    replaced (info["graded_basis"]), and the kept singular values within Weyl's bound
    c eps sigma_1 / sigma_p (relative to sigma_p; c = sqrt(min(m, n))). The paper's
    configuration (product Gram, float32 eigh) breaks both bounds wherever they can judge
    (rank 48, bound < 1; at rank 60, sigma_p about 2e-6 sigma_1, Weyl's bound is 0.2 and the
    paper's error, about 0.11, is inside it, so nothing is claimed of it there).

    Margins, measured under MKL_CBWR=AVX2, AVX512 and COMPATIBLE at 1 and 2 threads: ours is
    at least 100x under Weyl's bound (rank 48: 1.4e-4 against 1.4e-2; rank 60: 1.3e-3
    against 0.2), the paper's configuration 8x over it at rank 48 (0.12 against 1.4e-2) and
    5x over Wedin's (sin 0.76 against 0.145). Only derived bounds are asserted, never a ratio
    of two methods' rounding errors (that moves with the BLAS path's summation order)."""
    Bs, As, _ = conditioned(64, 64, 64, 1e6, clients=8, batch=2)
    B, A = fraq.stack([b.double() for b in Bs], [a.double() for a in As])
    res = fraq.recompress(*fraq.stack(Bs, As), rank=rank)
    assert res.info["graded_basis"] == 2 and "basis" not in res.info
    for name, Bg, Ag in [("fraq", res.B, res.A), ("qr-svd", *get_method("qr-svd")(Bs, As, rank=rank)[:2])]:
        f = fidelity(B, A, Bg, Ag, rank).first
        assert (f.sin_left <= f.bound_first).all() and (f.sin_right <= f.bound_first).all(), name
    S = reference_svd(B, A)[1]
    weyl = 64**0.5 * 2.0**-24 * S[..., 0] / S[..., rank - 1]  # relative error bound on sigma_p
    ours = fidelity(B, A, res.B, res.A, rank).first
    assert (ours.sigma_error <= weyl / 10).all(), (ours.sigma_error, weyl)  # 10x of a >= 100x margin
    paper = fidelity(B, A, *get_method("fraq-paper")(Bs, As, rank=rank)[:2], rank).first
    if (paper.bound_first < 1).all():  # a subspace the bounds can judge
        assert (paper.sigma_error > 2 * weyl).all(), (paper.sigma_error, weyl)  # 2x of an 8x margin
        assert (paper.sin_left > paper.bound_first).any()


def test_identity_basis_kept_for_well_resolved_ranks():
    Bs, As, _ = conditioned(64, 64, 64, 1e6, clients=8, batch=1)
    res = fraq.recompress(*fraq.stack(Bs, As), rank=8)
    assert res.info["basis"] == "identity" and res.info["graded_basis"] == 0


@pytest.mark.parametrize("name", ["qr-svd", "rsvd"])
def test_textbook_baselines_near_optimal(name):
    """Both baselines: rank p within 64 eps sqrt(r) of the float64 optimum in quadrature; the
    energy rule gives the float64 rule's rank on a well-separated spectrum."""
    Bs, As, _ = conditioned(48, 40, 16, 1e3, clients=4, batch=2)
    B, A = fraq.stack([b.double() for b in Bs], [a.double() for a in As])
    Bg, Ag, p = get_method(name)(Bs, As, rank=6)
    f = fidelity(B, A, Bg, Ag, p)
    assert (f.excess_quadrature <= 64 * 2.0**-24 * 16**0.5).all()
    Bg, Ag, p = get_method(name)(Bs, As, tau=0.9)
    S = reference_svd(B, A)[1]
    want = fraq.select_rank(S.square(), 0.9)
    assert torch.equal(torch.as_tensor(p), want)
