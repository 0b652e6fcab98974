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
float64 optimum (plain and in quadrature, see :mod:`fraq.measure.fidelity`), the
selected rank and the thread count. Inputs and measurements are
the asv suite's (``benchmarks.common``, :mod:`fraq.measure`) at smaller sizes; threads
are ``FRAQ_BENCH_THREADS`` (default 1), as there.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

import fraq
from fraq.measure import count_flops, fidelity, peak_memory
from fraq.measure.ablation import VARIANTS, ablation_variant
from fraq.flops import analytic_flops
from fraq.measure.methods import BASELINES, get_method
from fraq.measure.timing import threads
from fraq.synthetic import lora_clients

THREADS = int(os.environ.get("FRAQ_BENCH_THREADS", "1"))
MODULES, D, CLIENTS, CLIENT_RANK, P = 12, 768, 10, 8, 8
FLEXLORA_D = 256  # FlexLoRA's dense SVDs: 12 at d = 768 take ~5 s, too slow for a quick check


def _backends() -> list[str]:
    return sorted(fraq.BACKENDS)


def _data(d: int):
    Bs, As = lora_clients(d, d, [CLIENT_RANK] * CLIENTS, batch=(MODULES,), seed=0)
    return Bs, As, *fraq.stack(Bs, As)


@pytest.fixture(scope="module")
def roberta_like():
    return _data(D)


@pytest.fixture(scope="module")
def small():
    return _data(FLEXLORA_D)


def _run(benchmark, call, *, B, A, method, d, r, rounds=7):
    """Time ``call`` with pytest-benchmark and record the other measurements."""
    with threads(THREADS):
        Bg, Ag, p = call()
        benchmark.pedantic(call, rounds=rounds, warmup_rounds=1)
        if benchmark.disabled:
            return
        f = fidelity(B, A, Bg, Ag, p)
        ranks = torch.as_tensor(p).double()
        name, _, backend = method.partition(":")
        try:
            model = MODULES * analytic_flops(name, d, d, r, P, backend=backend or "householder")
        except (NotImplementedError, ValueError):
            model = float("nan")
        benchmark.extra_info.update(
            method=method, modules=MODULES, d=d, r=r, threads=torch.get_num_threads(),
            flops=count_flops(call).total, flops_model=model, peak_bytes=peak_memory(call).peak,
            relative_error=float(f.relative_error.mean()), excess=float(f.excess.mean()),
            excess_quadrature=float(f.excess_quadrature.mean()), rank_mean=float(ranks.mean()),
        )


@pytest.mark.parametrize("method", ["fraq", *BASELINES])
def test_aggregate(benchmark, method, roberta_like, small):
    """FRAQ and the baselines on 12 modules, 10 clients of rank 8 (stacking included)."""
    d = FLEXLORA_D if method == "flexlora" else D
    Bs, As, B, A = small if method == "flexlora" else roberta_like
    try:
        fn = get_method(method)
    except NotImplementedError as exc:
        pytest.skip(str(exc))
    _run(benchmark, lambda: fn(Bs, As, rank=P), B=B, A=A, method=method, d=d, r=CLIENTS * CLIENT_RANK,
         rounds=3 if method == "flexlora" else 7)


@pytest.mark.parametrize("backend", _backends())
def test_backend(benchmark, backend, roberta_like):
    """Every registered backend on the same stacks, recompression only."""
    _, _, B, A = roberta_like

    def call():
        res = fraq.recompress(B, A, rank=P, backend=backend)
        return res.B, res.A, res.rank

    _run(benchmark, call, B=B, A=A, method=f"fraq:{backend}", d=D, r=CLIENTS * CLIENT_RANK)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ablation(benchmark, variant):
    """Table 4's variants on 8 of its 56 gate/up projections (8192 x 3072, r = 64, p = 8)."""
    Bs, As = lora_clients(8192, 3072, [8] * 8, batch=(8,), seed=0)
    B, A = fraq.stack(Bs, As)
    orientation, spectral = VARIANTS[variant]

    def call():
        Bg, Ag = ablation_variant(B, A, P, orientation=orientation, spectral=spectral)
        return Bg, Ag, P

    with threads(THREADS):
        benchmark.pedantic(call, rounds=5, warmup_rounds=1)
        if benchmark.disabled:
            return
        Bg, Ag, _ = call()
        f = fidelity(B, A, Bg, Ag, P)
        benchmark.extra_info.update(
            variant=variant, modules=8, threads=torch.get_num_threads(), flops=count_flops(call).total,
            peak_bytes=peak_memory(call).peak, relative_error=float(f.relative_error.mean()),
            excess=float(f.excess.mean()), excess_quadrature=float(f.excess_quadrature.mean()), rank_mean=float(P),
        )


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "--benchmark-only", *sys.argv[1:]]))
