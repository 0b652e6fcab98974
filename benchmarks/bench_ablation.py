"""The paper's Table 4 ablation: adaptive vs fixed orientation, Gram vs coordinate SVD.

LLaMA-3.2-3B gate/up projections (8192 x 3072), 8 clients of rank 8, output rank 8, one
batched call per variant (:mod:`benchmarks.experiments.table4`, size
:data:`benchmarks.sizes.ASV`); ``library`` is :func:`fraq.recompress` itself on the same
stacks. ``time_run`` times the variant; the error and memory tracks are the experiment's
:func:`~benchmarks.experiments.table4.metrics`, which the runner records too.
"""

from __future__ import annotations

from benchmarks._suite import _Measured, cached, prepare, skip
from benchmarks.cases import check_threads
from benchmarks.device import DeviceUnavailable, checked
from benchmarks.experiments import table4
from benchmarks.sizes import ASV

POINTS = {c["variant"]: c for c in table4.points(ASV)}


class Table4(_Measured):
    """Each variant on the gate/up projections.

    The error columns need float64 references of large modules; they are computed once
    per run in ``setup_cache`` for every variant, and the ``track_`` methods read them.
    """

    params = [list(POINTS)]
    param_names = ["variant"]
    timeout = 600.0
    repeat = (3, 10, 30.0)
    rounds = 1

    def setup_cache(self):
        check_threads()
        try:
            device = checked()
        except DeviceUnavailable as exc:  # setup skips every variant with the reason
            return str(exc)
        out = {}
        for name, config in POINTS.items():
            m = table4.metrics(config, device)
            out[(name,)] = {"gap_to_svd": sum(m["gap_to_svd"]) / len(m["gap_to_svd"]),
                            "excess_quadrature": sum(m["excess_quadrature"]) / len(m["excess_quadrature"]),
                            "peak": m["peak_bytes"]}
        return out

    def setup(self, cache, variant):
        if isinstance(cache, str):
            skip(cache)
        self.device = prepare()
        self.call = table4.call(POINTS[variant], self.device)

    track_gap_to_svd = cached("gap_to_svd", "relative", "Mean over modules of ||P - P_svd||_F / ||P_svd||_F, "
                              "P_svd the coordinate-SVD product (the paper's Table 4 error column).")
    track_excess = cached("excess_quadrature", "relative", "Mean error beyond the float64 Eckart-Young optimum at "
                          "rank p, in quadrature (benchmarks.measure.fidelity.Fidelity.excess_quadrature).")
