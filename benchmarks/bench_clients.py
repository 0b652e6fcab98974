"""Server-side recompression along the number of clients K: Fig. 3's third axis.

``ClientsSweep``: FRAQ (and the exact backends the size lists), FLoRIST and FlexLoRA
(the dense path) aggregate K clients of rank 8 on one shape, cutting by the energy rule,
at the points of :func:`benchmarks.experiments.clients.points` (size
:data:`benchmarks.sizes.ASV`): the stacked rank r = 8K from well below the smaller side d
to past it. Every point has its latency (``time_run``), and its tensor peak memory,
counted and analytic FLOPs, the float32 result's error above the float64 optimum and the
float64 energy its rank keeps, all from :mod:`benchmarks.experiments.clients` (the
runner's ``clients`` calls the same functions), measured once per run in ``setup_cache``.
The device is ``FRAQ_BENCH_DEVICE``'s.
"""

from __future__ import annotations


from benchmarks._suite import _Measured, cached, measure_points, prepare, skip
from benchmarks.experiments import clients, with_registered
from benchmarks.sizes import ASV, size_config

_C = size_config(ASV, "clients")
SWEEP_METHODS = with_registered(_C["methods"])
"""The method names the clients sweep compares, the asv ``method`` parameter: the size's, with
the kernel variants and the methods registered from outside the package, as the runner's points
(:func:`benchmarks.experiments.with_registered`)."""
SHAPES = [f"{m}x{n}" for m, n, *_ in _C["shapes"]]
KS = sorted({k for _, _, ks, *_ in _C["shapes"] for k in ks})


def point_config(method: str, shape: str, K: int) -> dict:
    """The :func:`benchmarks.experiments.clients.points` config of one asv parameter
    combination, or asv's skip when the size does not measure K clients on that shape."""
    for c in clients.points(ASV):
        if (c["method"], f"{c['d']}x{c['D']}", c["K"]) == (method, shape, K):
            return c
    skip(f"the {ASV} clients sweep does not measure {K} clients on {shape}")


class ClientsSweep(_Measured):
    """Latency, memory, FLOPs and fidelity against the number of clients K, per shape."""

    params = [SWEEP_METHODS, SHAPES, KS]
    param_names = ["method", "shape", "clients"]
    timeout = 600.0

    def setup_cache(self):
        """Every point's metrics, or the reason it is skipped (a string)."""
        return measure_points(self.params, lambda *combo: clients.metrics(point_config(*combo[:-1]), combo[-1]))

    def setup(self, cache, method, shape, K):
        if isinstance(cache.get((method, shape, K)), str):
            skip(cache[(method, shape, K)])
        self.device = prepare()
        self.call = clients.call(point_config(method, shape, K), self.device)

    track_peakmem = cached("peak_bytes", "bytes", "Tensor peak memory above the inputs of one call.")
    track_flops = cached("counted_flops", "flop", "Counted FLOPs (LAPACK included) of the call.")
    track_flops_model = cached("analytic_flops_full", "flop", "The pipeline the code runs, analytically "
                               "(fraq.aggregators.analytic_flops(model='full')); NaN without a model.")
    track_excess = cached("excess_quadrature", "relative", "Mean error of the float32 result above the float64 "
                          "Eckart-Young optimum at its own rank, in quadrature (Fidelity.excess_quadrature).")
    track_energy_kept = cached("energy_kept_min", "fraction", "The float64 energy fraction the chosen rank keeps "
                               "(at least tau when the float32 energy rule agrees with float64's).")
