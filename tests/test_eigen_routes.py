"""The eigensolver routes (fraq._eigen) on the CPU: each is LAPACK's syevd there, reads the
lower triangle only, refuses a non-finite Gram with None, and a route that cannot run here
is refused by name before any work. The CUDA routes are checked against a float64 host
solve in tests/test_recompress.py (marked cuda)."""

from __future__ import annotations

import pytest
import torch

from fraq._eigen import EIGENSOLVERS, check_eigensolver, eigh


def _grams(batch=(3,), r=12, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(*batch, r, 3 * r, generator=g, dtype=torch.float64)
    H *= torch.logspace(0, -3, r, dtype=torch.float64).unsqueeze(-1)
    return H @ H.mT


@pytest.mark.parametrize("route", ["auto", "device", "host"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_cpu_route_is_lapacks_solve_of_the_lower_triangle(route, dtype):
    G = _grams()
    want = torch.linalg.eigh(G.to(dtype))
    junk = G + torch.triu(torch.full_like(G, 7.0), diagonal=1)  # the upper triangle is never read
    lam, U = eigh(junk, dtype, route)
    assert lam.dtype == dtype and U.dtype == dtype and lam.device == G.device
    assert torch.equal(lam, want.eigenvalues) and torch.equal(U, want.eigenvectors)


@pytest.mark.parametrize("batch", [(), (1,), (2, 3)])
def test_batch_shapes_are_kept(batch):
    lam, U = eigh(_grams(batch, r=5), torch.float64, "host")
    assert lam.shape == (*batch, 5) and U.shape == (*batch, 5, 5)


def test_a_non_finite_gram_is_refused_with_none():
    G = _grams()
    G[1, 2, 0] = float("nan")
    for route in ("device", "host"):
        assert eigh(G, torch.float64, route) is None


def test_a_route_that_cannot_run_is_refused_by_name():
    assert set(EIGENSOLVERS) == {"auto", "device", "host", "cupy"}
    with pytest.raises(ValueError, match=r"eigensolver\(='lapack'\) must be one of"):
        check_eigensolver("lapack")
    with pytest.raises(ValueError, match=r"eigensolver\(='cupy'\) (solves on a CUDA GPU|needs CuPy)"):
        check_eigensolver("cupy", torch.device("cpu"))
    for route in ("auto", "device", "host"):
        assert check_eigensolver(route, torch.device("cpu")) == route


def test_auto_takes_cupy_on_cuda_only_where_cupy_imports(monkeypatch):
    import fraq._eigen as eigen

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    monkeypatch.setattr(eigen, "_say_no_cupy", lambda: None)
    for imports in (True, False):
        monkeypatch.setattr(eigen, "_cupy_import_error", lambda imports=imports: None if imports else "absent")
        assert eigen.resolve("auto", cpu) == "device"  # no CPU measurement favours another route
        assert eigen.resolve("auto", cuda) == ("cupy" if imports else "device")
        assert eigen.resolve("host", cpu) == "device" and eigen.resolve("host", cuda) == "host"
        assert eigen.resolve("device", cuda) == "device"


def test_auto_on_cuda_without_cupy_says_so_once(monkeypatch):
    """A run on CUDA without CuPy is told, once per process, which route "auto" took and why."""
    import warnings

    import fraq._eigen as eigen

    monkeypatch.setattr(eigen, "_cupy_import_error", lambda: "ModuleNotFoundError: No module named 'cupy'")
    eigen._say_no_cupy.cache_clear()
    cuda = torch.device("cuda", 0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert [eigen.resolve("auto", cuda) for _ in range(3)] == ["device"] * 3
        assert eigen.resolve("auto", torch.device("cpu")) == "device"
    assert len(seen) == 1 and "takes torch's eigh on CUDA" in str(seen[0].message) and "[gpu]" in str(seen[0].message)
    eigen._say_no_cupy.cache_clear()


def test_the_route_taken_is_in_the_results_info():
    import fraq

    g = torch.Generator().manual_seed(3)
    B, A = torch.randn(2, 40, 12, generator=g), torch.randn(2, 12, 30, generator=g)
    for route in ("auto", "device", "host"):
        assert fraq.recompress(B, A, tau=0.9, eigensolver=route).info["eigensolver"] == "device"
