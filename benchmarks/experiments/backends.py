"""Accuracy-latency benchmark of the basis backends (the paper's Appendix D).

    .venv/bin/python -m benchmarks.run backends [--size tiny|reduced|paper] [--device cuda]

Every registered backend runs on the same inputs:

(a) ``lora``: LoRA-like stacks (:func:`fraq.synthetic.lora_clients`: decaying spectra,
    partly shared subspaces) at the RoBERTa-base and LLaMA-3.2-3B presets, every
    module group batched as :func:`fraq.recompress` is used, tau = 0.95;
(b) ``condition``: the paper's Fig. 4 right, rank-64 aggregates of a 1024 x 1024 matrix
    with condition numbers 1 to 1e10 (singular values log-spaced, the ill-conditioning
    rotated away from the columns), float32, output rank 64, against float64;
(c) ``rank-deficient``: duplicate clients (every client twice), tau = 1, so the exact
    answer has half the stacked rank.

Columns: latency (median and IQR of interleaved repeats, at the size's torch threads: 1 and 2 at ``paper``),
analytic FLOPs (:func:`fraq.flops.fraq_flops`, Newton-Schulz at its measured step
count), orthogonality ||Q^T Q - I||_F, relative error above the float64 Eckart-Young
optimum, gap to Householder FRAQ, fallbacks taken, Newton-Schulz steps.
:mod:`benchmarks.experiments.backend_stages` times the pipeline's pieces.

Backends are timed round-robin (one call of each in turn, order rotated every repeat) so
that load from other processes spreads over all of them: a case is measured once, for
every backend, and each backend's row is one point. Every size but ``paper`` uses 2
layers per module group and fewer repeats (:data:`benchmarks.sizes.SIZES`). Inputs are
:mod:`benchmarks.cases`' (presets, :func:`~benchmarks.cases.conditioned`,
:func:`~benchmarks.cases.duplicated`); every row is one result file
``<out>/backends/<section>-<case>-<backend>.json`` (:mod:`benchmarks.results`). Timings
run on ``--device`` (CUDA: events after warm-up and a synchronize); the float64
references on the CPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

import fraq
from benchmarks import cases
from benchmarks.device import to_device
from benchmarks.experiments import Experiment
from benchmarks.measure import Timing, round_robin
from benchmarks.measure.methods import ran_path
from benchmarks.sizes import size_config
from fraq.backends import BACKENDS, EXACT_BACKENDS, get_backend
from fraq.diagnostics import orthogonality_error
from fraq.flops import fraq_flops
from fraq.reference import factored_error, reference_svd

EXPERIMENT = Experiment(default=True, scale=1.4)

TAU = 0.95
PRESETS = ("roberta-base", "llama-3.2-3b")
CONDITIONS = (1.0, 1e2, 1e4, 1e6, 1e8, 1e10)
COND_SHAPE, COND_RANK = (1024, 1024), 64
DUPLICATES = (("roberta q (768x768)", 768, 768, 5, 4), ("llama gate (8192x3072)", 8192, 3072, 4, 2))
TARGET_ERROR, TARGET_SPEEDUP = 1e-6, 2.0


@dataclass
class Case:
    section: str
    label: str
    pairs: list  # [(B, A)], one batched pair per module group, on the CPU
    tau: float | None
    rank: int | None
    device: torch.device = torch.device("cpu")

    def __post_init__(self):
        self.on_device = [to_device(pair, self.device) for pair in self.pairs]

    def run(self, backend: str) -> list:
        return [fraq.recompress(B, A, tau=self.tau, rank=self.rank, backend=backend) for B, A in self.on_device]


def lora_case(preset_name: str, layers: int | None, device=torch.device("cpu")) -> Case:
    pairs = [(B, A) for _, B, A in cases.preset_stacks(preset_name, layers=layers)]
    return Case("lora", preset_name, pairs, TAU, None, device)


def condition_case(cond: float, device=torch.device("cpu")) -> Case:
    Bs, As, _ = cases.conditioned(*COND_SHAPE, COND_RANK, cond, seed=1)
    return Case("condition", f"cond {cond:.0e}", [(Bs[0], As[0])], None, COND_RANK, device)


def duplicate_case(label: str, m: int, n: int, clients: int, batch: int, device=torch.device("cpu")) -> Case:
    return Case("rank-deficient", label, [fraq.stack(*cases.duplicated(m, n, clients, batch))], 1.0, None, device)


def _timings(case: Case, names: list[str], repeats: int, threads: int) -> dict[str, Timing]:
    torch.set_num_threads(threads)
    return round_robin({n: (lambda n=n: case.run(n)) for n in names}, repeats, case.device)


def _flops(case: Case, results: list) -> float:
    total = 0.0
    for (B, A), res in zip(case.pairs, results):
        m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
        d, D = min(m, n), max(m, n)
        ranks = torch.as_tensor(res.rank).reshape(-1).tolist()
        steps = res.info.get("steps") if res.backend.startswith("newton-schulz") else None
        total += sum(fraq_flops(d, D, r, p, res.backend, steps=steps, **ran_path(res)) for p in ranks)
    return total


def _norm(B: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """||B A||_F in float64, through fraq.reference (the error against an empty product)."""
    return factored_error(B, A, B[..., :0], A[..., :0, :])


def _on_cpu(results: list) -> list:
    """The results with B, A and rank on the CPU (the references run there)."""
    from dataclasses import replace

    return [replace(r, B=r.B.cpu(), A=r.A.cpu(), rank=r.rank.cpu() if torch.is_tensor(r.rank) else r.rank)
            for r in results]


def _reference(case: Case, reference: list, k: int) -> list:
    """Per module group: float64 singular values of the aggregate and ||B_h A_h||_F, first k matrices."""
    out = []
    for (B, A), ref in zip(case.pairs, _on_cpu(reference)):
        _, S, _ = reference_svd(B[:k], A[:k])
        out.append((S, _norm(ref.B[:k], ref.A[:k])))
    return out


def _accuracy(case: Case, name: str, results: list, reference: list, exact: list, k: int) -> dict:
    """Worst accuracy measures over the first k matrices of every module group (float64)."""
    from fraq.internals import orient

    gap_opt, gap_hh, orth, fallbacks, kinds, steps, same_rank = 0.0, 0.0, 0.0, 0, set(), 0, True
    for (B, A), res, ref, (S, ref_norm) in zip(case.pairs, _on_cpu(results), _on_cpu(reference), exact):
        Bk, Ak = B[:k], A[:k]
        p = torch.as_tensor(res.rank).reshape(-1)[:k]
        tail = torch.where(torch.arange(S.shape[-1]) >= p.unsqueeze(-1), S, 0).square().sum(-1).sqrt()
        norm = S.square().sum(-1).sqrt()
        rel = factored_error(Bk, Ak, res.B[:k], res.A[:k]) / norm
        gap_opt = max(gap_opt, float((rel - tail / norm).max()))
        gap_hh = max(gap_hh, float((factored_error(ref.B[:k], ref.A[:k], res.B[:k], res.A[:k]) / ref_norm).max()))
        orth = max(orth, float(orthogonality_error(get_backend(name)(orient(Bk, Ak)[0])).max()))
        same_rank &= bool(torch.equal(torch.as_tensor(res.rank), torch.as_tensor(ref.rank)))
        fallbacks += int(res.info.get("fallback_count", 0))
        if res.info.get("fallback"):
            kinds.add(res.info["fallback"])
        steps = max(steps, int(res.info.get("steps", 0)))
    return dict(gap_to_optimum=gap_opt, gap_to_householder=gap_hh, orthogonality=orth, same_rank=same_rank,
                fallback=",".join(sorted(kinds)) or None, fallback_count=fallbacks, steps=steps or None)


def run_case(case: Case, names: list[str], cfg: dict) -> list[dict]:
    torch.set_num_threads(cfg["threads"][0])
    reference = case.run("householder")
    k = cfg["diag_matrices"]
    exact = _reference(case, reference, k)
    rows = []
    for name in names:
        results = case.run(name)
        rows.append(dict(section=case.section, case=case.label, backend=name, exact=name in EXACT_BACKENDS,
                         gflop=_flops(case, results) / 1e9, **_accuracy(case, name, results, reference, exact, k)))
    for t in cfg["threads"]:
        for name, timing in _timings(case, names, cfg["repeats"], t).items():
            row = next(r for r in rows if r["backend"] == name)
            row[f"ms_{t}t"] = timing.median * 1e3
            row[f"iqr_ms_{t}t"] = timing.iqr * 1e3
            row[f"timing_{t}t"] = timing.as_dict()
    base = next(r for r in rows if r["backend"] == "householder")
    for row in rows:
        row["speedup_1t"] = base[f"ms_{cfg['threads'][0]}t"] / row[f"ms_{cfg['threads'][0]}t"]
    return rows


def summary(rows: list[dict]) -> list[str]:
    lines = []
    exact = [r for r in rows if r["exact"] and r["section"] in ("condition", "rank-deficient")]
    worst = max(exact, key=lambda r: r["gap_to_optimum"])
    lines.append(f"worst exact-backend error above the optimum, (b)+(c): {worst['gap_to_optimum']:.2e} "
                 f"({worst['backend']}, {worst['case']}); target {TARGET_ERROR:.0e}: "
                 f"{'met' if worst['gap_to_optimum'] <= TARGET_ERROR else 'NOT met'}")
    per = {}
    for r in exact:
        per[r["backend"]] = max(per.get(r["backend"], 0.0), r["gap_to_optimum"])
    lines.append("  worst per exact backend: " + ", ".join(f"{k} {v:.1e}" for k, v in per.items()))
    for preset in PRESETS:
        cand = [r for r in rows if r["section"] == "lora" and r["case"] == preset and r["exact"]
                and r["backend"] != "householder" and r["gap_to_optimum"] <= TARGET_ERROR]
        if cand:
            best = max(cand, key=lambda r: r["speedup_1t"])
            ok = "met" if best["speedup_1t"] >= TARGET_SPEEDUP else "NOT met"
            lines.append(f"{preset}: fastest exact variant {best['backend']} at {best['speedup_1t']:.2f}x householder "
                         f"(1 thread); target {TARGET_SPEEDUP:.0f}x: {ok}")
    return lines


def _case(section: str, label: str, layers, device) -> Case:
    if section == "lora":
        return lora_case(label, layers, device)
    if section == "condition":
        return condition_case(float(label.split()[1]), device)
    spec = next(d for d in DUPLICATES if d[0] == label)
    return duplicate_case(*spec, device)


def points(size: str) -> list[dict]:
    """One point per (case, backend): every registered backend on every case."""
    cfg = size_config(size, "backends")
    labels = ([("lora", p) for p in PRESETS] + [("condition", f"cond {c:.0e}") for c in CONDITIONS]
              + [("rank-deficient", d[0]) for d in DUPLICATES])
    mode = "full" if cfg["layers"] is None else "quick"  # every layer, or 2 per module group
    return [dict(cfg, mode=mode, section=section, case=label, backend=name, tau=TAU)
            for section, label in labels for name in sorted(BACKENDS)]


def cost(config: dict) -> float:
    """One case measures every backend at once (the first backend's point pays): about 15 s
    a case over every layer, 5 s on 2 layers per group."""
    first = config["backend"] == sorted(BACKENDS)[0]
    return (15.0 if config["layers"] is None else 5.0) if first else 0.01


def key(config: dict) -> str:
    return f"{config['section']}-{config['case']}-{config['backend']}".replace(" ", "_")


@functools.lru_cache(maxsize=1)
def _rows(section: str, label: str, layers, repeats: int, diag_matrices: int, threads: tuple, device: str) -> dict:
    """Every backend's row on one case, measured together (their timings interleaved)."""
    before = torch.get_num_threads()
    try:
        rows = run_case(_case(section, label, layers, torch.device(device)), sorted(BACKENDS),
                        dict(repeats=repeats, diag_matrices=diag_matrices, threads=threads))
    finally:
        torch.set_num_threads(before)
    return {r["backend"]: {k: v for k, v in r.items() if k not in ("section", "case", "backend")} for r in rows}


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """One backend's row on one case (the whole case is measured once, for every backend)."""
    c = config
    return _rows(c["section"], c["case"], c["layers"], c["repeats"], c["diag_matrices"], tuple(c["threads"]),
                 str(torch.device(device)))[c["backend"]]
