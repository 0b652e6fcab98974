"""The measurement layer: each helper against a quantity derived by hand.

Peak memory against known allocation patterns, the LAPACK FLOP formulas against the
textbook counts on small shapes, counted FLOPs of the FRAQ pipeline against the analytic
model, fidelity against exact truncations, and the ablation variants against
:func:`fraq.recompress`.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch

import fraq
from benchmarks.measure.ablation import VARIANTS, ablation_variant
from benchmarks.measure.fidelity import fidelity, orthogonality_error
from fraq.aggregators import analytic_flops, model_flops
from fraq.flops import (
    eigh_flops,
    flexlora_table5,
    florist_table5,
    fraq_table5,
    svd_flops,
)
from fraq.flops import qr_flops as geqrf_flops
from fraq.flops import reflector_flops as ormqr_flops
from benchmarks.measure.flops import count_flops
from benchmarks.measure.memory import peak_memory, tensor_bytes
from benchmarks.measure.methods import default_path, get_method
from benchmarks.measure.timing import threads, timed
from fraq.reference import reference_svd
from fraq.synthetic import lora_clients

MB = 1_000_000


# ------------------------------------------------------------------ peak memory (CPU)


def test_peak_of_known_pattern():
    def pattern():
        a = torch.empty(MB // 4)  # 1 MB of float32
        b = torch.empty(2 * MB // 4)  # live 3 MB
        del a  # live 2 MB
        c = torch.empty(4 * MB // 4)  # live 6 MB: the peak
        del b
        return c  # 4 MB left allocated

    m = peak_memory(pattern)
    assert m.peak == 6 * MB
    assert m.net == 4 * MB
    assert m.allocated == 7 * MB


def test_peak_excludes_inputs_and_counts_outputs():
    x = torch.ones(500, 400)
    m = peak_memory(lambda: x + x)
    assert m.peak == tensor_bytes(x)
    assert m.net == tensor_bytes(x)


def test_peak_of_matmul_is_its_output():
    a, b = torch.randn(300, 200), torch.randn(200, 100)
    assert peak_memory(lambda: a @ b).peak == 300 * 100 * 4


def test_peak_memory_restores_threads():
    before = torch.get_num_threads()
    seen = []
    peak_memory(lambda: seen.append(torch.get_num_threads()))
    assert seen == [1]
    assert torch.get_num_threads() == before


def test_peak_memory_rejects_other_devices():
    with pytest.raises(ValueError, match="device"):
        peak_memory(lambda: None, device="meta")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_peak_of_known_pattern_cuda():
    # MiB multiples: the caching allocator rounds blocks to 512 bytes, so these are exact.
    mib = 2**20

    def pattern():
        a = torch.empty(mib // 4, device="cuda")
        b = torch.empty(2 * mib // 4, device="cuda")
        del a
        c = torch.empty(4 * mib // 4, device="cuda")
        del b
        return c

    pattern()  # let the allocator reserve its segments once
    m = peak_memory(pattern, device="cuda")
    assert m.peak == 6 * mib
    assert m.net == 4 * mib
    assert m.allocated == 7 * mib


@pytest.mark.integration
def test_cupys_pool_is_added_to_the_cuda_peak(monkeypatch):
    """The CUDA peak counts what CuPy's pool held after the call (it keeps every block
    until released, so at least its peak) on top of torch's counters, and nothing when
    CuPy is not imported. Driven by stand-ins for torch.cuda's counters and CuPy's pool:
    the arithmetic and the release before the call are what is checked here; the CUDA
    test above checks torch's counters on a GPU."""
    import contextlib
    import types

    import benchmarks.measure.memory as memory

    torch_bytes = {"now": 1000, "max": 1000, "churn": 0}

    def alloc(n):
        torch_bytes["now"] += n
        torch_bytes["max"] = max(torch_bytes["max"], torch_bytes["now"])
        torch_bytes["churn"] += n

    fake_cuda = types.SimpleNamespace(
        synchronize=lambda device=None: None, memory_allocated=lambda device=None: torch_bytes["now"],
        max_memory_allocated=lambda device=None: torch_bytes["max"], current_device=lambda: 0,
        memory_stats=lambda device=None: {"allocated_bytes.all.allocated": torch_bytes["churn"]},
        reset_peak_memory_stats=lambda device=None: torch_bytes.update(max=torch_bytes["now"]))
    monkeypatch.setattr(memory.torch, "cuda", fake_cuda)

    class Pool:
        def __init__(self):
            self.held, self.used, self.released = 4096, 512, 0  # a block left free by an earlier call

        def free_all_blocks(self):
            self.released += 1
            self.held = self.used

        def total_bytes(self):
            return self.held

        def used_bytes(self):
            return self.used

    pool = Pool()
    fake_cupy = types.SimpleNamespace(get_default_memory_pool=lambda: pool,
                                      cuda=types.SimpleNamespace(Device=lambda i: contextlib.nullcontext()))

    def call():  # torch: 300 B temporary, 100 B kept; CuPy: 2000 B at once, 200 B kept
        alloc(300)
        alloc(-300)
        alloc(100)
        pool.held += 2000
        pool.used += 200

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    m = memory.peak_memory(call, device="cuda:0")
    assert (m.peak, m.net, m.outside) == (300, 100, 0) and pool.released == 0
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    m = memory.peak_memory(call, device="cuda:0")
    assert pool.released == 1  # the earlier call's free block is not charged to this one
    assert m.outside == 2000 and m.peak == 300 + 2000 and m.net == 100 + 200


# ------------------------------------------------------------------ FLOP formulas


def test_textbook_counts():
    # Householder QR of a tall m x n: 2mn^2 - 2n^3/3; of a wide one: 2nm^2 - 2m^3/3.
    assert geqrf_flops(50, 8) == pytest.approx(2 * 50 * 64 - 2 * 512 / 3)
    assert geqrf_flops(8, 50) == pytest.approx(2 * 50 * 64 - 2 * 512 / 3)
    assert geqrf_flops(8, 8) == pytest.approx(4 * 512 / 3)
    assert ormqr_flops(50, 4, 8) == 4 * 50 * 4 * 8 - 2 * 4 * 64
    # syevd: tridiagonalization 4n^3/3, divide and conquer 4n^3/3 (nominal), back-transformation 2n^3.
    assert eigh_flops(9) == pytest.approx(4 * 729 / 3 + 4 * 729 / 3 + 2 * 729)
    assert eigh_flops(9, vectors=False) == pytest.approx(972)
    # gesdd: QR first from a >= 11b/6 on (6ab^2 + 8b^3 thin), bidiagonalization directly below it.
    assert svd_flops(100, 10) == pytest.approx(6 * 100 * 100 + 8 * 1000)
    assert svd_flops(10, 100) == svd_flops(100, 10)
    assert svd_flops(10, 10) == pytest.approx(8 * 1000 + 4 * 1000 / 3)
    assert svd_flops(18, 10) == pytest.approx(8 * 18 * 100 + 4 * 1000 / 3)  # 18 < 110/6: no QR


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_counted_lapack_calls(batch):
    g = torch.Generator().manual_seed(0)
    nb = math.prod(batch)
    X = torch.randn(*batch, 50, 8, generator=g)
    S = torch.randn(*batch, 8, 8, generator=g)
    S = S @ S.mT + 8 * torch.eye(8)
    cases = [
        (lambda: torch.geqrf(X), nb * (2 * 50 * 64 - 2 * 512 / 3)),
        (lambda: torch.linalg.eigh(S), nb * 14 * 512 / 3),
        (lambda: torch.linalg.cholesky(S), nb * 512 / 3),
        (lambda: torch.linalg.solve_triangular(S, X.mT, upper=True), nb * 64 * 50),
        (lambda: torch.linalg.svd(X, full_matrices=False), nb * (6 * 50 * 64 + 8 * 512)),
        (lambda: X.mT @ X, nb * 2 * 8 * 8 * 50),
    ]
    for fn, expected in cases:
        assert count_flops(fn).total == int(expected) or count_flops(fn).total == pytest.approx(expected, abs=nb)
    refl, tau = torch.geqrf(X)
    C = torch.randn(*batch, 50, 4, generator=g)
    assert count_flops(lambda: torch.ormqr(refl, tau, C)).total == nb * (4 * 50 * 4 * 8 - 2 * 4 * 64)
    assert count_flops(lambda: torch.ormqr(refl, tau, C.mT, left=False)).total == nb * (4 * 50 * 4 * 8 - 2 * 4 * 64)


def test_uncounted_linear_algebra_is_reported():
    c = count_flops(lambda: torch.linalg.lstsq(torch.randn(10, 4), torch.randn(10, 2)))
    assert c.total == 0
    assert c.uncounted == ("aten.linalg_lstsq",)
    assert count_flops(lambda: torch.randn(5).sqrt()).uncounted == ()


def test_count_flops_restores_threads():
    before = torch.get_num_threads()
    count_flops(lambda: torch.randn(4, 4) @ torch.randn(4, 4))
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("m,n", [(300, 500), (500, 300)])
@pytest.mark.parametrize("p", [1, 5])
@pytest.mark.parametrize("backend", ["householder", "cholesky"])
def test_counted_fraq_matches_analytic_model(m, n, p, backend):
    """The code's count equals the model with the code's constants, term for term: the
    default (the factored Gram on these stacks) and the paper's product form."""
    Bs, As = lora_clients(m, n, [8, 8, 4], seed=1)
    B, A = fraq.stack(Bs, As)
    counted = count_flops(lambda: fraq.recompress(B, A, rank=p, backend=backend)).total
    model = analytic_flops("fraq", m, n, 20, p, backend=backend, **default_path(m, n, 20, p))
    assert counted == pytest.approx(model, rel=1e-6)
    product = count_flops(lambda: fraq.recompress(B, A, rank=p, backend=backend, gram="product")).total
    assert product == pytest.approx(analytic_flops("fraq", m, n, 20, p, backend=backend), rel=1e-6)
    # Table 5 keeps the product form's leading terms only, with a SYRK Gram: below its
    # count, same order.
    assert 0.5 * product < analytic_flops("fraq", m, n, 20, p, model="table5") < product


@pytest.mark.parametrize("backend", ["householder", "cholesky"])
def test_counted_factored_gram_matches_analytic_model(backend):
    """recompress(gram="factored") counts as analytic_flops(..., factored=True), and fewer than
    the product form; gram="auto" without cancelling clients takes the factored form."""
    m, n, p = 300, 500, 5
    Bs, As = lora_clients(m, n, [8, 8, 4], seed=1)
    B, A = fraq.stack(Bs, As)
    model = analytic_flops("fraq", m, n, 20, p, backend=backend, factored=True)
    for gram in ("factored", "auto"):
        counted = count_flops(lambda: fraq.recompress(B, A, rank=p, backend=backend, gram=gram)).total
        assert counted == pytest.approx(model, rel=1e-6)
    assert model < analytic_flops("fraq", m, n, 20, p, backend=backend)
    with pytest.raises(ValueError, match="factored"):
        analytic_flops("florist", m, n, 20, p, factored=True)
    with pytest.raises(ValueError, match="factored"):
        analytic_flops("fraq", m, n, 20, p, model="table5", factored=True)


def test_table5_formulas():
    d, D, r, p = 768, 3072, 64, 8
    assert fraq_table5(d, D, r, p) == (2 * d + 3 * D) * r**2
    assert florist_table5(d, D, r, p) == 4 * (d + D) * r**2 + 2 * (d + D) * r * p
    assert flexlora_table5(d, D, r, p) == 2 * d * D * r + 4 * D * d**2
    # The paper's Eq. 15-16 ratio for square matrices, 4(d + D) / (2d + 3D) = 1.6.
    ratio = analytic_flops("florist", d, d, r, 0, model="table5") / analytic_flops("fraq", d, d, r, 0, model="table5")
    assert ratio == pytest.approx(1.6)


def test_model_flops_sums_modules():
    groups = [(768, 768, 3), (3072, 8192, 2)]
    total = model_flops(groups, "fraq", 64, [8, 8, 8, 4, 4], model="table5")
    assert total == pytest.approx(3 * fraq_table5(768, 768, 64, 8) + 2 * fraq_table5(3072, 8192, 64, 4))
    with pytest.raises(ValueError, match="entries"):
        model_flops(groups, "fraq", 64, [8, 8])
    with pytest.raises(ValueError, match="method"):
        analytic_flops("svd", 4, 4, 2, 1)


# ------------------------------------------------------------------ fidelity


def _truncation(B, A, p):
    U, S, Vh = reference_svd(B, A)
    return U[..., :, :p], S[..., :p, None] * Vh[..., :p, :]


@pytest.mark.parametrize("batch", [(), (3,)])
def test_exact_truncation_has_no_excess(batch):
    Bs, As = lora_clients(40, 60, [4, 4, 4], batch=batch, seed=2, dtype=torch.float64)
    B, A = fraq.stack(Bs, As)
    Bg, Ag = _truncation(B, A, 5)
    f = fidelity(B, A, Bg, Ag, 5)
    tol = 100 * torch.finfo(torch.float64).eps
    assert f.relative_error.shape == batch
    assert torch.all(f.optimal_error > 0.01)
    assert torch.all(f.excess.abs() < tol)
    assert torch.all(f.orthogonality < tol)


def test_perturbed_adapter_shows_excess_and_lost_orthogonality():
    Bs, As = lora_clients(40, 60, [4, 4], seed=3, dtype=torch.float64)
    B, A = fraq.stack(Bs, As)
    Bg, Ag = _truncation(B, A, 3)
    Bp = Bg + 1e-3 * torch.randn(Bg.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    f = fidelity(B, A, Bp, Ag, 3)
    assert float(f.excess) > 1e-5
    assert float(f.orthogonality) > 1e-4


def test_orthogonality_masks_padding():
    Q, _ = torch.linalg.qr(torch.randn(2, 30, 4, dtype=torch.float64))
    Q[1, :, 2:] = 0  # second matrix has rank 2, padded with zero columns
    A = torch.randn(2, 4, 20, dtype=torch.float64) * 5  # rows far from orthonormal
    err = orthogonality_error(Q, A, torch.tensor([4, 2]))
    assert torch.all(err < 1e-13)
    assert orthogonality_error(Q, A)[1] > 1  # without the ranks the padding counts as error


# ------------------------------------------------------------------ ablation variants


@pytest.mark.parametrize("m,n", [(120, 50), (50, 120)])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ablation_variants_match_recompress(m, n, variant):
    Bs, As = lora_clients(m, n, [6, 6, 6], batch=(2,), seed=4, dtype=torch.float64)
    B, A = fraq.stack(Bs, As)
    orientation, spectral = VARIANTS[variant]
    Bg, Ag = ablation_variant(B, A, 5, orientation=orientation, spectral=spectral)
    ref = fraq.recompress(B, A, rank=5)
    tol = 1e3 * torch.finfo(torch.float64).eps
    assert Bg.shape == (2, m, 5) and Ag.shape == (2, 5, n)
    assert torch.allclose(Bg @ Ag, ref.B @ ref.A, atol=tol * float((ref.B @ ref.A).abs().max()))


def test_fixed_orientation_factorizes_b():
    """Fixed orientation QRs the m-long factor; adaptive the n-long one (m > n)."""
    m, n, r = 200, 60, 12
    Bs, As = lora_clients(m, n, [6, 6], seed=5)
    B, A = fraq.stack(Bs, As)
    for orientation, rows in (("adaptive", n), ("fixed", m)):
        c = count_flops(lambda: ablation_variant(B, A, 4, orientation=orientation))
        assert c.by_op["aten.geqrf"] == int(geqrf_flops(rows, r))
    with pytest.raises(ValueError, match="orientation"):
        ablation_variant(B, A, 4, orientation="sideways")
    with pytest.raises(ValueError, match="rank"):
        ablation_variant(B, A, 13)


# ------------------------------------------------------------------ methods, timing


def test_fraq_method_is_stack_then_recompress():
    Bs, As = lora_clients(30, 40, [4, 4], batch=(2,), seed=6)
    Bg, Ag, p = get_method("fraq")(Bs, As, rank=3)
    ref = fraq.recompress(*fraq.stack(Bs, As), rank=3)
    assert torch.equal(Bg, ref.B) and torch.equal(Ag, ref.A) and torch.equal(p, ref.rank)
    with pytest.raises(NotImplementedError, match="no-such-backend"):
        get_method("fraq:backend=no-such-backend")


def test_a_backend_is_named_in_the_method_grammar():
    """``fraq:backend=cholesky`` is recompress with that backend; the key-less ``fraq:cholesky``
    is refused with the spelling to use, as at every front door; a baseline's options reach
    its aggregator."""
    Bs, As = lora_clients(30, 40, [4, 4], batch=(2,), seed=6)
    Bg, Ag, p = get_method("fraq:backend=cholesky")(Bs, As, rank=3)
    ref = fraq.recompress(*fraq.stack(Bs, As), rank=3, backend="cholesky")
    assert torch.equal(Bg, ref.B) and torch.equal(Ag, ref.A) and torch.equal(p, ref.rank)
    assert ref.info["backend"] == "cholesky"
    with pytest.raises(ValueError, match=r"method\(='fraq:cholesky'\): .* write 'fraq:backend=cholesky'"):
        get_method("fraq:cholesky")
    with pytest.raises(ValueError, match=r"method\(='qr-svd:p=3'\): qr-svd takes no options"):
        get_method("qr-svd:p=3")
    with pytest.raises(TypeError, match=r"'florist' does not take option nope; it takes tau, kernel$"):
        get_method("florist:nope=1")
    with pytest.raises(ValueError, match=r"method\(='fraq:tau=0.9'\): tau and rank are the call's"):
        get_method("fraq:tau=0.9")
    with pytest.raises(NotImplementedError, match="has no 'no-such-method'"):
        get_method("no-such-method")


def test_every_case_name_is_a_method_spec_that_prints_back():
    """Every method every size compares parses by :class:`fraq.methods.MethodSpec` and prints
    back to the text the sizes hold (result keys and asv parameters are that text); the
    backends' cases name their backend by its key."""
    from benchmarks.measure.methods import split_method
    from benchmarks.sizes import SIZES
    from fraq.methods import MethodSpec

    names = {m for size in SIZES.values() for c in size.values() for m in c.get("methods", [])}
    assert "fraq:backend=cholesky" in names
    for name in names:
        assert str(MethodSpec.parse(name)) == name
        base, options = split_method(name)
        assert set(options) <= {"backend"} and (not options or base == "fraq"), name


def test_a_backend_spec_keeps_the_label_the_archives_hold():
    """A fresh result (``fraq:backend=cholesky``, its recorded display name) and an archived
    one (``fraq:cholesky``, without one) draw under one label; other options show as written."""
    from analysis.style import display_name
    from benchmarks.measure.described import describe

    assert describe("fraq:backend=cholesky")["display_name"] == display_name("fraq:cholesky") == "FRAQ (cholesky)"
    assert describe("fraq:backend=cholesky,gram=product")["display_name"] == "FRAQ (backend=cholesky,gram=product)"
    assert describe("fraq")["display_name"] == "FRAQ"


def test_time_call_records_threads():
    with threads(1) as n:
        t = timed(lambda: torch.randn(10), repeats=3, warmup=1)
    assert n == 1 and t.threads == 1 and len(t.samples) == 3
    assert t.q25 <= t.median <= t.q75
    with pytest.raises(ValueError, match="threads"):
        with threads(0):
            pass


def test_quadrature_excess_recovers_the_methods_own_error():
    """Scaling the exact truncation by (1 + delta) adds delta * M_p, orthogonal to M - M_p."""
    Bs, As = lora_clients(40, 60, [4, 4, 4], seed=7, dtype=torch.float64)
    B, A = fraq.stack(Bs, As)
    Bg, Ag = _truncation(B, A, 4)
    delta = 1e-4
    f = fidelity(B, A, Bg, Ag * (1 + delta), 4)
    opt = float(f.optimal_error)
    assert float(f.excess_quadrature) == pytest.approx(delta * math.sqrt(1 - opt**2), rel=1e-3)
    assert float(f.excess) < 0.1 * delta  # the plain difference squares the error away


@pytest.mark.parametrize("method", ["florist", "flexlora"])
@pytest.mark.parametrize("m,n", [(60, 90), (90, 60)])
def test_counted_baselines_match_analytic_model(method, m, n):
    try:
        fn = get_method(method)
    except NotImplementedError as exc:
        pytest.skip(str(exc))
    Bs, As = lora_clients(m, n, [4, 4, 4], batch=(2,), seed=8)
    counted = count_flops(lambda: fn(Bs, As, rank=3)).total
    assert counted == pytest.approx(2 * analytic_flops(method, m, n, 12, 3), rel=1e-6)


# ------------------------------------------------------------------ the roofline benchmark's model


def test_eq12_flops_is_table5_plus_the_rank_terms():
    from benchmarks.roofline import eq12_flops
    from fraq.flops import fraq_table5

    d, D, r = 768, 3072, 80
    p = torch.tensor([3, 10, 22])
    assert eq12_flops(d, D, r, p) == pytest.approx(sum(fraq_table5(d, D, r, 0) + 2 * (d + D) * r * int(q) for q in p))
    assert eq12_flops(40, 60, 80, torch.tensor([5])) == pytest.approx((2 * 40 + 3 * 60) * 80 * 40 + 2 * 100 * 40 * 5)


def test_roofline_compare_refuses_a_bad_configuration_before_any_work(capsys):
    """--compare takes FRAQ methods in the front doors' grammar, with recompress's options but tau and
    rank (the run fixes tau): anything else is refused before any work, naming the text; the
    BACKEND:GRAM shorthand is refused with the method to write instead."""
    from benchmarks.roofline import compare_specs, main

    for bad in ("nope:auto", "householder:syrk", "householder", "florist", "fraq:tau=0.5", "fraq:backend=nope",
                "fraq:gram=syrk", "fraq:backend=cholesky,rank=4"):
        with pytest.raises(SystemExit) as exc:
            main(["--compare", bad, "--presets", "roberta-base"])
        assert exc.value.code == 2
        assert repr(bad) in capsys.readouterr().err, bad
    main_err = pytest.raises(SystemExit, main, ["--compare", "cholesky:product"])
    assert main_err.value.code == 2 and "'fraq:backend=cholesky,gram=product'" in capsys.readouterr().err
    specs = compare_specs(["fraq:backend=cholesky,gram=product", "fraq"])
    assert [str(s) for s in specs] == ["fraq:backend=cholesky,gram=product", "fraq"]
    assert specs[0].kwargs == {"backend": "cholesky", "gram": "product"} and specs[1].kwargs == {}


# ------------------------------------------------------------------ the machine record and the device


def test_machine_record_names_the_device_and_gpu_fields():
    from fraq._machine import machine_record

    rec = machine_record("cpu")
    assert rec["device"] == "cpu" and rec["threads"] == torch.get_num_threads()
    for key in ("gpu", "gpu_driver", "cuda", "cusolver", "cpu", "cores", "blas", "torch", "git_sha"):
        assert key in rec, key
    assert rec["gpu"] is None and rec["gpu_driver"] is None and rec["cusolver"] is None
    assert rec["cuda"] == torch.version.cuda


def test_the_git_sha_is_asked_once_per_process(monkeypatch):
    """A run records the commit it started from: HEAD moving during the run (commits made
    beside it) does not change the sha later records carry."""
    import subprocess

    import fraq._machine as machine

    heads = iter(["a" * 40, "b" * 40])
    asked = []

    def run(*args, **kwargs):
        asked.append(args)
        return subprocess.CompletedProcess(args, 0, stdout=next(heads) + "\n")

    monkeypatch.setattr(machine.subprocess, "run", run)
    machine._git_sha.cache_clear()
    try:
        assert machine._git_sha() == "a" * 40 and machine._git_sha() == "a" * 40
        assert len(asked) == 1
    finally:
        machine._git_sha.cache_clear()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the record's GPU fields are read from it")
def test_machine_record_on_cuda():
    from fraq._machine import machine_record

    rec = machine_record("cuda")
    assert rec["gpu"] == torch.cuda.get_device_name(0) and rec["device"] == "cuda"
    assert rec["cusolver"] is None or rec["cusolver"] > 10000


def test_unavailable_device_reasons():
    from benchmarks.device import unavailable

    assert unavailable(torch.device("cpu")) is None
    if not torch.cuda.is_available():
        reason = unavailable(torch.device("cuda:0"))
        assert reason.startswith("device cuda:0 requested but")
    else:
        past = torch.device(f"cuda:{torch.cuda.device_count()}")
        assert "visible" in unavailable(past)


def test_timed_records_device_and_threads():
    t = timed(lambda: torch.ones(10).sum(), repeats=3, warmup=1)
    assert t.device == "cpu" and t.threads == torch.get_num_threads() and len(t.samples) == 3
    assert t.q25 <= t.median <= t.q75


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: CUDA events and the allocator's counters")
def test_cuda_timing_and_peak_memory():
    a = torch.randn(512, 512, device="cuda")
    t = timed(lambda: a @ a, repeats=3, warmup=1, device="cuda")
    assert t.device == "cuda" and all(s > 0 for s in t.samples)
    assert peak_memory(lambda: a @ a, device="cuda").peak >= 512 * 512 * 4


def test_peak_memory_keeps_the_profilers_lines_off_the_terminal(capfd):
    """torch's profiler prints "USDT ... profiler_start/stop" to fd 2 on every start and stop."""
    peak_memory(lambda: torch.ones(100))
    out, err = capfd.readouterr()
    assert "USDT" not in err and "profiler_st" not in err and "USDT" not in out
    import sys

    print("still reaches stderr", file=sys.stderr)
    assert "still reaches stderr" in capfd.readouterr().err


def test_traits_take_nested_from_the_aggregators_class(monkeypatch):
    """A method says what it is on its class: the suites' traits read ``nested`` from it
    (FlexLoRA's truncated SVD), and keep their own limits (``max_d``, ``slow``)."""
    from benchmarks.measure.methods import traits
    from fraq.aggregators import AGGREGATORS

    assert traits("flexlora").nested is True and traits("flexlora").slow and traits("flexlora").max_d
    assert traits("fraq").nested is False and traits("qr-svd").nested is False
    monkeypatch.setattr(AGGREGATORS["florist"], "nested", True)
    assert traits("florist").nested is True and traits("florist:tau=0.9").nested is True


def test_machine_record_carries_the_cpu_clock(tmp_path):
    """The record's ``cpu_mhz``: the cores' mean ``cpu MHz`` (one decimal) where the kernel gives
    it, None where it gives none or the file cannot be read; a float here or None, never a guess."""
    from fraq._machine import _cpu_mhz, machine_record

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu MHz\t\t: 2000.00\n\nprocessor\t: 1\ncpu MHz\t\t: 3000.25\n")
    assert _cpu_mhz(str(info)) == 2500.1
    info.write_text("processor\t: 0\nmodel name\t: a CPU without a clock line\n")
    assert _cpu_mhz(str(info)) is None
    assert _cpu_mhz(str(tmp_path / "absent")) is None
    mhz = machine_record("cpu")["cpu_mhz"]
    assert mhz is None or (isinstance(mhz, float) and mhz > 0)
