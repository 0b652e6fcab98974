"""FRAQ's peak memory on the device against the paper's analytic workspace.

The paper bounds FRAQ's workspace beyond the stacked factors by the Householder
representation of X (d r), R (s r), H (s D) and the Gram G (s^2), s = min(d, r)
(its appendix, "O(s(d + D + r) + s^2)"); with the rank-p outputs ((d + D) p), which a
tensor peak counts, that is :func:`analytic_workspace`, one term per tensor, float32.
Each point is one FRAQ call in one batch of ``modules`` equal-shape stacks: the points
of Fig. 3's sweeps (:mod:`benchmarks.experiments.fig3`, batched) and Table 4's shape (as d x D).
The peak (:func:`benchmarks.measure.peak_memory`: on CUDA
``reset_peak_memory_stats`` around the call, ``max_memory_allocated`` above what was
allocated before) is taken after a warm-up call, so the cuBLAS and cuSOLVER handles'
own workspaces, allocated once per process, are charged to no call; CuPy's pool (the
``"cupy"`` eigensolver route) is counted in the peak and recorded as ``outside_bytes``.
``ratio`` is the peak over the analytic workspace; the target is at most 1.5.
"""

from __future__ import annotations

import torch

from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(gpu=(Priority(4, "peak memory against the analytic workspace"),))

__all__ = ["analytic_workspace", "key", "measure", "points"]


def analytic_workspace(d: int, D: int, r: int, p: int, *, itemsize: int = 4) -> int:
    """Bytes of one matrix's workspace by the paper's count: d r + s r + s D + s^2 elements
    (X's Householder representation, R, H, G; s = min(d, r)) plus the outputs (d + D) p."""
    s = min(d, r)
    return itemsize * (d * r + s * r + s * D + s * s + (d + D) * p)


def points(size: str) -> list[dict]:
    f, t = size_config(size, "fig3"), size_config(size, "table4")
    grid = [(f["modules"], f["d_fixed"], f["d_fixed"], r) for r in f["ranks"]]
    grid += [(f["modules"], d, d, f["r_fixed"]) for d in f["dims"] if d != f["d_fixed"]]
    out = [dict(figure="workspace", source="fig3", modules=k, d=d, D=D, r=r, p=min(f["p"], r, d),
                client_rank=f["client_rank"]) for k, d, D, r in grid]
    out.append(dict(figure="workspace", source="table4", modules=t["modules"], d=min(t["m"], t["n"]),
                    D=max(t["m"], t["n"]), r=t["clients"] * t["client_rank"], p=t["p"], client_rank=t["client_rank"]))
    return out


def key(config: dict) -> str:
    c = config
    return f"{c['source']}-{c['modules']}x{c['d']}x{c['D']}-r{c['r']}"


def cost(config: dict) -> float:
    c = config
    return 0.3 + 1e-9 * c["modules"] * (c["d"] + c["D"]) * c["r"] ** 2


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    import fraq
    from benchmarks.measure import peak_memory, tensor_bytes

    c, device = config, torch.device(device)
    B, A = cases.stacks(c["d"], c["D"], cases.sweep_ranks(c["r"], c["client_rank"]), c["modules"])
    B, A = to_device((B, A), device)
    run = lambda: fraq.recompress(B, A, rank=c["p"])  # noqa: E731
    run()  # warm-up: handles, their workspaces and lazily built constants stay out of the peak
    peak = peak_memory(run, device=device)
    analytic = c["modules"] * analytic_workspace(c["d"], c["D"], c["r"], c["p"])
    return dict(peak_bytes=peak.peak, net_bytes=peak.net, analytic_bytes=analytic, ratio=peak.peak / analytic,
                stack_bytes=tensor_bytes(B, A), outside_bytes=peak.outside)
