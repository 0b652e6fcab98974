"""FRAQ end to end with each eigensolver route: the evidence a device's default is set from.

The r x r Gram eigenproblem's route (:mod:`fraq._eigen`: ``device``, ``host``, ``cupy``)
is a default only where ``fraq.recompress`` itself, the whole call, was measured with
every route on that device: an eigensolver timed alone leaves out the transfers and the
synchronisation the pipeline pays around it. Per preset (every adapted module of
RoBERTa-base or LLaMA-3.2-3B, :func:`benchmarks.cases.preset_stacks`, tau = 0.95, the
library's defaults otherwise), every route this device offers is timed round-robin in
one process (:func:`benchmarks.measure.round_robin`: the samples are paired round by
round), and its result checked against the ``device`` route's: the same ranks, and each
module's product within a float32 rounding bound of it (``max_product_gap``: the largest
||B_1 A_1 - B_2 A_2||_F / ||B_1 A_1||_F over modules, float64 on the host; both are
float32 computations of one float64-eigensolved subspace, so the gap is a few float32
eps). A route this device lacks is recorded as such (``skipped``), not timed.

On the CPU every route is LAPACK's (``host`` is ``device`` there), so the experiment
runs everywhere and its CPU result is a check of the plumbing; the question it answers
is a GPU's (``python -m benchmarks.gpu_check``, part ``eigensolver``).
"""

from __future__ import annotations

import torch

from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(gpu=(Priority(5, "FRAQ with each eigensolver route"),))

__all__ = ["ROUTES", "key", "measure", "points"]

ROUTES = ("device", "host", "cupy")


def points(size: str) -> list[dict]:
    c = size_config(size, "eigensolver")
    return [dict(figure="eigensolver", preset=p, layers=c["layers"], repeats=c["repeats"]) for p in c["presets"]]


def key(config: dict) -> str:
    return config["preset"]


def cost(config: dict) -> float:
    """About 50 ms per RoBERTa-base and 250 ms per LLaMA-3.2-3B recompression on one core, for
    each route's repeats, warm-up and check (three routes at most), scaled by the layers kept."""
    base = 0.05 if config["preset"].startswith("roberta") else 0.25
    scale = 1.0 if config["layers"] is None else config["layers"] / 28
    return 1.0 + 3 * base * scale * (config["repeats"] + 3)


def _unavailable(route: str, device: torch.device) -> str | None:
    from fraq.internals import check_eigensolver

    try:
        check_eigensolver(route, device)
    except ValueError as exc:
        return f"not on this device: {exc}"
    if route == "host" and device.type != "cuda":
        return "not on this device: on the CPU the device route is the host's"
    return None


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    import fraq
    from benchmarks import cases
    from benchmarks.measure import round_robin

    c, device = config, torch.device(device)
    stacks = [(B.to(device), A.to(device)) for _, B, A in cases.preset_stacks(c["preset"], layers=c["layers"])]
    routes = [r for r in ROUTES if _unavailable(r, device) is None]
    skipped = {r: _unavailable(r, device) for r in ROUTES if r not in routes}

    def call(route):
        return lambda: [fraq.recompress(B, A, tau=cases.TAU, eigensolver=route) for B, A in stacks]

    results = {r: call(r)() for r in routes}
    timings = round_robin({r: call(r) for r in routes}, c["repeats"], device)
    base = results["device"]
    out = {"routes": {}, "skipped": skipped, "modules": sum(int(torch.tensor(B.shape[:-2]).prod()) for B, _ in stacks)}
    for r in routes:
        same_rank = all(torch.equal(a.rank.cpu(), b.rank.cpu()) for a, b in zip(base, results[r]))
        gap = 0.0
        for a, b in zip(base, results[r]):
            P = a.B.cpu().double() @ a.A.cpu().double()
            Q = b.B.cpu().double() @ b.A.cpu().double()
            den = torch.linalg.matrix_norm(P).clamp_min(torch.finfo(torch.float64).tiny)
            gap = max(gap, float((torch.linalg.matrix_norm(P - Q) / den).max()))
        out["routes"][r] = dict(timing=timings[r].as_dict(), same_ranks=same_rank, max_product_gap=gap)
    return out
