"""Quick benchmark checks: a change's effect on speed, memory, FLOPs and error in a minute.

Off in the default test run (``pytest -m "not slow" --benchmark-skip``). Run with

    pytest tests/bench/test_quick.py --benchmark-only

and compare against a saved baseline:

    pytest tests/bench/test_quick.py --benchmark-only --benchmark-save=before
    # ... change the code ...
    pytest tests/bench/test_quick.py --benchmark-only --benchmark-compare \\
        --benchmark-compare-fail=median:25%

Each benchmark records in ``extra_info`` (saved in the JSON): counted FLOPs, the
analytic model's FLOPs, tensor peak memory, mean relative error and its excess over the
float64 optimum (plain and in quadrature, see :mod:`benchmarks.measure.fidelity`), the
selected rank and the thread count. Inputs and measurements are
the asv suite's (:mod:`benchmarks.cases`, :mod:`benchmarks.measure`) at smaller sizes;
threads are ``FRAQ_BENCH_THREADS`` (default 1) and the device ``FRAQ_BENCH_DEVICE``
(default cpu; a missing GPU skips every check with the reason), as there.
"""

from __future__ import annotations

import sys

import pytest
import torch

import fraq
from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.measure import count_flops, fidelity, peak_memory
from benchmarks.measure.ablation import VARIANTS, variant_calls
from benchmarks.measure.methods import BASELINES, default_backend, default_factored, get_method
from benchmarks.measure.timing import threads
from fraq.flops import analytic_flops

THREADS = cases.THREADS
MODULES, D, CLIENTS, CLIENT_RANK, P = 12, 768, 10, 8, 8
FLEXLORA_D = 256  # FlexLoRA's dense SVDs: 12 at d = 768 take ~5 s, too slow for a quick check


@pytest.fixture(scope="module")
def device() -> torch.device:
    """``FRAQ_BENCH_DEVICE`` (default cpu), as every suite; a device this machine does not
    have skips every check with the reason, a malformed value fails with a ValueError."""
    from benchmarks.device import DeviceUnavailable, checked

    try:
        return checked()
    except DeviceUnavailable as exc:
        pytest.skip(str(exc))


def _backends() -> list[str]:
    return sorted(fraq.BACKENDS)


def _data(d: int, device):
    Bs, As = cases.clients(d, d, (CLIENT_RANK,) * CLIENTS, MODULES)
    B, A = fraq.stack(list(Bs), list(As))
    return to_device(list(Bs), device), to_device(list(As), device), B, A


@pytest.fixture(scope="module")
def roberta_like(device):
    return _data(D, device)


@pytest.fixture(scope="module")
def small(device):
    return _data(FLEXLORA_D, device)


def _synchronized(call, device):
    if device.type != "cuda":
        return call

    def run():
        out = call()
        torch.cuda.synchronize(device)
        return out

    return run


def _cpu(*ts):
    return tuple(t.cpu() if isinstance(t, torch.Tensor) else t for t in ts)


def _run(benchmark, call, *, B, A, method, d, r, device, rounds=7):
    """Time ``call`` with pytest-benchmark and record the other measurements."""
    with threads(THREADS):
        Bg, Ag, p = _cpu(*call())
        benchmark.pedantic(_synchronized(call, device), rounds=rounds, warmup_rounds=1)
        if benchmark.disabled:
            return
        f = fidelity(B, A, Bg, Ag, p)
        ranks = torch.as_tensor(p).double()
        name, _, backend = method.partition(":")
        try:
            ran = backend or default_backend(device)  # "fraq" runs recompress's default
            model = MODULES * analytic_flops(name, d, d, r, P, backend=ran, factored=name == "fraq" and default_factored())
        except (NotImplementedError, ValueError):
            model = float("nan")
        benchmark.extra_info.update(
            method=method, modules=MODULES, d=d, r=r, threads=torch.get_num_threads(), device=str(device),
            flops=count_flops(call).total, flops_model=model, peak_bytes=peak_memory(call, device=device).peak,
            relative_error=float(f.relative_error.mean()), excess=float(f.excess.mean()),
            excess_quadrature=float(f.excess_quadrature.mean()), rank_mean=float(ranks.mean()),
        )


@pytest.mark.parametrize("method", ["fraq", *BASELINES])
def test_aggregate(benchmark, method, roberta_like, small, device):
    """FRAQ and the baselines on 12 modules, 10 clients of rank 8 (stacking included)."""
    d = FLEXLORA_D if method == "flexlora" else D
    Bs, As, B, A = small if method == "flexlora" else roberta_like
    try:
        fn = get_method(method)
    except NotImplementedError as exc:
        pytest.skip(str(exc))
    _run(benchmark, lambda: fn(Bs, As, rank=P), B=B, A=A, method=method, d=d, r=CLIENTS * CLIENT_RANK,
         device=device, rounds=3 if method == "flexlora" else 7)


@pytest.mark.parametrize("backend", _backends())
def test_backend(benchmark, backend, roberta_like, device):
    """Every registered backend on the same stacks, recompression only."""
    _, _, B, A = roberta_like
    Bd, Ad = to_device((B, A), device)

    def call():
        res = fraq.recompress(Bd, Ad, rank=P, backend=backend)
        return res.B, res.A, res.rank

    _run(benchmark, call, B=B, A=A, method=f"fraq:{backend}", d=D, r=CLIENTS * CLIENT_RANK, device=device)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ablation(benchmark, variant, device):
    """Table 4's variants on 8 of its 56 gate/up projections (8192 x 3072, r = 64, p = 8)."""
    B, A = cases.table4_stacks(modules=8)
    variant_call = variant_calls(*to_device((B, A), device), P)[variant]

    def call():
        return (*variant_call(), P)

    with threads(THREADS):
        benchmark.pedantic(_synchronized(call, device), rounds=5, warmup_rounds=1)
        if benchmark.disabled:
            return
        Bg, Ag, _ = _cpu(*call())
        f = fidelity(B, A, Bg, Ag, P)
        benchmark.extra_info.update(
            variant=variant, modules=8, threads=torch.get_num_threads(), device=str(device),
            flops=count_flops(call).total, peak_bytes=peak_memory(call, device=device).peak,
            relative_error=float(f.relative_error.mean()), excess=float(f.excess.mean()),
            excess_quadrature=float(f.excess_quadrature.mean()), rank_mean=float(P),
        )


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "--benchmark-only", *sys.argv[1:]]))
