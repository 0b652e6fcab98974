"""Printed tables from the measurement layer: the issue's targets, beside the paper.

    python -m benchmarks.report ablation   # Table 4: our ratios beside the paper's
    python -m benchmarks.report scaling    # FRAQ's time exponents in r and d, fitted
    python -m benchmarks.report memory     # tensor peak memory vs analytic workspace
    python -m benchmarks.report flops      # counted vs analytic FLOPs, side by side
    python -m benchmarks.report all

Options: ``--threads 1`` (default; ``--threads 1 2`` runs each table at both),
``--repeats 7``, ``--out results/bench``. Each table is also written as one result file
(:mod:`benchmarks.results`) to ``<out>/report/<table>-<N>thr.json``. The inputs and
measurements are the asv suite's (:mod:`benchmarks.cases`, :mod:`benchmarks.measure`);
this module only runs them at more points and prints. CPU only (the memory table's
workspace model is the CPU allocator's).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

from benchmarks.cases import FLEXLORA_MAX_D, SWEEP_MODULES, SWEEP_P, TABLE4, clear_caches, clients, stacks, \
    sweep_ranks, table4_stacks
from benchmarks.measure import count_flops, peak_memory, threads, timed
from benchmarks.measure.ablation import PAPER_TABLE4, VARIANT_NAMES, ablation_variant, variant_calls
from benchmarks.measure.memory import mib
from benchmarks.measure.methods import default_backend, default_factored, get_method
from benchmarks.results import check_out_dir, write_result

SCALING_RANKS = [16, 24, 32, 48, 64, 96, 128, 192, 256]
SCALING_DIMS = [256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]


def _timing(call, repeats):
    t = timed(call, repeats=repeats, warmup=1)
    return {"median_s": t.median, "q25_s": t.q25, "q75_s": t.q75, "n": len(t.samples), "threads": t.threads}


def _fmt_t(rec) -> str:
    return f"{rec['median_s'] * 1e3:9.1f} ms [{rec['q25_s'] * 1e3:.1f}, {rec['q75_s'] * 1e3:.1f}]"


# ------------------------------------------------------------------------- Table 4


def ablation(repeats: int) -> dict:
    from fraq.reference import relative_error

    B, A = table4_stacks()
    calls = variant_calls(B, A, TABLE4["p"])
    rows = {}
    ref = calls["adaptive-svd"]()
    for name in VARIANT_NAMES:
        call = calls[name]
        Bg, Ag = call()
        rows[name] = {**_timing(call, repeats), "peak_bytes": peak_memory(call).peak,
                      "flops": count_flops(call).total,
                      "gap_to_svd_mean": float(relative_error(ref[0], ref[1], Bg, Ag).mean())}
    print(f"Table 4: 56 x (8192 x 3072), 8 clients of rank 8, p = 8, float32, {torch.get_num_threads()} thread(s)")
    print(f"{'variant':14s} {'time (median [IQR])':>30s} {'peak MiB':>9s} {'GFLOP':>7s} {'gap to SVD':>10s}"
          f" | paper ms  MiB")
    for name, row in rows.items():
        paper = PAPER_TABLE4.get(name, (math.nan, math.nan))
        print(f"{name:14s} {_fmt_t(row):>30s} {mib(row['peak_bytes']):9.1f} {row['flops'] / 1e9:7.2f} "
              f"{row['gap_to_svd_mean']:10.2e} | {paper[0]:7.2f} {paper[1]:6.2f}")
    t = {k: v["median_s"] for k, v in rows.items()}
    mem = {k: v["peak_bytes"] for k, v in rows.items()}
    ratios = {
        "orientation_speedup": t["fixed-gram"] / t["adaptive-gram"],
        "gram_speedup": t["adaptive-svd"] / t["adaptive-gram"],
        "gram_memory_saving": 1 - mem["adaptive-gram"] / mem["adaptive-svd"],
        "library_over_variant": t["library"] / t["adaptive-gram"],
    }
    print(f"adaptive orientation: {ratios['orientation_speedup']:.2f}x faster than fixed   (paper 1.83x)")
    print(f"Gram vs coordinate SVD: {ratios['gram_speedup']:.2f}x faster, {100 * ratios['gram_memory_saving']:.1f}% "
          f"less memory   (paper 4.38x, 54.7%)")
    print(f"fraq.recompress / adaptive-gram variant: {ratios['library_over_variant']:.2f}x (prescaling, masking)")
    return {"rows": rows, "ratios": ratios}


# ------------------------------------------------------------------------- scaling


def _fit(xs, ys) -> tuple[float, float]:
    """Least-squares slope of log y on log x, and its standard error."""
    lx = torch.tensor([math.log(x) for x in xs], dtype=torch.float64)
    ly = torch.tensor([math.log(y) for y in ys], dtype=torch.float64)
    X = torch.stack([torch.ones_like(lx), lx], 1)
    coef = torch.linalg.lstsq(X, ly.unsqueeze(1)).solution.squeeze(1)
    resid = ly - X @ coef
    dof = max(len(xs) - 2, 1)
    cov = (resid.square().sum() / dof) * torch.linalg.inv(X.T @ X)
    return float(coef[1]), float(cov[1, 1].sqrt())


def scaling(repeats: int) -> dict:
    import fraq
    from fraq.flops import analytic_flops

    out = {}
    for sweep, points in (("r", SCALING_RANKS), ("d", SCALING_DIMS)):
        times, model = [], []
        for v in points:
            d, r = (768, v) if sweep == "r" else (v, 80)
            B, A = stacks(d, d, sweep_ranks(r), SWEEP_MODULES)
            p = min(SWEEP_P, r)
            times.append(_timing(lambda: fraq.recompress(B, A, rank=p), repeats))
            model.append(SWEEP_MODULES * analytic_flops("fraq", d, d, r, p, backend=default_backend(),
                                                        factored=default_factored()))
            clear_caches()
        med = [t["median_s"] for t in times]
        half = len(points) // 2
        fits = {"all": _fit(points, med), "upper": _fit(points[half:], med[half:]),
                "model_all": _fit(points, model), "model_upper": _fit(points[half:], model[half:])}
        out[sweep] = {"points": points, "times": times, "model_flops": model, "fits": fits}
        fixed = "d = D = 768" if sweep == "r" else "r = 80"
        print(f"FRAQ time vs {sweep} ({fixed}, {SWEEP_MODULES} modules, p = {SWEEP_P}, "
              f"{torch.get_num_threads()} thread(s)):")
        for v, t, f in zip(points, times, model):
            print(f"  {sweep} = {v:5d}  {_fmt_t(t)}  {f / t['median_s'] / 1e9:6.1f} GFLOP/s (model)")
        theory = "2 (D r^2 terms), rising toward 3 as r^3 terms grow" if sweep == "r" else "1 (linear in d = D)"
        print(f"  fitted exponent: {fits['all'][0]:.2f} +- {fits['all'][1]:.2f} over all, "
              f"{fits['upper'][0]:.2f} +- {fits['upper'][1]:.2f} over the upper half; model FLOPs "
              f"{fits['model_all'][0]:.2f} / {fits['model_upper'][0]:.2f}; complexity: {theory}")
    return out


# ------------------------------------------------------------------------- memory


def fraq_workspace(d: int, D: int, r: int, p: int, itemsize: int = 4) -> int:
    """The paper's workspace O((d + D) r + r^2) with constant 1 (Householder
    representation d r, R and G r^2 each counted once, H r D), plus the returned
    factors (d + D) p, in bytes."""
    return itemsize * ((d + D) * r + r * r + (d + D) * p)


def memory(repeats: int) -> dict:
    import fraq

    rows = []
    pts = [("d", v) for v in (256, 768, 2048, 4096)] + [("r", v) for v in (16, 64, 256)]
    for sweep, v in pts:
        d, r = (v, 80) if sweep == "d" else (768, v)
        p = min(SWEEP_P, r)
        B, A = stacks(d, d, sweep_ranks(r), SWEEP_MODULES)
        Bs, As = clients(d, d, sweep_ranks(r), SWEEP_MODULES)
        row = {"d": d, "r": r, "p": p, "workspace_per_matrix": fraq_workspace(d, d, r, p), "dD_bytes": 4 * d * d}
        row["fraq"] = peak_memory(lambda: fraq.recompress(B, A, rank=p)).peak / SWEEP_MODULES
        row["fraq_variant"] = peak_memory(lambda: ablation_variant(B, A, p)).peak / SWEEP_MODULES
        for name in ("florist", "flexlora"):
            if name == "flexlora" and d > FLEXLORA_MAX_D:
                row[name] = math.nan
                continue
            try:
                fn = get_method(name)
            except NotImplementedError:
                row[name] = math.nan
                continue
            row[name] = peak_memory(lambda: fn(list(Bs), list(As), rank=p)).peak / SWEEP_MODULES
        rows.append(row)
        clear_caches()
    print(f"Tensor peak memory per matrix ({SWEEP_MODULES} square d x d modules batched, float32, p = {SWEEP_P}):")
    print(f"{'d':>5s} {'r':>4s} {'workspace':>10s} {'FRAQ':>9s} {'ratio':>6s} {'pipeline':>9s} {'ratio':>6s} "
          f"{'FLoRIST':>9s} {'FlexLoRA':>9s} {'/ dD':>6s}   (KiB; workspace = 4((d+D)r + r^2 + (d+D)p))")
    for w in rows:
        k = 1024
        print(f"{w['d']:5d} {w['r']:4d} {w['workspace_per_matrix'] / k:10.1f} {w['fraq'] / k:9.1f} "
              f"{w['fraq'] / w['workspace_per_matrix']:6.2f} {w['fraq_variant'] / k:9.1f} "
              f"{w['fraq_variant'] / w['workspace_per_matrix']:6.2f} {w['florist'] / k:9.1f} "
              f"{w['flexlora'] / k:9.1f} {w['flexlora'] / w['dD_bytes']:6.2f}")
    print("FRAQ = fraq.recompress on the stacks; pipeline = the same steps without prescaling "
          "(benchmarks.measure.ablation, adaptive + Gram); FlexLoRA from the clients' factors.")
    return {"rows": rows}


# ------------------------------------------------------------------------- flops


def flops(repeats: int) -> dict:
    from fraq.flops import analytic_flops

    rows = []
    for d, r in ((768, 16), (768, 80), (768, 256), (4096, 80)):
        p = min(SWEEP_P, r)
        Bs, As = clients(d, d, sweep_ranks(r), SWEEP_MODULES)
        for name in ("fraq", "florist", "flexlora"):
            if name == "flexlora" and d > FLEXLORA_MAX_D:
                continue
            try:
                fn = get_method(name)
            except NotImplementedError:
                continue
            c = count_flops(lambda: fn(list(Bs), list(As), rank=p))
            rows.append({"method": name, "d": d, "r": r, "p": p, "counted": c.total, "uncounted": c.uncounted,
                         "full": SWEEP_MODULES * analytic_flops(name, d, d, r, p, backend=default_backend(),
                                                                factored=name == "fraq" and default_factored()),
                         "table5": SWEEP_MODULES * analytic_flops(name, d, d, r, p, model="table5")})
        clear_caches()
    print(f"FLOPs of {SWEEP_MODULES} square modules, counted (FlopCounterMode + LAPACK formulas) vs analytic:")
    print(f"{'method':9s} {'d':>5s} {'r':>4s} {'counted':>12s} {'full model':>12s} {'Table 5':>12s} "
          f"{'cnt/T5':>7s}  uncounted ops")
    for w in rows:
        print(f"{w['method']:9s} {w['d']:5d} {w['r']:4d} {w['counted']:12.4g} {w['full']:12.4g} {w['table5']:12.4g} "
              f"{w['counted'] / w['table5']:7.2f}  {', '.join(w['uncounted']) or '-'}")
    return {"rows": rows}


TABLES = {"ablation": ablation, "scaling": scaling, "memory": memory, "flops": flops}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("table", choices=[*TABLES, "all"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=os.path.join("results", "bench"))
    args = ap.parse_args(argv)
    check_out_dir(args.out)
    names = list(TABLES) if args.table == "all" else [args.table]
    for n in args.threads:
        with threads(n):
            for name in names:
                result = TABLES[name](args.repeats)
                path = write_result(args.out, "report", f"{name}-{n}thr", {"table": name, "repeats": args.repeats},
                                    result)
                print(f"-> {path}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
