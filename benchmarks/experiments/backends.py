"""Accuracy-latency benchmark of the basis backends (issue 3; the paper's Appendix D).

    .venv/bin/python -m benchmarks.run backends [--size reduced|paper] [--device cuda]
    .venv/bin/python -m benchmarks.experiments.backends [--quick] [--out results] [--device cuda]

Every registered backend runs on the same inputs:

(a) ``lora``: LoRA-like stacks (:func:`fraq.synthetic.lora_clients`: decaying spectra,
    partly shared subspaces) at the RoBERTa-base and LLaMA-3.2-3B presets, every
    module group batched as :func:`fraq.recompress` is used, tau = 0.95;
(b) ``condition``: the paper's Fig. 4 right, rank-64 aggregates of a 1024 x 1024 matrix
    with condition numbers 1 to 1e10 (singular values log-spaced, the ill-conditioning
    rotated away from the columns), float32, output rank 64, against float64;
(c) ``rank-deficient``: duplicate clients (every client twice), tau = 1, so the exact
    answer has half the stacked rank.

Columns: latency (median and IQR of interleaved repeats, at 1 and 2 torch threads),
analytic FLOPs (:func:`fraq.flops.fraq_flops`, Newton-Schulz at its measured step
count), orthogonality ||Q^T Q - I||_F, relative error above the float64 Eckart-Young
optimum, gap to Householder FRAQ, fallbacks taken, Newton-Schulz steps. A stage
breakdown (1 thread) times the pieces of the pipeline one by one for Householder and
Cholesky-QR2, with the factored Gram (:mod:`fraq.backends.factored_gram`) beside the
H path, to show where the time goes.

Backends are timed round-robin (one call of each in turn, order rotated every repeat) so
that load from other processes spreads over all of them. ``--quick`` uses 2 layers per
module group instead of all of them and fewer repeats (under 3 minutes on 2 cores).
Inputs are :mod:`benchmarks.cases`' (presets, :func:`~benchmarks.cases.conditioned`,
:func:`~benchmarks.cases.duplicated`); every row is one result file
``<out>/backends/<section>-<case>-<backend>.json`` (:mod:`benchmarks.results`), the
stage breakdown ``<out>/backends_stages/...`` and the summary lines
``<out>/backends_summary/summary.json``. Timings run on ``--device`` (CUDA: events after
warm-up and a synchronize); the float64 references on the CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

import torch

import fraq
from benchmarks import cases
from benchmarks.device import checked, to_device
from benchmarks.measure import Timing, round_robin
from benchmarks.measure.methods import ran_factored
from benchmarks.results import check_out_dir, write_result
from fraq.backends import BACKENDS, EXACT_BACKENDS, get_backend
from fraq.backends.factored_gram import factored_gram, factored_rows
from fraq.diagnostics import orthogonality_error
from fraq.flops import fraq_flops
from fraq.reference import factored_error, reference_svd

CONFIG = {
    "quick": dict(layers=2, repeats=5, diag_matrices=1, threads=(1, 2), stage_repeats=5),
    "full": dict(layers=None, repeats=7, diag_matrices=4, threads=(1, 2), stage_repeats=7),
}
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
        total += sum(fraq_flops(d, D, r, p, res.backend, steps=steps, factored=ran_factored(res)) for p in ranks)
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
    from fraq._orient import orient

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


STAGE_PARTS = ("basis", "H = C Y", "G = H H^T", "eigh (float64)", "apply Q to U_p", "R_p = U_p^T H")


def _stage_calls(case: Case, name: str) -> dict:
    """One closure per pipeline stage, each running that stage on every module group."""
    from fraq._orient import orient

    fn = get_backend(name)
    groups = []
    for B, A in case.on_device:
        X, Y, _ = orient(B, A)
        basis = fn(X)
        H = torch.matmul(basis.C, Y)
        G = torch.matmul(H, H.mT)
        lam, U = torch.linalg.eigh(G.double())
        p = max(int(fraq.select_rank(lam.flip(-1).clamp(min=0), TAU).max()), 1)
        groups.append((B, A, X, Y, basis, H, G, U.flip(-1)[..., :p].to(X.dtype)))

    def each(stage):
        return lambda: [stage(*g) for g in groups]

    return {
        "basis": each(lambda B, A, X, Y, b, H, G, Up: fn(X)),
        "H = C Y": each(lambda B, A, X, Y, b, H, G, Up: torch.matmul(b.C, Y)),
        "G = H H^T": each(lambda B, A, X, Y, b, H, G, Up: torch.matmul(H, H.mT)),
        "G factored": each(lambda B, A, X, Y, b, H, G, Up: factored_gram(b.C, Y)),
        "eigh (float64)": each(lambda B, A, X, Y, b, H, G, Up: torch.linalg.eigh(G.double())),
        "apply Q to U_p": each(lambda B, A, X, Y, b, H, G, Up: b.apply(Up)),
        "R_p = U_p^T H": each(lambda B, A, X, Y, b, H, G, Up: torch.matmul(Up.mT, H)),
        "R_p factored": each(lambda B, A, X, Y, b, H, G, Up: factored_rows(Up, b.C, Y)),
        "recompress (whole)": each(lambda B, A, X, Y, b, H, G, Up: fraq.recompress(B, A, tau=TAU, backend=name)),
    }


def stage_breakdown(case: Case, repeats: int, names=("householder", "cholesky", "cholesky-qr2")) -> list[dict]:
    """1-thread median times (ms) of the pipeline's pieces, summed over the module groups.

    Every (backend, stage) call is timed round-robin, like the main table. "other" is the
    whole recompression minus its measured parts: argument checks, the Gram range check,
    the rank rule, masking and copies.
    """
    torch.set_num_threads(1)
    timings = round_robin({(n, k): f for n in names for k, f in _stage_calls(case, n).items()}, repeats,
                           case.device)
    rows = []
    for n in names:
        totals = {k: t.median * 1e3 for (m, k), t in timings.items() if m == n}
        totals["other (checks, rank rule, copies)"] = totals["recompress (whole)"] - sum(totals[k] for k in STAGE_PARTS)
        rows.append(dict(case=case.label, backend=n, **totals))
    return rows


def _fmt_ms(row, t):
    key = f"ms_{t}t"
    return f"{row[key]:8.1f} ±{row[f'iqr_ms_{t}t']:5.1f}" if key in row else " " * 15


def print_table(rows: list[dict], threads) -> None:
    head = (f"{'case':24s} {'backend':21s} " + " ".join(f"{f'{t} thr ms (IQR)':>15s}" for t in threads)
            + f" {'x HH':>5s} {'GFLOP':>7s} {'orth':>8s} {'err-opt':>9s} {'gap HH':>8s} {'rank':>4s} fallback")
    print(head)
    print("-" * len(head))
    for r in rows:
        fb = f"{r['fallback']} x{r['fallback_count']}" if r["fallback"] else "-"
        steps = f" ({r['steps']} steps)" if r["steps"] else ""
        print(f"{r['case']:24s} {r['backend']:21s} " + " ".join(_fmt_ms(r, t) for t in threads)
              + f" {r['speedup_1t']:5.2f} {r['gflop']:7.3f} {r['orthogonality']:8.1e} {r['gap_to_optimum']:9.1e}"
              f" {r['gap_to_householder']:8.1e} {'=' if r['same_rank'] else '!=':>4s} {fb}{steps}")


def print_stages(rows: list[dict]) -> None:
    keys = [k for k in rows[0] if k not in ("case", "backend")]
    print(f"{'stage (ms, 1 thread)':34s}" + "".join(f"{r['case'][:12] + ' ' + r['backend'][:6]:>22s}" for r in rows))
    for k in keys:
        print(f"{k:34s}" + "".join(f"{r[k]:22.1f}" for r in rows))


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


def run(out, *, quick: bool, device: torch.device = torch.device("cpu"), log=print) -> list[str]:
    """Measure every backend on every case; write the result files under ``out``; return the summary."""
    mode = "quick" if quick else "full"
    cfg = CONFIG[mode]
    names = list(BACKENDS)
    threads_before = torch.get_num_threads()
    t0 = time.perf_counter()
    cases_ = [lora_case(p, cfg["layers"], device) for p in PRESETS]
    cases_ += [condition_case(c, device) for c in CONDITIONS]
    cases_ += [duplicate_case(*spec, device) for spec in DUPLICATES]
    rows, stages = [], []
    try:
        for case in cases_:
            rows += run_case(case, names, cfg)
            log(f"  done: {case.section} / {case.label} ({time.perf_counter() - t0:.0f} s)")
        for case in cases_[: len(PRESETS)]:
            stages += stage_breakdown(case, cfg["stage_repeats"])
    finally:
        torch.set_num_threads(threads_before)
    config = dict(cfg, mode=mode, tau=TAU, presets=PRESETS, conditions=CONDITIONS, cond_shape=COND_SHAPE,
                  cond_rank=COND_RANK, duplicates=DUPLICATES)
    for r in rows:
        key = f"{r['section']}-{r['case']}-{r['backend']}".replace(" ", "_")
        write_result(out, "backends", key, dict(config, section=r["section"], case=r["case"], backend=r["backend"]),
                     {k: v for k, v in r.items() if k not in ("section", "case", "backend")}, device=device)
    for r in stages:
        write_result(out, "backends_stages", f"{r['case']}-{r['backend']}", dict(config, case=r["case"],
                     backend=r["backend"]), {k: v for k, v in r.items() if k not in ("case", "backend")},
                     device=device)
    lines = summary(rows)
    write_result(out, "backends_summary", "summary", config, {"lines": lines, "seconds": time.perf_counter() - t0},
                 device=device)
    for section in ("lora", "condition", "rank-deficient"):
        log(f"\n== {section} ==")
        print_table([r for r in rows if r["section"] == section], cfg["threads"])
    log("\n== stage breakdown (summed over module groups) ==")
    print_stages(stages)
    log("\n" + "\n".join(lines))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.experiments.backends", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 layers per module group, fewer repeats")
    ap.add_argument("--out", default="results", help="results directory (files go to <out>/backends*/)")
    ap.add_argument("--device", help="cpu, cuda or cuda:N (default: FRAQ_BENCH_DEVICE, else cpu)")
    args = ap.parse_args(argv)
    try:
        device = checked(args.device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    check_out_dir(args.out)
    load = os.getloadavg()[0]
    run(args.out, quick=args.quick, device=device)
    print(f"\nwrote {args.out}/backends*/ (torch threads {list(CONFIG['quick' if args.quick else 'full']['threads'])}, "
          f"device {device}, load average {load:.1f} -> {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
