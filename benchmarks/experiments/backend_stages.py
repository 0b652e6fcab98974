"""Where the time of one recompression goes: the pipeline's stages, timed one by one.

For the LoRA-like preset cases of :mod:`benchmarks.experiments.backends` and a few
backends (:data:`STAGE_BACKENDS`), each stage of the pipeline (basis, H = C Y, the Gram,
the float64 eigensolver, applying Q, R_p; the factored Gram of
:mod:`fraq._gram` beside the H path, and each in the form the whole call runs, "as run")
runs alone on every module group, at one thread, timed round-robin with the whole
recompression. "other" is the whole minus the stages it runs: argument checks, the range
and cancellation verdicts, the rank rule, masking and copies. One result file per (case, backend), ``<out>/backend_stages/<case>-<backend>.json``.
"""

from __future__ import annotations

import functools

import torch

import fraq
from benchmarks.experiments import Experiment
from benchmarks.experiments.backends import PRESETS, TAU, Case, lora_case
from benchmarks.measure import round_robin
from benchmarks.sizes import size_config
from fraq.backends import get_backend
from fraq.flops import cheapest_path
from fraq.internals import Coordinates, coordinates, rows

EXPERIMENT = Experiment(default=True, scale=0.31)

__all__ = ["key", "measure", "points", "stage_breakdown"]

STAGE_BACKENDS = ("householder", "cholesky", "cholesky-qr2")


def points(size: str) -> list[dict]:
    cfg = size_config(size, "backend_stages")
    return [dict(case=p, backend=b, layers=cfg["layers"], repeats=cfg["stage_repeats"], tau=TAU)
            for p in PRESETS for b in STAGE_BACKENDS]


def cost(config: dict) -> float:
    """One case times every stage backend at once (the first one's point pays): about 30 s
    a case over every layer, 6 s on 2 layers per group."""
    first = config["backend"] == STAGE_BACKENDS[0]
    return (30.0 if config["layers"] is None else 6.0) if first else 0.01


def key(config: dict) -> str:
    return f"{config['case']}-{config['backend']}"


@functools.lru_cache(maxsize=1)
def _rows(case: str, layers, repeats: int, device: str) -> dict:
    return {r["backend"]: r for r in stage_breakdown(lora_case(case, layers, torch.device(device)), repeats)}


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    c = config
    row = _rows(c["case"], c["layers"], c["repeats"], str(torch.device(device)))[c["backend"]]
    return {k: v for k, v in row.items() if k not in ("case", "backend")}


STAGE_PARTS = ("basis", "Gram (as run)", "eigh (float64)", "apply Q to U_p", "R_p (as run)")
"""The stages the whole call runs, each module group in the Gram form ``gram="auto"`` takes
at its shape (:func:`fraq.flops.cheapest_path`: factored on LoRA stacks): "other" is the
whole less these."""


def _stage_calls(case: Case, name: str) -> dict:
    """One closure per pipeline stage, each running that stage on every module group."""
    from fraq.internals import orient

    fn = get_backend(name)
    groups = []
    for B, A in case.on_device:
        X, Y, _ = orient(B, A)
        basis = fn(X)
        H = torch.matmul(basis.C, Y)
        G = torch.matmul(H, H.mT)
        lam, U = torch.linalg.eigh(G.double())
        p = max(int(fraq.select_rank(lam.flip(-1).clamp(min=0), TAU).max()), 1)
        factored = cheapest_path(X.shape[-2], Y.shape[-1], X.shape[-1], 0, form="auto").factored
        run = coordinates(basis.C, Y, factored)  # the form the whole call runs here
        groups.append((B, A, X, Y, basis, H, G, U.flip(-1)[..., :p].to(X.dtype), factored, run))

    def each(stage):
        return lambda: [stage(*g) for g in groups]

    return {
        "basis": each(lambda B, A, X, Y, b, H, G, Up, f, run: fn(X)),
        "H = C Y": each(lambda B, A, X, Y, b, H, G, Up, f, run: torch.matmul(b.C, Y)),
        "G = H H^T": each(lambda B, A, X, Y, b, H, G, Up, f, run: torch.matmul(H, H.mT)),
        "G factored": each(lambda B, A, X, Y, b, H, G, Up, f, run: coordinates(b.C, Y, factored=True)),
        "Gram (as run)": each(lambda B, A, X, Y, b, H, G, Up, f, run: coordinates(b.C, Y, f)),
        "eigh (float64)": each(lambda B, A, X, Y, b, H, G, Up, f, run: torch.linalg.eigh(G.double())),
        "apply Q to U_p": each(lambda B, A, X, Y, b, H, G, Up, f, run: b.apply(Up)),
        "R_p = U_p^T H": each(lambda B, A, X, Y, b, H, G, Up, f, run: torch.matmul(Up.mT, H)),
        "R_p factored": each(lambda B, A, X, Y, b, H, G, Up, f, run: rows(Coordinates(G=G), Up, b.C, Y)),
        "R_p (as run)": each(lambda B, A, X, Y, b, H, G, Up, f, run: rows(run, Up, b.C, Y)),
        "recompress (whole)": each(lambda B, A, X, Y, b, H, G, Up, f, run: fraq.recompress(B, A, tau=TAU,
                                                                                             backend=name)),
    }


def stage_breakdown(case: Case, repeats: int, names=STAGE_BACKENDS) -> list[dict]:
    """1-thread median times (ms) of the pipeline's pieces, summed over the module groups.

    Every (backend, stage) call is timed round-robin, like the main table. "other" is the
    whole recompression minus the stages it runs (:data:`STAGE_PARTS`): argument checks,
    the range and cancellation verdicts, the rank rule, masking and copies.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        timings = round_robin({(n, k): f for n in names for k, f in _stage_calls(case, n).items()}, repeats,
                              case.device)
    finally:
        torch.set_num_threads(before)
    rows = []
    for n in names:
        totals = {k: t.median * 1e3 for (m, k), t in timings.items() if m == n}
        totals["other (checks, rank rule, copies)"] = totals["recompress (whole)"] - sum(totals[k] for k in STAGE_PARTS)
        rows.append(dict(case=case.label, backend=n, **totals))
    return rows
