"""The paper's Table 4 ablation: adaptive vs fixed orientation, Gram vs coordinate SVD.

56 LLaMA-3.2-3B gate and up projections (8192 x 3072), 8 clients of rank 8 (r = 64),
output rank 8, one batched call (:func:`benchmarks.cases.table4_stacks`). Variants from
:mod:`benchmarks.measure.ablation`; ``library`` is :func:`fraq.recompress` itself on the
same stacks. Paper (GH200): adaptive+Gram 14.21 ms / 90.13 MiB, fixed+Gram 25.98 ms,
adaptive+coordinate SVD 62.26 ms / 199.02 MiB. ``python -m benchmarks.report ablation``
prints our ratios beside the paper's.
"""

from __future__ import annotations

from benchmarks._suite import _Measured, cached, prepare, skip
from benchmarks.cases import TABLE4, check_threads, table4_stacks
from benchmarks.device import DeviceUnavailable, checked, to_device
from benchmarks.measure.ablation import VARIANT_NAMES, variant_calls

P = TABLE4["p"]


class Table4(_Measured):
    """Each variant on the 56 gate/up projections.

    The error columns need float64 references of 56 large modules; they are computed
    once per run in ``setup_cache`` for every variant, and the ``track_`` methods read them.
    """

    params = [VARIANT_NAMES]
    param_names = ["variant"]
    timeout = 600.0
    repeat = (3, 10, 30.0)
    rounds = 1

    def setup_cache(self):
        from benchmarks.measure.fidelity import fidelity
        from fraq.reference import reference_svd, relative_error

        check_threads()
        try:
            device = checked()
        except DeviceUnavailable as exc:  # setup skips every variant with the reason
            return str(exc)
        B, A = table4_stacks()
        S = reference_svd(B, A)[1]
        calls = variant_calls(*to_device((B, A), device), P)
        Bs, As = (t.cpu() for t in calls["adaptive-svd"]())
        out = {}
        for name in VARIANT_NAMES:
            Bg, Ag = (t.cpu() for t in calls[name]())
            f = fidelity(B, A, Bg, Ag, P, singular_values=S)
            out[(name,)] = {"gap_to_svd": float(relative_error(Bs, As, Bg, Ag).mean()),
                            "excess_quadrature": float(f.excess_quadrature.mean())}
        return out

    def setup(self, cache, variant):
        if isinstance(cache, str):
            skip(cache)
        self.device = prepare()
        self.call = variant_calls(*to_device(table4_stacks(), self.device), P)[variant]

    track_gap_to_svd = cached("gap_to_svd", "relative", "Mean over modules of ||P - P_svd||_F / ||P_svd||_F, "
                              "P_svd the coordinate-SVD product (the paper's Table 4 error column).")
    track_excess = cached("excess_quadrature", "relative", "Mean error beyond the float64 Eckart-Young optimum at "
                          "rank 8, in quadrature (benchmarks.measure.fidelity.Fidelity.excess_quadrature).")
