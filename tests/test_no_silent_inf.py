"""No method returns an inf or NaN from finite uploads: a round whose weighting or whose
aggregate leaves the uploads' dtype (float16's 65504 here) is refused with an error that
names the remedy, on the list path and through a round buffer alike."""

from __future__ import annotations

import pytest
import torch

from fraq.aggregators import AGGREGATORS, ClientUpdate, get_aggregator


def _uploads(big: float) -> list[ClientUpdate]:
    g = torch.Generator().manual_seed(0)

    def up(scale: float) -> ClientUpdate:
        B = torch.randn(16, 4, generator=g)
        A = torch.randn(4, 12, generator=g) * scale
        return ClientUpdate(factors={"m": (B.half(), A.half())}, weight=1.0, scale=8.0)

    return [up(big), up(1.0), up(1.0)]


def _finite(result) -> bool:
    return all(bool(torch.isfinite(t).all()) for d in result.downlinks for down in d.values() for t in down.sent
               if t is not None)


def _methods():
    return [m for m in AGGREGATORS if not AGGREGATORS[m].not_an_adapter and AGGREGATORS[m].state_type is None
            and not AGGREGATORS[m].alternating_freeze]


@pytest.mark.parametrize("path", ["list", "buffer"])
@pytest.mark.parametrize("method", _methods())
def test_finite_uploads_never_give_a_non_finite_adapter(method, path):
    """Finite float16 uploads: one client's A at 2e4 (weighted by sqrt(1/3) * 8: past 65504 in
    the stacks) and, at 2e3, within the stacks but an aggregate with entries past it. Either
    the adapter is finite or the round is refused naming a wider dtype."""
    outcomes = set()
    for big in (2e4, 2e3, 1.0):
        uploads = _uploads(big)
        assert all(bool(torch.isfinite(t).all()) for u in uploads for f in u.factors.values() for t in f)
        agg = get_aggregator(method)
        try:
            if path == "list":
                result = agg.aggregate(uploads)
            else:
                buf = agg.open_round({"m": (16, 12)}, clients=3, ranks=4, dtype=torch.float16)
                for u in uploads:
                    buf.add(u)
                result = buf.aggregate()
        except ValueError as e:
            assert "float16" in str(e) and "float32" in str(e), str(e)  # the dtype and the remedy named
            outcomes.add("refused")
            continue
        assert _finite(result), (method, path, big)
        outcomes.add("finite")
    assert "finite" in outcomes  # the unit-scale round goes through
