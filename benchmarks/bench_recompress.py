"""Server-side recompression of one batch of modules: the paper's Fig. 3 sweeps.

``RankSweep`` / ``HiddenSweep``: FRAQ, FLoRIST and FlexLoRA aggregate the same clients'
factors (stacking included) for ``SWEEP_MODULES`` square modules to a rank-``SWEEP_P``
adapter, in one batched call (``batched``) or one module at a time (``unbatched``, the
paper's dashed curves). ``BackendRankSweep`` / ``BackendHiddenSweep``: every registered
FRAQ backend on the same stacks, batched. Time, tensor peak memory, counted FLOPs, and
the analytic model: ``flops_model`` with the code's constants and lower-order terms,
``flops_table5`` the paper's Table 5 leading-order formula.
"""

from __future__ import annotations

import math

from benchmarks.common import (
    FLEXLORA_MAX_D,
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
from fraq.measure.flops import analytic_flops, count_flops
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

    def _model(self, model: str) -> float:
        return SWEEP_MODULES * analytic_flops(self.method, self.d, self.d, self.r, self.p, model=model)


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

    def track_flops_model(self, method, r, mode):
        return self._model("full")

    track_flops_model.unit = "flop"

    def track_flops_table5(self, method, r, mode):
        return self._model("table5")

    track_flops_table5.unit = "flop"


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

    def track_flops_model(self, method, d, mode):
        return self._model("full")

    track_flops_model.unit = "flop"

    def track_flops_table5(self, method, d, mode):
        return self._model("table5")

    track_flops_table5.unit = "flop"


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


class BackendRankSweep(_Backends):
    """Every FRAQ backend along Fig. 3a's rank sweep (batched)."""

    params = [_backends(), SWEEP_RANKS]
    param_names = ["backend", "r"]

    def setup(self, backend, r):
        self._prepare(backend, SWEEP_D, r)

    def time_recompress(self, backend, r):
        self.call()

    def track_peakmem(self, backend, r):
        return peak_memory(self.call).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, backend, r):
        return count_flops(self.call).total

    track_flops.unit = "flop"

    def track_flops_model(self, backend, r):
        return self._model()

    track_flops_model.unit = "flop"


class BackendHiddenSweep(_Backends):
    """Every FRAQ backend along Fig. 3b's hidden-size sweep (batched)."""

    params = [_backends(), SWEEP_DIMS]
    param_names = ["backend", "d"]

    def setup(self, backend, d):
        self._prepare(backend, d, SWEEP_R)

    def time_recompress(self, backend, d):
        self.call()

    def track_peakmem(self, backend, d):
        return peak_memory(self.call).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, backend, d):
        return count_flops(self.call).total

    track_flops.unit = "flop"

    def track_flops_model(self, backend, d):
        return self._model()

    track_flops_model.unit = "flop"
