"""Whether FRAQ's static pass runs as a CUDA graph, per preset: :mod:`benchmarks.graph_probe` as runner points.

One point per preset of the ``pipeline`` experiment's size (:data:`benchmarks.sizes.SIZES`
``[size]["pipeline"]``: its presets and layers): the probe's record of the preset's first shape
group (:func:`benchmarks.graph_probe.probe`: the Gram, the eigenproblem and the whole static
pass, each eager, captured and replayed). Only a CUDA device can capture: elsewhere the
result says it is not on this device and nothing runs. The GPU check measures these points
after the pipelines' (its ``pipeline`` part), so a budget that cuts them keeps the timings;
``<out>/cuda_graphs/<preset>.json``.
"""

from __future__ import annotations

import torch

from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(gpu=(Priority(5, "whether FRAQ's static pass captures and replays as a CUDA graph"),))

__all__ = ["REPEATS", "cost", "key", "measure", "points"]

REPEATS = 15
"""Timed calls of each span, eager and replayed (the probe's median)."""


def points(size: str) -> list[dict]:
    """One point per preset of the ``pipeline`` experiment at ``size``, on the same layers."""
    c = size_config(size, "pipeline")
    return [dict(figure="cuda_graphs", preset=p, layers=c["layers"].get(p), repeats=REPEATS) for p in c["presets"]]


def key(config: dict) -> str:
    return config["preset"]


def cost(config: dict) -> float:
    """Building the preset's first shape group and three spans eager, warmed, captured and
    replayed: seconds on a GPU; nothing elsewhere."""
    return 5.0


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """The probe's record of the point's preset (:func:`benchmarks.graph_probe.probe`); off
    CUDA, ``skipped`` beginning "not on this device"."""
    from benchmarks.gpu_check.child import NOT_HERE
    from benchmarks.graph_probe import probe

    device = torch.device(device)
    if device.type != "cuda":
        return {"skipped": f"{NOT_HERE}: CUDA graphs need a CUDA device, not {device}"}
    rec = probe([config["preset"]], device, repeats=config["repeats"], layers=config["layers"])[0]
    return {k: v for k, v in rec.items() if k != "preset"}
