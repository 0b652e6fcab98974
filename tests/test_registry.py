"""The one backend registry: a backend registered once is seen by every reader."""

from __future__ import annotations

import pytest
import torch

import fraq
from fraq.backends import BACKENDS, EXACT_BACKENDS, REGISTRY, get_backend, register_backend
from fraq.backends.cholesky import cholesky, cholesky_basis_flops
from fraq.backends.householder import householder
from fraq.flops import basis_flops, coordinate_flops, fraq_flops, gemm_flops, householder_flops
from fraq.synthetic import lora_clients


@pytest.fixture
def scratch_registry():
    """The registry, restored to its entries afterwards."""
    saved = dict(REGISTRY)
    yield REGISTRY
    REGISTRY.clear()
    REGISTRY.update(saved)


def _wrapped_householder(X):
    return householder(X)


def _cost(d, r, p, *, steps=None, gram="gemm"):
    return householder_flops(d, r, p) + gemm_flops(1, 1, 1)


def test_registered_backend_reaches_every_reader(scratch_registry):
    register_backend("test-exact", _wrapped_householder, exact=True, flops=_cost)
    assert BACKENDS["test-exact"] is _wrapped_householder and get_backend("test-exact") is _wrapped_householder
    assert "test-exact" in EXACT_BACKENDS and EXACT_BACKENDS[-1] == "test-exact"
    assert fraq.BACKENDS is BACKENDS
    d, D, r, p = 64, 96, 12, 5
    assert fraq_flops(d, D, r, p, "test-exact") == fraq_flops(d, D, r, p) + 2.0
    assert basis_flops(d, r, p, "test-exact") == _cost(d, r, p)
    # and recompress runs it, equal to the default it wraps
    Bs, As = lora_clients(d, D, [6, 6], seed=3, dtype=torch.float64)
    B, A = fraq.stack(Bs, As)
    got, ref = fraq.recompress(B, A, rank=p, backend="test-exact"), fraq.recompress(B, A, rank=p)
    assert torch.equal(got.B @ got.A, ref.B @ ref.A)


def test_two_argument_registration_defaults(scratch_registry):
    register_backend("test-plain", _wrapped_householder)
    assert "test-plain" in BACKENDS and "test-plain" not in EXACT_BACKENDS
    assert REGISTRY["test-plain"].exact is False and REGISTRY["test-plain"].flops is None
    with pytest.raises(ValueError, match="test-plain.*without a FLOP model"):
        fraq_flops(10, 20, 4, 2, "test-plain")
    # the pipeline around the basis is still countable
    assert coordinate_flops(10, 20, 4, 2) > 0


def test_views_are_read_only_and_live(scratch_registry):
    n = len(BACKENDS)
    with pytest.raises(TypeError):
        BACKENDS["x"] = householder  # type: ignore[index]
    register_backend("householder", householder, exact=False, flops=householder_flops)
    assert len(BACKENDS) == n and "householder" not in EXACT_BACKENDS


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="", fn=householder), "name"),
    (dict(name="x", fn=3), "fn"),
    (dict(name="x", fn=householder, exact="yes"), "exact"),
    (dict(name="x", fn=householder, flops=1.0), "flops"),
    (dict(name="x", fn=householder, static="yes"), r"static\(='yes'\)"),
])
def test_register_backend_refuses_bad_arguments(scratch_registry, kwargs, match):
    with pytest.raises(TypeError, match=match):
        register_backend(**kwargs)


def test_every_builtin_backend_has_a_flop_model():
    for name in BACKENDS:
        assert REGISTRY[name].flops is not None
        assert basis_flops(256, 16, 4, name, steps=3) > 0


def _pipeline_ran(backend, *, dtype=torch.float32, gram="auto"):
    """The pipeline ``recompress(pipeline="static")`` ran with ``backend`` on a LoRA stack below
    the general-rank regime, checked against the float64 optimum at its rank: the product is
    within 64 s eps ||M||_F of it (s = min(d, r); the bound of tests/test_reads_per_call.py)."""
    Bs, As = lora_clients(48, 40, [2, 3, 4], seed=5, dtype=dtype)
    B, A = fraq.stack(Bs, As)
    res = fraq.recompress(B, A, tau=0.95, backend=backend, pipeline="static", gram=gram)
    M = B.double() @ A.double()
    S = torch.linalg.svdvals(M)
    err = torch.linalg.matrix_norm(M - res.B.double() @ res.A.double())
    bound = S[int(res.rank):].square().sum().sqrt() + 64 * 9 * torch.finfo(dtype).eps * S.square().sum().sqrt()
    assert res.backend == backend and err <= bound
    return res.info["pipeline"]


def test_the_static_pass_serves_a_backend_by_its_registry_entry(scratch_registry):
    """``static`` in the registry, not the name ``cholesky``, is what puts a call on the static
    pass: a new name registered with it gets the pass where the dtype and the Gram's form allow;
    the same basis registered without it, or ``cholesky`` re-registered without it, does not."""
    assert [name for name, spec in REGISTRY.items() if spec.static] == ["cholesky"]
    register_backend("test-static", cholesky, exact=True, flops=cholesky_basis_flops, static=True)
    register_backend("test-not-static", cholesky, exact=True, flops=cholesky_basis_flops)
    assert _pipeline_ran("test-static") == "static"
    assert _pipeline_ran("test-static", dtype=torch.float64) == "stepwise"  # no float32 compute
    assert _pipeline_ran("test-static", gram="product") == "stepwise"  # the Gram is not factored
    assert _pipeline_ran("test-not-static") == "stepwise"
    assert _pipeline_ran("cholesky") == "static"
    register_backend("cholesky", cholesky, exact=True, flops=cholesky_basis_flops)
    assert _pipeline_ran("cholesky") == "stepwise"
