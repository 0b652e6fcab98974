"""The r x r Gram eigenproblem on the device, every route a GPU offers, in one process.

FRAQ's pipeline solves a batch of small symmetric eigenproblems (r x r Grams, r the
stacked rank: 80 for RoBERTa-base's 10 clients of rank 8, 64 for LLaMA-3.2-3B's, 232
for its heterogeneous preset), by default in float64. On CUDA, torch's batched ``eigh``
runs the Jacobi batched solver only for small matrices and otherwise loops over the
batch one syevd at a time, so the route matters. Routes (``route``):

- ``torch-f32`` / ``torch-f64``: ``torch.linalg.eigh`` on the device, float32 / float64;
- ``cupy-f32`` / ``cupy-f64``: CuPy's batched ``cupy.linalg.eigh`` on the same memory,
  handed over through DLPack (no copy); only where CuPy imports and the device is CUDA;
- ``host-f64``: copied to the host, solved there in float64, copied back: the pipeline
  synchronises once anyway (the energy rule's rank), so a host solve costs a transfer,
  not a new stall. Only on CUDA (on the CPU every route is on the host).

Per point: the timing (:func:`benchmarks.measure.timed`, events on CUDA) and the fidelity
evidence against a float64 host solve of the same Grams: the largest eigenvalue error
relative to the largest eigenvalue, the eigen-residual ``||G V - V diag(w)||_F / ||G||_F``
and ``||V^T V - I||_F`` (worst over the batch). The Grams are ``H H^T`` of a random
``H`` (batch, r, D) whose rows decay geometrically to 1e-3, a spread like a LoRA
aggregate's. A route this device lacks is a result saying so (``skipped``).
"""

from __future__ import annotations

import torch

from benchmarks.experiments import Experiment, Priority
from benchmarks.sizes import size_config

EXPERIMENT = Experiment(gpu=(Priority(5, "the eigensolver routes"),))

__all__ = ["ROUTES", "grams", "key", "measure", "points", "unavailable"]

ROUTES = ("torch-f32", "torch-f64", "cupy-f32", "cupy-f64", "host-f64")


def points(size: str) -> list[dict]:
    c = size_config(size, "eigh_routes")
    return [dict(figure="eigh_routes", route=route, batch=b, r=r, D=D, repeats=c["repeats"])
            for b, r, D in c["cases"] for route in ROUTES]


def key(config: dict) -> str:
    c = config
    return f"{c['route']}-{c['batch']}x{c['r']}"


def cost(config: dict) -> float:
    return 0.2 + 1e-9 * config["batch"] * config["r"] ** 3 * (config["repeats"] + 2)


def unavailable(route: str, device: torch.device) -> str | None:
    """Why ``route`` cannot run on ``device``, or None."""
    if route.startswith("host") and device.type != "cuda":
        return "not on this device: on the CPU every route solves on the host (torch-f64 is this route)"
    if route.startswith("cupy"):
        if device.type != "cuda":
            return "not on this device: CuPy solves on a CUDA GPU"
        try:
            import cupy  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - absent, or built for another CUDA
            return f"not on this device: cupy does not import ({type(exc).__name__}: {exc})"
    return None


def grams(batch: int, r: int, D: int, seed: int = 0) -> torch.Tensor:
    """(batch, r, r) float64 Grams ``H H^T``, rows of H scaled from 1 down to 1e-3."""
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(batch, r, D, generator=g, dtype=torch.float64)
    H *= torch.logspace(0, -3, r, dtype=torch.float64).unsqueeze(-1)
    return H @ H.mT


def _solver(route: str, G: torch.Tensor):
    """A zero-argument call returning (w, V) on G's device."""
    dtype = torch.float32 if route.endswith("f32") else torch.float64
    Gd = G.to(dtype)
    if route.startswith("torch"):
        return lambda: torch.linalg.eigh(Gd)
    if route.startswith("host"):
        def host():
            w, V = torch.linalg.eigh(Gd.cpu())
            return w.to(G.device, non_blocking=True), V.to(G.device, non_blocking=True)
        return host
    import cupy

    def cupy_eigh():
        w, V = cupy.linalg.eigh(cupy.from_dlpack(Gd))
        return torch.from_dlpack(w), torch.from_dlpack(V)
    return cupy_eigh


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    from benchmarks.measure import timed

    c, device = config, torch.device(device)
    reason = unavailable(c["route"], device)
    if reason:
        return dict(skipped=reason)
    G = grams(c["batch"], c["r"], c["D"])
    w_ref = torch.linalg.eigvalsh(G)
    fn = _solver(c["route"], G.to(device))
    timing = timed(fn, repeats=c["repeats"], warmup=2, device=device)
    w, V = (t.cpu().double() for t in fn())
    scale = w_ref[..., -1:].abs()
    eye = torch.eye(c["r"], dtype=torch.float64)
    residual = torch.linalg.matrix_norm(G @ V - V * w.unsqueeze(-2)) / torch.linalg.matrix_norm(G)
    return dict(timing=timing.as_dict(), eigenvalue_error=float(((w - w_ref).abs() / scale).max()),
                residual=float(residual.max()), orthogonality=float(torch.linalg.matrix_norm(V.mT @ V - eye).max()))
