"""FlexLoRA's and FRAQ's float32 error on the device with TF32 matrix products on and off.

On Ampere and Hopper GPUs a float32 matrix product may round its inputs to TF32 (10
mantissa bits) when ``torch.backends.cuda.matmul.allow_tf32`` is set (``float32 matmul
precision`` "high"). FlexLoRA forms the dense aggregate with one such product before its
SVD, so TF32 alone could make its error the paper's "two orders of magnitude" above
FRAQ's (:mod:`benchmarks.experiments.flexlora_precision` simulates the rounding on the
CPU; this measures it). Each point runs one method on Fig. 4's conditioned aggregates
(:func:`benchmarks.experiments.fig4_cond._inputs`, at the size's shape, at condition
numbers 1e2, 1e6 and 1e10) at full output rank, with TF32 ``on`` or ``off``, and records
the per-matrix relative error against the float64 aggregate. CUDA only: on another
device the point says so (``skipped``).
"""

from __future__ import annotations

import contextlib

import torch

from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(gpu=(Priority(4, "FlexLoRA and FRAQ with TF32 on and off"),))

__all__ = ["key", "measure", "points", "tf32_mode"]

TF32_METHODS = ("flexlora", "fraq")
"""The methods measured with TF32 on and off: FlexLoRA (a dense product before its SVD) and FRAQ."""


def points(size: str) -> list[dict]:
    c = size_config(size, "fig4_cond")
    m, n = c["shape"]
    kappas = [k for k in c["kappas"] if k in (1e2, 1e6, 1e10)] or c["kappas"][-1:]
    return [dict(figure="tf32", method=method, tf32=mode, kappa=k, m=m, n=n, rank=c["rank"], clients=c["clients"],
                 batch=c["batch"]) for k in kappas for method in TF32_METHODS for mode in ("on", "off")]


def key(config: dict) -> str:
    return f"{config['method']}-tf32-{config['tf32']}-k{config['kappa']:.0e}"


def cost(config: dict) -> float:
    from benchmarks.experiments import dense_seconds

    return 0.1 + dense_seconds(config["m"], config["n"], config["batch"])


@contextlib.contextmanager
def tf32_mode(on: bool):
    """TF32 matrix products on or off for the block (both of torch's switches), then restored."""
    before = torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32
    torch.set_float32_matmul_precision("high" if on else "highest")
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cuda.matmul.allow_tf32 = before[1]


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    from benchmarks.device import to_device
    from benchmarks.experiments.fig4_cond import _inputs
    from benchmarks.measure import fidelity
    from benchmarks.measure.methods import get_method

    c, device = config, torch.device(device)
    if device.type != "cuda":
        return dict(skipped="not on this device: TF32 is a CUDA matrix-product mode")
    Bs, As, B, A, _ = _inputs(c["m"], c["n"], c["rank"], c["kappa"], c["clients"], c["batch"])
    with tf32_mode(c["tf32"] == "on"):
        mode = dict(float32_matmul_precision=torch.get_float32_matmul_precision(),
                    allow_tf32=torch.backends.cuda.matmul.allow_tf32)
        Bg, Ag, rank = get_method(c["method"])(to_device(Bs, device), to_device(As, device), rank=c["rank"])
        torch.cuda.synchronize(device)
    rank = rank.cpu() if isinstance(rank, torch.Tensor) else rank
    f = fidelity(B, A, Bg.cpu(), Ag.cpu(), rank)
    return dict(relative_error=f.relative_error.tolist(), **mode)
