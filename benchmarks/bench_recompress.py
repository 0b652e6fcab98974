"""Server-side recompression of one batch of modules: the paper's Fig. 3 sweeps.

``RankSweep`` (Fig. 3a: total stacked rank r at the fixed d) and ``HiddenSweep`` (Fig.
3b: hidden size d at the fixed r): FRAQ, FLoRIST and FlexLoRA aggregate the same
clients' factors (stacking included) to a rank-p adapter, in one batched call or one
module at a time, at the points of :func:`benchmarks.experiments.fig3.points` (size
:data:`benchmarks.sizes.ASV`). Every point has its latency (``time_run``), tensor peak
memory, counted and analytic FLOPs, and the float32 result's error above the float64
optimum, all from :mod:`benchmarks.experiments.fig3` (the runner's ``fig3`` calls the
same functions). ``Backends``: every registered FRAQ backend on the same stacks, batched,
at the ends of both sweeps. The device is ``FRAQ_BENCH_DEVICE``'s.
"""

from __future__ import annotations

import math

from benchmarks._suite import _Measured, measure_points, prepare, skip
from benchmarks.experiments import fig3, with_registered
from benchmarks.sizes import ASV, size_config

_C = size_config(ASV, "fig3")
SWEEP_METHODS = with_registered(_C["methods"])
"""The method names Fig. 3's sweeps compare, the asv ``method`` parameter: the size's, with the
kernel variants and the methods registered from outside the package, as the runner's points
(:func:`benchmarks.experiments.with_registered`)."""
MODES = list(fig3.MODES)


def _backends() -> list[str]:
    import fraq

    return sorted(fraq.BACKENDS)


def sweep_config(sweep: str, method: str, value: int, mode: str) -> dict:
    """The :func:`benchmarks.experiments.fig3.points` config of one asv parameter combination,
    or asv's skip with the method's reason when the point is not measured."""
    d, r = (_C["d_fixed"], value) if sweep == "r" else (value, _C["r_fixed"])
    for c in fig3.points(ASV):
        if (c["sweep"], c["method"], c["d"], c["r"], c["mode"]) == (sweep, method, d, r, mode):
            return c
    from benchmarks.measure.methods import traits

    skip(traits(method).skip_reason(d) or f"{method} is not measured at d={d}, r={r}")


def _track(key: str, unit: str, doc: str):
    """A ``track_`` method returning ``metrics[key]`` of this point, as ``setup_cache`` measured it."""

    def track(self, cache, *params):
        return cache[params].get(key, math.nan)

    track.unit = unit
    track.__doc__ = doc
    return track


class _Sweep(_Measured):
    """One of the Fig. 3 sweeps: ``time_run`` (from :class:`_Measured`) at one point, and
    its peak memory, counted and analytic FLOPs and fidelity, measured for every point once
    per run in ``setup_cache`` (:func:`benchmarks.experiments.fig3.metrics`, what the runner
    records) rather than once per ``track_`` in a fresh process each."""

    sweep = ""
    timeout = 600.0

    def _measure_all(self) -> dict:
        """Every point's metrics, or the reason it is skipped (each subclass's ``setup_cache``:
        asv shares one ``setup_cache`` function's result between the classes using it)."""
        return measure_points(self.params, lambda *combo: fig3.metrics(sweep_config(self.sweep, *combo[:-1]),
                                                                         combo[-1]))

    def setup(self, cache, method, value, mode):
        if isinstance(cache.get((method, value, mode)), str):
            skip(cache[(method, value, mode)])
        self.device = prepare()
        self.config = sweep_config(self.sweep, method, value, mode)
        self.call = fig3.call(self.config, self.device)

    track_peakmem = _track("peak_bytes", "bytes", "Tensor peak memory above the inputs of one call.")
    track_flops = _track("counted_flops", "flop", "Counted FLOPs (LAPACK included) of the batched call; "
                         "NaN (not measured) for the unbatched mode.")
    track_flops_model = _track("analytic_flops_full", "flop", "The pipeline the code runs, analytically "
                               "(fraq.aggregators.analytic_flops(model='full')).")
    track_flops_table5 = _track("analytic_flops_table5", "flop", "The paper's Table 5 formula at this point.")
    track_excess = _track("excess_quadrature", "relative", "Mean error of the float32 result above the float64 "
                          "Eckart-Young optimum, in quadrature (Fidelity.excess_quadrature), over the modules.")
    track_relative_error = _track("relative_error", "relative", "Mean relative Frobenius error against the "
                                  "float64 aggregate.")


class RankSweep(_Sweep):
    """Fig. 3a: against the total stacked rank r, at d = D fixed."""

    sweep = "r"
    params = [SWEEP_METHODS, list(_C["ranks"]), MODES]
    param_names = ["method", "r", "mode"]

    def setup_cache(self):
        return self._measure_all()


class HiddenSweep(_Sweep):
    """Fig. 3b: against the hidden size d (square d x d modules), at r fixed."""

    sweep = "d"
    params = [SWEEP_METHODS, list(_C["dims"]), MODES]
    param_names = ["method", "d", "mode"]

    def setup_cache(self):
        return self._measure_all()


BACKEND_POINTS = [f"d{_C['d_fixed']}-r{_C['ranks'][0]}", f"d{_C['d_fixed']}-r{_C['r_fixed']}",
                  f"d{_C['d_fixed']}-r{_C['ranks'][-1]}", f"d{_C['dims'][-1]}-r{_C['r_fixed']}"]
"""(d, r) points where every backend runs: the rank sweep's ends and its r_fixed, and the
hidden sweep's largest d."""


class Backends(_Measured):
    """Every registered FRAQ backend at points of both sweeps (batched, recompression only)."""

    params = [_backends(), BACKEND_POINTS]
    param_names = ["backend", "point"]
    timeout = 300.0

    def setup(self, backend, point):
        import fraq
        from benchmarks import cases
        from benchmarks.device import to_device

        self.device = prepare()
        if backend not in fraq.BACKENDS:
            skip(f"backend {backend!r} is not registered in this fraq")
        d, r = (int(x[1:]) for x in point.split("-"))
        B, A = to_device(cases.stacks(d, d, cases.sweep_ranks(r, _C["client_rank"]), _C["modules"]), self.device)
        self.backend, self.d, self.r, self.p = backend, d, r, min(_C["p"], r, d)
        self.call = lambda: fraq.recompress(B, A, rank=self.p, backend=backend)

    def track_flops_model(self, backend, point):
        """Analytic FLOPs (:func:`fraq.flops.fraq_flops`, Newton-Schulz at its measured steps);
        NaN for a backend registered without a FLOP model."""
        from benchmarks.measure.methods import ran_path
        from fraq.aggregators import analytic_flops

        res = self.call()
        steps = res.info.get("steps")
        try:
            f = analytic_flops("fraq", self.d, self.d, self.r, self.p, backend=self.backend, steps=steps,
                               **ran_path(res))
        except ValueError:
            return math.nan
        return _C["modules"] * f

    track_flops_model.unit = "flop"
