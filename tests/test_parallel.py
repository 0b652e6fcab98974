"""fraq._parallel.batch_map: one-thread LAPACK calls spread over torch's threads.

The reference of every result is the unsplit call made at ONE torch thread: that is what
each chunk computes, so the results must agree (to rounding: see ``_assert_identical``)
and in memory layout, which the next LAPACK call depends on to avoid a copy. Timings
live in the benchmarks.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import torch

from fraq import _parallel
from fraq._parallel import batch_map, fanout_available

F32, F64 = torch.float32, torch.float64


@contextlib.contextmanager
def torch_threads(n: int):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _spd(b: int, n: int, g: torch.Generator, dtype=F64) -> torch.Tensor:
    X = torch.randn(b, 3 * n, n, generator=g, dtype=dtype)
    return X.mT @ X + n * torch.eye(n, dtype=dtype)


def _col(b: int, rows: int, cols: int, g: torch.Generator, dtype=F32) -> torch.Tensor:
    return torch.randn(b, cols, rows, generator=g, dtype=dtype).mT  # column-major, as fraq.stack lays out B


def _ormqr_args(b, g):
    X = _col(b, 13, 5, g)
    V, tau = torch.geqrf(X)
    return V, tau, _col(b, 13, 3, g)


def _solve(R, X):
    return torch.linalg.solve_triangular(R, X, upper=True, left=False)


def _svd(X):
    return torch.linalg.svd(X, full_matrices=False)


# (name, fn, args(b, generator)): every LAPACK step the core and the baselines fan out.
# Odd sizes (13 x 5, 7 x 7) give matrices whose byte offsets are not multiples of a
# cache line, so a slice starts at a different alignment than inside the whole batch.
OPS = [
    ("geqrf", torch.geqrf, lambda b, g: (_col(b, 13, 5, g),)),
    ("eigh", torch.linalg.eigh, lambda b, g: (_spd(b, 7, g),)),
    ("ormqr", torch.ormqr, _ormqr_args),
    ("cholesky_ex", torch.linalg.cholesky_ex, lambda b, g: (_spd(b, 7, g),)),
    ("solve_triangular", _solve, lambda b, g: (torch.linalg.cholesky(_spd(b, 5, g, F32)).mT, _col(b, 13, 5, g))),
    ("svd", _svd, lambda b, g: (_col(b, 13, 5, g),)),
]


@pytest.fixture
def eager(monkeypatch):
    """Fan out whatever the batch's cost: the test problems are far below the threshold."""
    monkeypatch.setattr(_parallel, "_FANOUT_SECONDS", 0.0)


def _outputs(r) -> tuple[torch.Tensor, ...]:
    return tuple(r) if isinstance(r, tuple) else (r,)


def _assert_identical(got, ref):
    """Same types, shapes, dtypes and memory layout; the same values to rounding.

    Bit for bit on the CPUs the module was first measured on, but not everywhere: on an
    AMD EPYC (Zen 5, MKL's AVX-512 paths) syevd, gesdd and ormqr give results that
    differ in the last bits between a call at one process-wide thread and a call on one
    thread while the process allows more (MKL picks blocking from its global count). The
    bound is a few ulps of the largest entry per row of the matrix, far below any
    accuracy the core relies on.
    """
    assert type(got) is type(ref)
    for x, y in zip(_outputs(got), _outputs(ref), strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert x.stride() == y.stride()
        if x.is_floating_point() and x.numel():
            size = max(x.shape[-2:]) if x.dim() >= 2 else x.shape[-1]
            atol = 16 * size * torch.finfo(x.dtype).eps * float(y.abs().max().clamp(min=1))
            torch.testing.assert_close(x, y, rtol=0, atol=atol)
        else:
            assert torch.equal(x, y)


def _mkl_get():
    return _parallel._symbol("MKL_Get_Max_Threads", _parallel._MKL_LIBS)


def _settings() -> tuple[int, int, int, int]:
    """This thread's torch count, OpenMP ICV, MKL max threads and MKL local count."""
    mkl_local, _, omp_get = _parallel._thread_controls()
    torch.get_num_threads()  # torch's per-thread init (any torch op does it) before reading
    local = mkl_local(0)  # reading the local count means setting it; put it straight back
    mkl_local(local)
    return torch.get_num_threads(), omp_get(), _mkl_get()(), local


def test_fanout_available_with_torch_mkl_openmp():
    """The pip wheel's MKL (inside libtorch_cpu) and libgomp are found, so fan-out is on."""
    expected = torch.backends.mkl.is_available() and torch.backends.openmp.is_available()
    assert fanout_available() == expected
    if expected:
        assert _mkl_get() is not None


needs_fanout = pytest.mark.skipif(not fanout_available(), reason="torch without MKL and OpenMP: calls run whole")


@needs_fanout
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("b", [0, 1, 2, 3, 5, 7])
@pytest.mark.parametrize("name,fn,make", OPS, ids=[o[0] for o in OPS])
def test_equals_the_unsplit_one_thread_call(eager, name, fn, make, b, threads):
    args = make(b, torch.Generator().manual_seed(b))
    with torch_threads(1):
        ref = fn(*args)
    with torch_threads(threads):
        got = batch_map(fn, *args)
    _assert_identical(got, ref)


@needs_fanout
@pytest.mark.parametrize("name,fn,make", OPS, ids=[o[0] for o in OPS])
def test_non_contiguous_inputs(eager, name, fn, make):
    """Inputs viewed with the batch dimension not outermost, and every other matrix."""
    args = make(10, torch.Generator().manual_seed(3))
    views = tuple(t.movedim(0, -1).contiguous().movedim(-1, 0)[::2] for t in args)
    assert not any(v.is_contiguous() for v in views if v.dim() == 3)
    with torch_threads(1):
        ref = fn(*views)
    with torch_threads(2):
        got = batch_map(fn, *views)
    _assert_identical(got, ref)
    for v, t in zip(views, args):
        assert torch.equal(v, t[::2])  # inputs untouched


@needs_fanout
def test_each_chunk_runs_on_one_thread_in_several_threads():
    """Inside fn: torch, OpenMP and MKL all at one thread; t threads (the caller too) at once.

    The caller's first chunk takes 20 ms, so the default threshold recruits helpers.
    Then every thread's next call waits at a barrier for t parties: it passes only if
    t threads really run chunks concurrently.
    """
    threads = 3
    barrier = threading.Barrier(threads, timeout=60)
    calls = threading.local()
    caller = threading.get_ident()
    seen = []
    lock = threading.Lock()
    mkl_get = _mkl_get()
    _, _, omp_get = _parallel._thread_controls()

    def probe(X):
        calls.n = getattr(calls, "n", 0) + 1
        if threading.get_ident() == caller and calls.n == 1:
            time.sleep(0.02)
        elif threading.get_ident() != caller and calls.n == 1 or threading.get_ident() == caller and calls.n == 2:
            barrier.wait()
        with lock:
            seen.append((threading.get_ident(), torch.get_num_threads(), omp_get(), mkl_get(), X.shape[0]))
        return torch.geqrf(X)

    X = _col(7, 13, 5, torch.Generator().manual_seed(0))
    with torch_threads(threads):
        before = _settings()
        got = batch_map(probe, X)
        assert _settings() == before
    with torch_threads(1):
        _assert_identical(got, torch.geqrf(X))
    assert sum(s[4] for s in seen) == 7
    assert all(s[1:4] == (1, 1, 1) for s in seen)
    assert len({s[0] for s in seen}) == threads
    assert caller in {s[0] for s in seen}


@needs_fanout
@pytest.mark.parametrize("shape", [(7, 13, 5), (1, 13, 5), (13, 5), (1, 700, 700)], ids=["batch", "one", "2-D", "large"])
def test_cheap_work_and_single_matrices_stay_on_the_caller_at_one_thread(shape, monkeypatch):
    """A batch too cheap to repay a hand-off, and one matrix of any size: caller only, one thread.

    The threshold is raised out of reach so that a chunk slowed by a loaded machine
    cannot make this batch look expensive.
    """
    monkeypatch.setattr(_parallel, "_FANOUT_SECONDS", 1e9)
    seen = []
    _, _, omp_get = _parallel._thread_controls()

    def probe(X):
        seen.append((threading.get_ident(), torch.get_num_threads(), omp_get(), _mkl_get()()))
        return torch.geqrf(X)

    X = torch.randn(*shape, generator=torch.Generator().manual_seed(7))
    with torch_threads(2):
        got = batch_map(probe, X)
    with torch_threads(1):
        _assert_identical(got, torch.geqrf(X))
    assert {s[0] for s in seen} == {threading.get_ident()}
    assert all(s[1:] == (1, 1, 1) for s in seen)


@needs_fanout
@pytest.mark.parametrize("threads", [1, 2])
def test_thread_settings_restored(threads):
    X = _col(6, 13, 5, torch.Generator().manual_seed(1))
    with torch_threads(threads):
        before = _settings()
        batch_map(torch.geqrf, X)
        assert _settings() == before
    assert _settings()[0] == torch.get_num_threads()


@needs_fanout
@pytest.mark.parametrize("bad_slice", [0, 1])  # first, last
def test_thread_settings_restored_after_an_exception(eager, bad_slice):
    """fn raising on the first or the last chunk: error raised, settings kept everywhere."""
    X = _col(4, 13, 5, torch.Generator().manual_seed(2))
    marker = X[3 * bad_slice, 0, 0].item()

    def fails(Y):
        if (Y[:, 0, 0] == marker).any():
            raise ValueError("slice with the marker")
        return torch.geqrf(Y)

    with torch_threads(2):
        before = _settings()
        with pytest.raises(ValueError, match="marker"):
            batch_map(fails, X)
        assert _settings() == before
        # No pool thread is left at one thread: each is back at the counts torch gave it
        # when it first ran (torch's count at that moment; torch never updates a thread).
        pool = _parallel._executor(1)
        _, _, omp_get = _parallel._thread_controls()
        mkl_get = _mkl_get()
        states = [pool.submit(lambda: (torch.get_num_threads(), omp_get(), mkl_get())).result() for _ in range(8)]
        assert all(t == omp == mkl > 1 for t, omp, mkl in states), states


@needs_fanout
def test_concurrent_callers(eager):
    """Several Python threads fanning out at once get their own results, settings intact."""
    g = torch.Generator().manual_seed(4)
    problems = [(torch.geqrf, (_col(5, 13, 5, g),)), (torch.linalg.eigh, (_spd(7, 7, g),)),
                (torch.ormqr, _ormqr_args(3, g)), (_svd, (_col(4, 13, 5, g),))] * 2
    with torch_threads(1):
        refs = [fn(*a) for fn, a in problems]
    errors, results = [], [None] * len(problems)

    def caller(i):
        try:
            fn, args = problems[i]
            before = _settings()
            for _ in range(5):
                results[i] = batch_map(fn, *args)
            assert _settings() == before
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    with torch_threads(2):
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(problems))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for got, ref in zip(results, refs):
        _assert_identical(got, ref)


@needs_fanout
def test_nested_call_runs_inline(eager):
    """batch_map inside a slice sees one thread and calls fn whole: no deadlock, same result."""
    X = _col(6, 13, 5, torch.Generator().manual_seed(5))
    with torch_threads(1):
        ref = torch.geqrf(X)
    with torch_threads(2):
        got = batch_map(lambda Y: batch_map(torch.geqrf, Y), X)
    _assert_identical(got, ref)


@needs_fanout
def test_map_chunks_runs_every_chunk_at_once_on_one_thread_each():
    """Two chunks at 2 threads run concurrently from the start (no first-chunk probe: a
    barrier inside fn passes only if both threads are in it), each at one thread, and the
    results come back in chunk order with the caller's settings restored."""
    barrier = threading.Barrier(2, timeout=60)
    _, _, omp_get = _parallel._thread_controls()
    seen = []

    def fn(X, idx):
        barrier.wait()
        seen.append((threading.get_ident(), torch.get_num_threads(), omp_get(), _mkl_get()()))
        return int(idx[0]), X.sum(dim=(-2, -1))

    X = torch.randn(6, 4, 3)
    with torch_threads(2):
        before = _settings()
        parts = _parallel.map_chunks(fn, [0, 2, 6], X, torch.arange(6))
        assert _settings() == before
    assert [p[0] for p in parts] == [0, 2]
    torch.testing.assert_close(torch.cat([p[1] for p in parts]), X.sum(dim=(-2, -1)))
    assert len({s[0] for s in seen}) == 2 and all(s[1:] == (1, 1, 1) for s in seen)


def test_map_chunks_in_order_on_the_caller_at_one_thread():
    X = torch.randn(5, 2, 2)
    with torch_threads(1):
        parts = _parallel.map_chunks(lambda t: (threading.get_ident(), t.shape[0]), [0, 1, 3, 5], X)
    assert parts == [(threading.get_ident(), 1), (threading.get_ident(), 2), (threading.get_ident(), 2)]


@needs_fanout
def test_map_chunks_raises_the_earliest_failing_chunk():
    def fn(X, idx):
        if int(idx[0]) >= 2:
            raise ValueError(f"chunk at {int(idx[0])}")
        return X

    with torch_threads(2), pytest.raises(ValueError, match="chunk at 2"):
        _parallel.map_chunks(fn, [0, 2, 4, 6], torch.randn(6, 2, 2), torch.arange(6))


@needs_fanout
def test_one_thread_block_then_settings_restored():
    _, _, omp_get = _parallel._thread_controls()
    with torch_threads(2):
        before = _settings()
        with _parallel.one_thread():
            assert torch.get_num_threads() == 1 and omp_get() == 1 and _mkl_get()() == 1
        assert _settings() == before


@needs_fanout
@pytest.mark.parametrize("work,team", [(_parallel.TEAM_WORK - 1, False), (_parallel.TEAM_WORK, True)])
def test_a_whole_batch_below_the_team_work_runs_on_one_thread(work, team):
    """over_chunks runs a batch that fits one chunk whole; below TEAM_WORK multiply-adds per
    matrix on one thread (its GEMMs too small to repay a thread team), from it on the
    caller's threads; the settings restored after either way."""
    seen = []
    _, _, omp_get = _parallel._thread_controls()

    def fn(X, offset):
        seen.append((torch.get_num_threads(), omp_get(), _mkl_get()()))
        return X

    X = torch.randn(2, 4, 4)
    with torch_threads(2):
        before = _settings()
        _parallel.over_chunks(fn, None, 64, X, item_work=work)
        assert _settings() == before
    assert seen == [(2, 2, seen[0][2])] if team else seen == [(1, 1, 1)]


@needs_fanout
@pytest.mark.parametrize("nb,m,n,r,team", [(2, 768, 768, 16, False), (4, 768, 768, 32, False),
                                           (1, 768, 3072, 64, True), (1, 3072, 3072, 64, True)])
def test_recompress_runs_a_small_whole_batch_on_one_thread(monkeypatch, nb, m, n, r, team):
    """fraq.recompress at two torch threads: a batch within one chunk whose matrices need
    fewer than TEAM_WORK multiply-adds ((m + n) r^2) runs its pipeline on one thread; a
    larger one keeps both threads for its GEMMs."""
    import fraq
    import fraq._recompress as rc

    assert ((m + n) * r * r >= _parallel.TEAM_WORK) == team
    seen, real = [], rc._pipeline

    def spy(*args):
        seen.append(torch.get_num_threads())
        return real(*args)

    monkeypatch.setattr(rc, "_pipeline", spy)
    g = torch.Generator().manual_seed(m + r)
    B, A = torch.randn(nb, m, r, generator=g), torch.randn(nb, r, n, generator=g)
    with torch_threads(2):
        fraq.recompress(B, A, tau=0.9)
        assert torch.get_num_threads() == 2
    assert seen == [2 if team else 1]


@needs_fanout
@pytest.mark.parametrize("method", ["florist", "florist:kernel=qr", "qr-svd", "rsvd"])
@pytest.mark.parametrize("nb,m,n,r,runs", [(2, 768, 768, 16, "one thread"), (1, 768, 3072, 64, "team"),
                                           (48, 768, 768, 16, "shared")])
def test_the_peers_get_fraqs_thread_rule(monkeypatch, method, nb, m, n, r, runs):
    """FLoRIST (both kernels) and the textbook baselines at two torch threads run a batch on
    one thread exactly where fraq.recompress runs it whole on one thread at the same shapes:
    within one chunk and below TEAM_WORK multiply-adds a matrix. A larger matrix keeps the
    thread team for both; a batch past the fan-out budget (48 matrices) is shared by the
    threads, FRAQ's chunk by chunk (each chunk's pipeline on one thread), the peers'
    through their batched LAPACK calls (both threads kept)."""
    import fraq
    import fraq._recompress as rc
    from benchmarks.measure import textbook
    from benchmarks.measure.methods import get_method
    from fraq.aggregators import florist

    seen = {"fraq": [], "peer": []}
    real_pipeline = rc._pipeline

    def fraq_spy(*args):
        seen["fraq"].append(torch.get_num_threads())
        return real_pipeline(*args)

    monkeypatch.setattr(rc, "_pipeline", fraq_spy)
    targets = {"florist": (florist, "florist_recompress"), "florist:kernel=qr": (florist, "florist_qr_recompress"),
               "qr-svd": (textbook, "_cut"), "rsvd": (textbook, "_cut")}
    module, name = targets[method]
    real = getattr(module, name)

    def peer_spy(*args, **kwargs):
        seen["peer"].append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, peer_spy)
    g = torch.Generator().manual_seed(m + r + nb)
    Bs = [torch.randn(nb, m, 8, generator=g) for _ in range(r // 8)]
    As = [torch.randn(nb, 8, n, generator=g) for _ in range(r // 8)]
    with torch_threads(2):
        get_method(method)(Bs, As, rank=4)
        fraq.recompress(*fraq.stack(Bs, As), rank=4)
        assert torch.get_num_threads() == 2
    assert seen["peer"] and set(seen["peer"]) == {1 if runs == "one thread" else 2}, seen
    assert seen["fraq"] == {"one thread": [1], "team": [2], "shared": [1] * len(seen["fraq"])}[runs], seen
    assert (len(seen["fraq"]) > 1) == (runs == "shared"), seen
