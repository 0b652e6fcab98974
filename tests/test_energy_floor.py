"""The Gram's noise floor: relative to lambda_1, and absolute from the factors' scale when the clients cancel."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fraq._energy import noise_floor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_floor_is_the_larger_of_the_relative_and_the_input_rounding(dtype, as_tensor):
    """(s eps)^2 ||X||^2 ||Y||^2 decides where lambda_1 is itself rounding (cancelling clients);
    s eps lambda_1 otherwise; a non-finite input scale (an overflowed norm) is ignored."""
    s, eps = 8, torch.finfo(dtype).eps
    lam1 = np.array([[1.0], [1e-30], [2.0]])
    input_sq = np.array([[1.0], [1.0], [np.inf]])
    want = np.array([[s * eps], [(s * eps) ** 2], [2.0 * s * eps]])
    conv = (lambda a: torch.from_numpy(a)) if as_tensor else (lambda a: a)
    got = noise_floor(conv(lam1), s, dtype, conv(input_sq))
    np.testing.assert_allclose(np.asarray(got), want, rtol=4 * np.finfo(np.float64).eps)
    np.testing.assert_array_equal(np.asarray(noise_floor(conv(lam1), s, dtype)), lam1 * s * eps)  # no scale: as before


def test_cancelling_clients_eigenvalues_lie_below_the_input_floor():
    """Two clients whose updates cancel exactly: every eigenvalue of the product Gram, computed
    independently here in float64 (QR, then H H^T), is at or below (s eps)^2 ||X||^2 ||Y||^2,
    while the relative floor alone keeps them all."""
    g = torch.Generator().manual_seed(0)
    B1, A1 = torch.randn(32, 4, generator=g, dtype=torch.float64), torch.randn(4, 24, generator=g, dtype=torch.float64)
    X, Y = torch.cat([B1, -B1], -1), torch.cat([A1, A1], -2)
    R = torch.linalg.qr(X).R
    lam = torch.linalg.eigvalsh((R @ Y) @ (R @ Y).mT).flip(0).numpy()[None]
    s = 8
    input_sq = np.array([[float(torch.linalg.matrix_norm(X) * torch.linalg.matrix_norm(Y)) ** 2]])
    assert (lam > noise_floor(lam[:, :1], s, torch.float64)).sum() == s
    assert (lam > noise_floor(lam[:, :1], s, torch.float64, input_sq)).sum() == 0
