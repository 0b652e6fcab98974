"""Server-side recompression of one batch of modules: the paper's Fig. 3 sweeps.

``RankSweep`` / ``HiddenSweep``: FRAQ, FLoRIST and FlexLoRA aggregate the same clients'
factors (stacking included) for ``SWEEP_MODULES`` square modules to a rank-``SWEEP_P``
adapter, in one batched call (``batched``) or one module at a time (``unbatched``, the
paper's dashed curves). ``Backends``: every registered FRAQ backend on the same stacks,
batched, at points of both sweeps. The fine sweeps behind the fitted exponents are
``python -m benchmarks.report scaling``. Time, tensor peak memory, counted FLOPs, and
and (``FlopModel``) the analytic model at the same points: the paper's Table 5 and the
same pipelines with the code's constants and lower-order terms.
"""

from __future__ import annotations

import math

from benchmarks.common import (
    FLEXLORA_MAX_D,
    BACKEND_POINTS,
    SWEEP_D,
    SWEEP_DIMS,
    SWEEP_MODULES,
    SWEEP_P,
    SWEEP_R,
    SWEEP_RANKS,
    check_threads,
    clients,
    skip,
    stacks,
    sweep_ranks,
)
from fraq.flops import analytic_flops
from fraq.measure.flops import count_flops
from fraq.measure.memory import peak_memory
from fraq.measure.methods import BASELINES, clients_as_batch, get_method

METHODS = ["fraq", *BASELINES]
MODES = ["batched", "unbatched"]


def _backends() -> list[str]:
    import fraq

    return sorted(fraq.BACKENDS)


class _Methods:
    """Shared body of the method sweeps; subclasses fix which of d and r varies."""

    timeout = 300.0

    def _prepare(self, method: str, d: int, r: int, mode: str) -> None:
        check_threads()
        if method == "flexlora" and d > FLEXLORA_MAX_D:
            skip(f"flexlora at d={d}: dense d x d SVDs, O(d^3) each, too slow above d={FLEXLORA_MAX_D}")
        fn = get_method(method)
        Bs, As = clients(d, d, sweep_ranks(r), SWEEP_MODULES)
        p = min(SWEEP_P, r, d)
        self.method, self.d, self.r, self.p = method, d, r, p
        if mode == "batched":
            Bl, Al = list(Bs), list(As)
            self.call = lambda: fn(Bl, Al, rank=p)
        else:
            per = [clients_as_batch(Bs, As, i) for i in range(SWEEP_MODULES)]
            self.call = lambda: [fn(b, a, rank=p) for b, a in per]
        if method == "flexlora":
            self.repeat = (1, 3, 30.0)


class RankSweep(_Methods):
    """Fig. 3a: total stacked rank r at d = D = 768."""

    params = [METHODS, SWEEP_RANKS, MODES]
    param_names = ["method", "r", "mode"]

    def setup(self, method, r, mode):
        self._prepare(method, SWEEP_D, r, mode)

    def time_aggregate(self, method, r, mode):
        self.call()

    def track_peakmem(self, method, r, mode):
        return peak_memory(self.call).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, method, r, mode):
        return count_flops(self.call).total

    track_flops.unit = "flop"



class HiddenSweep(_Methods):
    """Fig. 3b: hidden size d (= D) at stacked rank r = 80."""

    params = [METHODS, SWEEP_DIMS, MODES]
    param_names = ["method", "d", "mode"]

    def setup(self, method, d, mode):
        self._prepare(method, d, SWEEP_R, mode)

    def time_aggregate(self, method, d, mode):
        self.call()

    def track_peakmem(self, method, d, mode):
        return peak_memory(self.call).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, method, d, mode):
        return count_flops(self.call).total

    track_flops.unit = "flop"



class FlopModel:
    """The analytic FLOPs of the method sweeps' points (no data, no run).

    ``table5``: the paper's Table 5 leading-order formula; ``full``: the same pipeline
    with the constants of what the code runs and the lower-order terms, which the
    sweeps' counted ``track_flops`` should equal for FRAQ.
    """

    params = [METHODS, ["r", "d"], sorted(set(SWEEP_RANKS) | set(SWEEP_DIMS))]
    param_names = ["method", "sweep", "value"]

    def setup(self, method, sweep, value):
        if sweep == "r" and value not in SWEEP_RANKS or sweep == "d" and value not in SWEEP_DIMS:
            skip(f"{value} is not a point of the {sweep} sweep")
        self.d, self.r = (SWEEP_D, value) if sweep == "r" else (value, SWEEP_R)
        self.p = min(SWEEP_P, self.r, self.d)

    def track_table5(self, method, sweep, value):
        return SWEEP_MODULES * analytic_flops(method, self.d, self.d, self.r, self.p, model="table5")

    track_table5.unit = "flop"

    def track_full(self, method, sweep, value):
        return SWEEP_MODULES * analytic_flops(method, self.d, self.d, self.r, self.p, model="full")

    track_full.unit = "flop"


class _Backends:
    """Shared body of the backend sweeps: fraq.recompress(backend=...) on the same stacks."""

    timeout = 300.0

    def _prepare(self, backend: str, d: int, r: int) -> None:
        check_threads()
        import fraq

        if backend not in fraq.BACKENDS:
            skip(f"backend {backend!r} is not registered at this commit")
        B, A = stacks(d, d, sweep_ranks(r), SWEEP_MODULES)
        p = min(SWEEP_P, r, d)
        self.backend, self.d, self.r, self.p = backend, d, r, p
        self.call = lambda: fraq.recompress(B, A, rank=p, backend=backend)

    def _model(self) -> float:
        steps = self.call().info.get("steps")
        try:
            f = analytic_flops("fraq", self.d, self.d, self.r, self.p, backend=self.backend, steps=steps)
        except (NotImplementedError, ValueError):
            return math.nan
        return SWEEP_MODULES * f


class Backends(_Backends):
    """Every registered FRAQ backend at points of both sweeps (batched)."""

    params = [_backends(), BACKEND_POINTS]
    param_names = ["backend", "point"]

    def setup(self, backend, point):
        d, r = (int(x[1:]) for x in point.split("-"))
        self._prepare(backend, d, r)

    def time_recompress(self, backend, point):
        self.call()

    def track_peakmem(self, backend, point):
        return peak_memory(self.call).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, backend, point):
        return count_flops(self.call).total

    track_flops.unit = "flop"

    def track_flops_model(self, backend, point):
        return self._model()

    track_flops_model.unit = "flop"
