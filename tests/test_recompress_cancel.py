"""Clients whose updates cancel exactly: the aggregate is the zero matrix, rank 0 at tau = 1 (docs/library.md)."""

from __future__ import annotations

import pytest
import torch

from fraq._recompress import recompress
from fraq._stack import stack
from fraq.reference import relative_error


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gram", ["auto", "product", "factored"])
def test_exactly_cancelling_clients_give_rank_zero(dtype, gram):
    g = torch.Generator().manual_seed(0)
    B1, A1 = torch.randn(32, 4, generator=g, dtype=dtype), torch.randn(4, 24, generator=g, dtype=dtype)
    B, A = stack([B1, -B1], [A1, A1], [1, 1])
    res = recompress(B, A, tau=1.0, gram=gram)
    assert int(res.rank) == 0 and float(res.energy) == 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nearly_cancelling_clients_keep_their_difference(dtype):
    """B2 = -B1 + D with ||D|| ~ 1e-2 ||B1||: the difference (rank 4) is far above the inputs'
    rounding, so tau = 1 keeps it to the dtype's accuracy."""
    g = torch.Generator().manual_seed(1)
    B1, A1 = torch.randn(32, 4, generator=g, dtype=dtype), torch.randn(4, 24, generator=g, dtype=dtype)
    D = 1e-2 * torch.randn(32, 4, generator=g, dtype=dtype)
    B, A = stack([B1, -B1 + D], [A1, A1], [1, 1])
    res = recompress(B, A, tau=1.0)
    assert int(res.rank) == 4
    assert float(relative_error(B, A, res.B, res.A)) <= 1e3 * torch.finfo(dtype).eps / 1e-2
