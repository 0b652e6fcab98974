"""Server-side recompression of one batch of modules: the paper's Fig. 3 sweeps.

``Sweep``: FRAQ, FLoRIST and FlexLoRA aggregate the same clients' factors (stacking
included) for ``SWEEP_MODULES`` square modules to a rank-``SWEEP_P`` adapter, in one
batched call (``batched``) or one module at a time (``unbatched``, the paper's dashed
curves), along the total rank r (``sweep="r"``, Fig. 3a) or the hidden size d
(``sweep="d"``, Fig. 3b). ``Backends``: every registered FRAQ backend on the same
stacks, batched, at points of both sweeps. ``FlopModel``: the analytic FLOPs at the same
points, the paper's Table 5 and the same pipelines with the code's constants. Cases come
from :mod:`benchmarks.cases`; the device from ``FRAQ_BENCH_DEVICE``.
"""

from __future__ import annotations

import math

from benchmarks._suite import _Measured, prepare, skip
from benchmarks.cases import (
    BACKEND_POINTS,
    FLEXLORA_MAX_D,
    SWEEP_DIMS,
    SWEEP_MODULES,
    SWEEP_P,
    SWEEP_RANKS,
    clients,
    stacks,
    sweep_point,
    sweep_ranks,
)
from benchmarks.device import to_device
from benchmarks.measure.methods import BASELINES, clients_as_batch, default_backend, default_factored, get_method, ran_factored

METHODS = ["fraq", *BASELINES]
MODES = ["batched", "unbatched"]
SWEEPS = {"r": SWEEP_RANKS, "d": SWEEP_DIMS}
VALUES = sorted(set(SWEEP_RANKS) | set(SWEEP_DIMS))


def _backends() -> list[str]:
    import fraq

    return sorted(fraq.BACKENDS)


def _point(sweep: str, value: int) -> tuple[int, int]:
    if value not in SWEEPS[sweep]:
        skip(f"{value} is not a point of the {sweep} sweep ({SWEEPS[sweep]})")
    return sweep_point(sweep, value)


class Sweep(_Measured):
    """Fig. 3: time, tensor peak memory and counted FLOPs against r (at d = 768) or d (at r = 80)."""

    params = [METHODS, list(SWEEPS), VALUES, MODES]
    param_names = ["method", "sweep", "value", "mode"]
    timeout = 300.0

    def setup(self, method, sweep, value, mode):
        self.device = prepare()
        d, r = _point(sweep, value)
        if method == "flexlora" and d > FLEXLORA_MAX_D:
            skip(f"flexlora at d={d}: dense d x d SVDs, O(d^3) each, too slow above d={FLEXLORA_MAX_D}")
        fn = get_method(method)
        Bs, As = to_device(clients(d, d, sweep_ranks(r), SWEEP_MODULES), self.device)
        p = min(SWEEP_P, r, d)
        if mode == "batched":
            Bl, Al = list(Bs), list(As)
            self.call = lambda: fn(Bl, Al, rank=p)
        else:
            per = [clients_as_batch(Bs, As, i) for i in range(SWEEP_MODULES)]
            self.call = lambda: [fn(b, a, rank=p) for b, a in per]
        if method == "flexlora":
            self.repeat = (1, 3, 30.0)


class FlopModel:
    """The analytic FLOPs of the sweeps' points (no data, no run): ``table5`` is the paper's
    leading-order formula; ``full`` the code's pipeline with the backend ``fraq`` runs on the
    suite's device, which ``Sweep.track_flops`` should equal for FRAQ up to the r^3 terms."""

    params = [METHODS, list(SWEEPS), VALUES]
    param_names = ["method", "sweep", "value"]

    def setup(self, method, sweep, value):
        self.device = prepare()
        self.d, self.r = _point(sweep, value)
        self.p = min(SWEEP_P, self.r, self.d)

    def track_table5(self, method, sweep, value):
        from fraq.flops import analytic_flops

        return SWEEP_MODULES * analytic_flops(method, self.d, self.d, self.r, self.p, model="table5")

    track_table5.unit = "flop"

    def track_full(self, method, sweep, value):
        from fraq.flops import analytic_flops

        backend = default_backend(self.device)
        factored = method == "fraq" and default_factored()
        return SWEEP_MODULES * analytic_flops(method, self.d, self.d, self.r, self.p, backend=backend, model="full",
                                              factored=factored)

    track_full.unit = "flop"


class Backends(_Measured):
    """Every registered FRAQ backend at points of both sweeps (batched, recompression only)."""

    params = [_backends(), BACKEND_POINTS]
    param_names = ["backend", "point"]
    timeout = 300.0

    def setup(self, backend, point):
        import fraq

        self.device = prepare()
        if backend not in fraq.BACKENDS:
            skip(f"backend {backend!r} is not registered in this fraq")
        d, r = (int(x[1:]) for x in point.split("-"))
        B, A = to_device(stacks(d, d, sweep_ranks(r), SWEEP_MODULES), self.device)
        self.backend, self.d, self.r, self.p = backend, d, r, min(SWEEP_P, r, d)
        self.call = lambda: fraq.recompress(B, A, rank=self.p, backend=backend)

    def track_flops_model(self, backend, point):
        """Analytic FLOPs (:func:`fraq.flops.fraq_flops`, Newton-Schulz at its measured steps);
        NaN for a backend registered without a FLOP model."""
        from fraq.flops import analytic_flops

        res = self.call()
        steps = res.info.get("steps")
        try:
            f = analytic_flops("fraq", self.d, self.d, self.r, self.p, backend=self.backend, steps=steps,
                               factored=ran_factored(res))
        except ValueError:
            return math.nan
        return SWEEP_MODULES * f

    track_flops_model.unit = "flop"
