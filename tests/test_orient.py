"""fraq._orient: the one orientation helper (Eq. 9)."""

from __future__ import annotations

import pytest
import torch

from fraq._orient import orient, unorient

F64 = torch.float64


@pytest.mark.parametrize("m,n", [(5, 9), (9, 5), (7, 7)])
@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_orient_puts_x_on_the_smaller_side_and_unorient_restores(m, n, batch):
    g = torch.Generator().manual_seed(0)
    B, A = torch.randn(*batch, m, 4, generator=g, dtype=F64), torch.randn(*batch, 4, n, generator=g, dtype=F64)
    X, Y, transposed = orient(B, A)
    assert X.shape[-2] == min(m, n) and Y.shape[-1] == max(m, n) and transposed == (m > n)
    M = B @ A
    tol = 16 * torch.finfo(F64).eps * float(B.abs().max() * A.abs().max()) * 4  # inner dimension 4
    assert ((X @ Y) - (M.mT if transposed else M)).abs().max() <= tol
    L, R = X[..., :, :2], Y[..., :2, :]
    Bg, Ag = unorient(L, R, transposed)
    assert Bg.shape[-2:] == (m, 2) and Ag.shape[-2:] == (2, n)
    assert ((Bg @ Ag) - ((L @ R).mT if transposed else L @ R)).abs().max() <= tol


def test_fixed_orientation_never_transposes():
    B, A = torch.ones(9, 2), torch.ones(2, 5)
    X, Y, transposed = orient(B, A, adaptive=False)
    assert X is B and Y is A and not transposed
