"""Table 4's orientation, step by step: which step makes fixed or adaptive faster here.

On Table 4's input (:mod:`benchmarks.experiments.table4`: 8192 x 3072 gate/up
projections, m > n), adaptive orientation runs the QR on the n = 3072 side and carries
the 8192 side in matrix products; fixed runs the QR on the 8192-long B. Both are timed
per step of the Gram pipeline (:data:`benchmarks.measure.ablation.STEPS`), each step on
the previous steps' results, the two orientations alternating call by call so that load
drift hits both alike, Table 4's rounds times its launches of them in this one process
(the steps are a diagnosis of the orientations' difference, not a claim of their own).
One point; per step and orientation the samples (seconds).
"""

from __future__ import annotations

import torch

from benchmarks.device import to_device
from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(default=True, scale=11, gpu=(Priority(3, "Table 4's steps"),))

__all__ = ["key", "measure", "points"]

ORIENTATIONS = ("adaptive", "fixed")


def points(size: str) -> list[dict]:
    return [dict(figure="table4_steps", **size_config(size, "table4"))]


def key(config: dict) -> str:
    return "steps"


def cost(config: dict) -> float:
    """Twice a Table 4 variant's calls (each step of both orientations)."""
    c = config
    return 2 * 0.02 * c["modules"] * (_repeats(c) + 2) * c["m"] * c["n"] / (8192 * 3072)


def _repeats(c: dict) -> int:
    return c["rounds"] * c["launches"]


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    from benchmarks.experiments.table4 import _stacks
    from benchmarks.measure import timed
    from benchmarks.measure.ablation import STEPS, variant_steps

    c, device = config, torch.device(device)
    B, A = to_device(_stacks(c), device)
    calls = {o: variant_steps(B, A, c["p"], o) for o in ORIENTATIONS}
    samples = {o: {s: [] for s in STEPS} for o in ORIENTATIONS}
    for step in STEPS:
        for o in ORIENTATIONS:  # warm-up
            calls[o][step]()
        for _ in range(_repeats(c)):
            for o in ORIENTATIONS:
                samples[o][step].append(timed(calls[o][step], repeats=1, warmup=0, device=device).samples[0])
    return dict(steps=list(STEPS), samples=samples, threads=torch.get_num_threads())
