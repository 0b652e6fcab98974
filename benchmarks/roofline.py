"""``make bench-roofline``: FRAQ against its roofline and FLoRIST at 1 and 2 threads, one run.

    .venv/bin/python -m benchmarks.roofline [--backend B] [--gram G] [--presets P ...] [--repeats N] [--out DIR]
    .venv/bin/python -m benchmarks.roofline --compare METHOD [METHOD ...] [--presets P ...]
    .venv/bin/python -m benchmarks.roofline --clients SIZE [--shapes MxN ...] [--repeats N]

First the fixed cost, at 1 thread: the aten ops one ``fraq.recompress`` call dispatches
(one small matrix, :data:`SMALL`; the RoBERTa-base batch as one stack; counted with
:mod:`benchmarks.measure.ops`) and the small matrix's time against a minimal three-SVD
FLoRIST (:func:`florist_minimal`), interleaved. Then, for the RoBERTa-base and
LLaMA-3.2-3B presets (every adapted module,
:func:`benchmarks.cases.preset_stacks`, tau = 0.95), in one process, at 1 and then 2
torch threads:

- FRAQ: ``fraq.recompress`` of every module group's stacks (the backend from
  ``--backend`` or ``FRAQ_BENCH_BACKEND``, the Gram form from ``--gram``; default:
  ``recompress``'s own defaults), median time and IQR, against two limits:

  - its **roofline** (1 thread): every kernel the call runs, timed alone at its own
    shapes and data, the larger of its FLOP term and its bytes term at the copy
    bandwidth of its working-set size, summed
    (:func:`benchmarks.measure.kernels.kernel_roofs`; kernel times kept per machine); the
    report gives the share of it the call reaches;
  - its **GEMM-rate bound**: the paper's Eq. 12 leading-order FLOPs at the selected ranks,
    :math:`\\sum_i (2d + 3D) r^2 + 2 (d + D) r p_i` (per matrix, r replaced by min(d, r)),
    over the float32 GEMM rate measured in the same process at the same thread count (a
    2048^3 product, the better of before and after), and the same share for the counted
    FLOPs. It bounds a call only as far as every kernel could run at GEMM's rate, which
    the LAPACK reductions cannot;
- FLoRIST (:func:`fraq.aggregators.florist.florist_recompress`) on the same stacks, and
  its ratio to FRAQ at the same thread count and best against best;
- the whole-model aggregation ``get_aggregator("fraq")`` / ``("florist")`` on the same
  clients (stacking included).

It prints the 2-thread / 1-thread ratios, the load average before and after and the
project's targets (:data:`TARGETS`, met or not), and writes one result file per preset
(``<out>/roofline/<preset>-<backend>.json``). A benchmark: it prints and records, it
asserts nothing. CPU only (thread scaling is a CPU question).

``--compare`` times FRAQ configurations, each a method in the grammar of every front door
(:class:`fraq.methods.MethodSpec`: ``fraq:backend=householder``, ``fraq:backend=cholesky,gram=product``,
any of ``fraq.recompress``'s options but ``tau`` and ``rank``, which the run fixes), and
FLoRIST on the same stacks *interleaved*: each repeat runs every
configuration once, in turn, so a machine whose speed drifts between runs (shared or
virtual cores) slows them alike and their ratios hold. One result file per preset
(``<out>/roofline/<preset>-compare.json``).

``--clients SIZE`` times FRAQ and the dense path (FlexLoRA: B A formed, a thin SVD, the
same energy rule) interleaved at 1 thread at every point of the clients sweep of that size
(:func:`benchmarks.experiments.clients.ratios`; ``--shapes`` keeps some of its shapes),
prints each ratio, FRAQ's growth exponents in K before and after r = d, and the targets;
one result file (``<out>/roofline/clients-<size>.json``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

from benchmarks import cases
from benchmarks.measure import gemm_rate, threads, timed
from benchmarks.measure.kernels import RateTable, kernel_roofs, table_path
from benchmarks.results import check_out_dir, write_result
from benchmarks.sizes import SIZES
from fraq.internals import plain

PRESETS = ("roberta-base", "llama-3.2-3b")
THREAD_COUNTS = (1, 2)
TARGETS = {"gemm_bound_1t": {"roberta-base": 3.5, "llama-3.2-3b": 2.5}, "florist_1t": 3.0, "scaling_2t": 0.6,
           "small_over_florist": 1.2, "ops_small": 60, "ops_batch": 150, "clients_over_dense": 1.0,
           "clients_growth": 1.15}
"""The project's CPU targets: at 1 thread FRAQ within ``gemm_bound_1t`` of its GEMM-rate bound (per preset)
and FLoRIST at least ``florist_1t`` times slower; at 2 threads FRAQ and the whole-model aggregation
at most ``scaling_2t`` times their 1-thread time; one 64 x 48 matrix at most ``small_over_florist``
times a minimal three-SVD FLoRIST; at most ``ops_small`` / ``ops_batch`` aten ops per call (one small
matrix / the RoBERTa-base batch at 1 thread); along the clients sweep at 1 thread, from r = d on,
FRAQ at most ``clients_over_dense`` times the dense path and its time growing at most as
K^``clients_growth``."""

SMALL = (64, 48, 4, 4)
"""The fixed-cost problem: one m x n matrix, K clients of rank r_k (m, n, K, r_k)."""


def eq12_flops(d: int, D: int, r: int, ranks: torch.Tensor) -> float:
    """Eq. 12's leading-order FLOPs summed over matrices of one shape: (2d + 3D) r s + 2 (d + D) s p_i."""
    s = min(d, r)
    p = ranks.reshape(-1).double()
    return float(((2 * d + 3 * D) * r * s + 2 * (d + D) * s * p).sum())


def _summary(t) -> dict:
    """The one timing payload (:meth:`benchmarks.measure.Timing.as_dict`, seconds)."""
    return t.as_dict()


def _med_ms(s: dict) -> float:
    return s["median"] * 1e3


def measure_preset(name: str, backend: str | None, repeats: int, log=print, gram: str | None = None) -> dict:
    """Every measurement of one preset at each thread count (see the module docstring)."""
    import fraq
    from benchmarks.cases import build_model
    from fraq.aggregators import get_aggregator
    from fraq.aggregators.florist import florist_recompress
    from fraq.presets import get_preset

    preset = get_preset(name)
    stacks = [(g, B, A) for g, B, A in cases.preset_stacks(name)]
    kw = ({} if backend is None else {"backend": backend}) | ({} if gram is None else {"gram": gram})

    def fraq_call():
        return [fraq.recompress(B, A, tau=cases.TAU, **kw) for _, B, A in stacks]

    def florist_call():
        return [florist_recompress(B, A, tau=cases.TAU) for _, B, A in stacks]

    results = fraq_call()
    used = results[0].backend
    gram_used = results[0].info.get("gram", "product")
    flops = sum(eq12_flops(min(g.m, g.n), max(g.m, g.n), B.shape[-1], res.rank)
                for (g, B, _), res in zip(stacks, results))
    ranks = torch.cat([res.rank.reshape(-1).double() for res in results])
    updates = build_model(preset).updates()
    whole = {m: get_aggregator(m, **({} if m == "florist" else {"tau": cases.TAU, **kw})) for m in ("fraq", "florist")}
    out = {"backend": used, "gram": gram_used,
           "product_gram_count": sum(res.info.get("product_gram_count", 0) for res in results), "modules": preset.modules, "clients": preset.clients, "stacked_rank": sum(preset.ranks),
           "rank_mean": float(ranks.mean()), "flops_eq12": flops, "threads": {}}
    with threads(1):  # the per-kernel roofs see the calling thread's kernels: one torch thread
        table = RateTable(table_path())
        out["roofs"] = {m: kernel_roofs(call, table=table).as_dict() for m, call in
                        (("fraq", fraq_call), ("florist", florist_call))}
    for n in THREAD_COUNTS:
        with threads(n):
            rate = gemm_rate(2048)
            row = {"fraq": _summary(timed(fraq_call, repeats=repeats, warmup=1)),
                   "florist": _summary(timed(florist_call, repeats=repeats, warmup=1))}
            for m, agg in whole.items():
                row[f"whole_{m}"] = _summary(timed(lambda agg=agg: agg.aggregate(updates), repeats=max(3, repeats // 2),
                                                   warmup=1))
            rate = max(rate, gemm_rate(2048))
        row["gemm_gflops"] = rate / 1e9
        row["gemm_bound_ms"] = flops / rate * 1e3
        row["fraq_over_gemm_bound"] = _med_ms(row["fraq"]) / row["gemm_bound_ms"]
        if n == 1:
            for m in ("fraq", "florist"):
                r = out["roofs"][m]
                row[f"{m}_roofline_ms"] = r["roof"] * 1e3
                row[f"{m}_over_roofline"] = _med_ms(row[m]) / row[f"{m}_roofline_ms"]
                row[f"{m}_pct_roofline"] = 100 * row[f"{m}_roofline_ms"] / _med_ms(row[m])
                row[f"{m}_pct_gemm_bound"] = 100 * r["gemm_bound"] * 1e3 / _med_ms(row[m])
        row["florist_over_fraq"] = _med_ms(row["florist"]) / _med_ms(row["fraq"])
        row["whole_florist_over_fraq"] = _med_ms(row["whole_florist"]) / _med_ms(row["whole_fraq"])
        out["threads"][n] = row
        log(f"  {n} thread(s) done, load average {os.getloadavg()[0]:.2f}")
    t = out["threads"]
    fraq_best = min(THREAD_COUNTS, key=lambda n: _med_ms(t[n]["fraq"]))
    florist_best = min(THREAD_COUNTS, key=lambda n: _med_ms(t[n]["florist"]))
    out.update(
        fraq_2t_over_1t=_med_ms(t[2]["fraq"]) / _med_ms(t[1]["fraq"]),
        florist_2t_over_1t=_med_ms(t[2]["florist"]) / _med_ms(t[1]["florist"]),
        whole_fraq_2t_over_1t=_med_ms(t[2]["whole_fraq"]) / _med_ms(t[1]["whole_fraq"]),
        fraq_best_threads=fraq_best, florist_best_threads=florist_best,
        florist_best_over_fraq_best=_med_ms(t[florist_best]["florist"]) / _med_ms(t[fraq_best]["fraq"]))
    return out


def florist_minimal(B: torch.Tensor, A: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FLoRIST reduced to its three SVDs (B, A, the r x r core) and the energy rule: the
    least a baseline of that shape can cost, the yardstick of FRAQ's fixed cost."""
    import fraq

    U1, S1, V1h = torch.linalg.svd(B, full_matrices=False)
    U2, S2, V2h = torch.linalg.svd(A, full_matrices=False)
    U, S, Vh = torch.linalg.svd((S1.unsqueeze(-1) * V1h) @ (U2 * S2.unsqueeze(-2)), full_matrices=False)
    p = int(fraq.select_rank(S.square(), tau).max())
    return U1 @ (U[..., :p] * S[..., :p].unsqueeze(-2)), Vh[..., :p, :] @ V2h


def fixed_cost(repeats: int) -> dict:
    """Ops per call (one small matrix; the RoBERTa-base batch as one (36, 768, 80) stack) and
    the small matrix's time against :func:`florist_minimal`, interleaved, at 1 thread."""
    import fraq
    from benchmarks.measure import round_robin
    from benchmarks.measure.ops import count_ops
    from fraq.synthetic import lora_clients

    m, n, k, rk = SMALL
    B, A = fraq.stack(*lora_clients(m, n, [rk] * k, seed=0))
    Bb, Ab = fraq.stack(*lora_clients(768, 768, [8] * 10, batch=(36,), seed=0))
    with threads(1):
        ops_small = count_ops(lambda: fraq.recompress(B, A, tau=cases.TAU)).total
        ops_batch = count_ops(lambda: fraq.recompress(Bb, Ab, tau=cases.TAU)).total
        t = round_robin({"fraq": lambda: fraq.recompress(B, A, tau=cases.TAU),
                         "florist_minimal": lambda: florist_minimal(B, A, cases.TAU)}, 20 * repeats)
    return {"shape": list(SMALL), "ops_small": ops_small, "ops_batch": ops_batch,
            "fraq": _summary(t["fraq"]), "florist_minimal": _summary(t["florist_minimal"]),
            "fraq_over_florist_minimal": t["fraq"].median / t["florist_minimal"].median}


def fixed_cost_report(rec: dict) -> list[str]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    m, n, k, rk = rec["shape"]
    ratio = rec["fraq_over_florist_minimal"]
    return [f"fixed cost, 1 thread: one {m} x {n} matrix (K = {k}, r_k = {rk}): FRAQ {rec['fraq']['median'] * 1e6:.0f} us"
            f" [{rec['fraq']['q25'] * 1e6:.0f}, {rec['fraq']['q75'] * 1e6:.0f}], minimal FLoRIST "
            f"{rec['florist_minimal']['median'] * 1e6:.0f} us, ratio {ratio:.2f} (target <= "
            f"{TARGETS['small_over_florist']}: {verdict(ratio <= TARGETS['small_over_florist'])})",
            f"  aten ops per call: {rec['ops_small']} (target <= {TARGETS['ops_small']}: "
            f"{verdict(rec['ops_small'] <= TARGETS['ops_small'])}); RoBERTa-base batch {rec['ops_batch']} "
            f"(target <= {TARGETS['ops_batch']}: {verdict(rec['ops_batch'] <= TARGETS['ops_batch'])})"]


def compare_preset(name: str, specs: list, repeats: int) -> dict:
    """Interleaved medians of every FRAQ configuration (:class:`fraq.methods.MethodSpec`, its
    options ``fraq.recompress``'s) and FLoRIST, at each thread count."""
    import fraq
    from benchmarks.measure import round_robin
    from fraq.aggregators.florist import florist_recompress

    stacks = [(B, A) for _, B, A in cases.preset_stacks(name)]
    calls = {str(s): (lambda kw=s.kwargs: [fraq.recompress(B, A, tau=cases.TAU, **kw) for B, A in stacks])
             for s in specs}
    calls["florist"] = lambda: [florist_recompress(B, A, tau=cases.TAU) for B, A in stacks]
    out = {"threads": {}}
    for n in THREAD_COUNTS:
        with threads(n):
            out["threads"][n] = {k: _summary(t) for k, t in round_robin(calls, repeats).items()}
    return out


COMPARED = ("backend", "gram", "eig_dtype", "eigensolver", "pipeline")
"""The options ``--compare`` takes: ``fraq.recompress``'s, but ``tau`` and ``rank``."""


def compare_specs(texts: list[str]) -> list:
    """``--compare``'s methods as :class:`fraq.methods.MethodSpec`, each FRAQ with options of
    :data:`COMPARED` only, checked by the aggregator's own rules (its messages); ValueError
    naming the text otherwise."""
    from fraq.aggregators import get_aggregator
    from fraq.methods import MethodSpec

    specs = []
    for text in texts:
        if text.count(":") == 1 and "=" not in text and not text.startswith("fraq:"):
            b, g = text.split(":")
            raise ValueError(f"{text!r}: a configuration is a method, e.g. 'fraq:backend={b},gram={g}'")
        try:
            spec = MethodSpec.parse(text)
        except ValueError as e:
            raise ValueError(f"{text!r}: {e}") from None
        if spec.name != "fraq" or set(spec.kwargs) - set(COMPARED):
            raise ValueError(f"{text!r}: expected fraq with options among {list(COMPARED)} "
                             f"(tau is {cases.TAU}), e.g. 'fraq:backend=cholesky,gram=product'")
        try:
            get_aggregator("fraq", **spec.kwargs)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{text!r}: {e}") from None
        specs.append(spec)
    return specs


def compare_report(name: str, rec: dict) -> list[str]:
    t = rec["threads"]
    keys = list(t[THREAD_COUNTS[0]])
    lines = [f"{name}: interleaved medians [IQR], ms" + "".join(f" | {n} thr" for n in THREAD_COUNTS)]
    for k in keys:
        lines.append(f"  {k:28s}" + "".join(f" | {_ms(t[n][k]):>26}" for n in THREAD_COUNTS))
    return lines


def _ms(s: dict) -> str:
    return f"{s['median'] * 1e3:8.1f} [{s['q25'] * 1e3:.1f}, {s['q75'] * 1e3:.1f}]"


def clients_report(rec: dict) -> list[str]:
    """The printed summary of :func:`benchmarks.experiments.clients.ratios`, with its targets."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    def fit(s: dict, side: str) -> str:  # NaN: fewer than two points on that side of r = d
        a = s[f"growth_{side}"]
        return "(one point)" if math.isnan(a) else f"K^{a:.2f}"

    over, grow = TARGETS["clients_over_dense"], TARGETS["clients_growth"]
    lines = [f"clients sweep ({rec['size']}), {rec['threads']} thread(s), {rec['method']} / {rec['dense']}, medians of "
             f"{rec['repeats']} interleaved:"]
    for s in rec["shapes"]:
        below = s["below_half"]
        above = "" if math.isnan(s["growth_above"]) else f" (target <= {grow:g}: {verdict(s['growth_above'] <= grow)})"
        worst = "" if math.isnan(s["worst_above"]) else f" (target <= {over:g}: {verdict(s['worst_above'] <= over)})"
        lines.append(f"  {s['m']}x{s['n']}: time ~ {fit(s, 'below')} up to r = d, {fit(s, 'above')} from r = d{above}; "
                     f"largest ratio at r >= d {s['worst_above']:.2f}{worst}"
                     + (f"; below r = d/2 {min(below):.2f}-{max(below):.2f}" if below else ""))
    return lines


def report(name: str, rec: dict) -> list[str]:
    """The printed lines for one preset's record, with the targets (:data:`TARGETS`)."""
    t = rec["threads"]
    lines = [f"{name}: {rec['modules']} modules, K = {rec['clients']}, r = {rec['stacked_rank']}, tau = {cases.TAU}, "
             f"mean p = {rec['rank_mean']:.1f}, backend {rec['backend']}, gram {rec['gram']}, Eq. 12 {rec['flops_eq12'] / 1e9:.2f} GFLOP",
             f"  {'thr':>3} {'GEMM GFLOP/s':>12} {'GEMM bound ms':>13} {'FRAQ ms [IQR]':>26} {'x bound':>7} "
             f"{'FLoRIST ms [IQR]':>26} {'/FRAQ':>6} | {'whole fraq ms':>26} {'whole florist ms':>26} {'/fraq':>6}"]
    for n, row in t.items():
        lines.append(f"  {n:>3} {row['gemm_gflops']:12.1f} {row['gemm_bound_ms']:13.2f} {_ms(row['fraq']):>26} "
                     f"{row['fraq_over_gemm_bound']:7.2f} {_ms(row['florist']):>26} {row['florist_over_fraq']:6.2f} | "
                     f"{_ms(row['whole_fraq']):>26} {_ms(row['whole_florist']):>26} "
                     f"{row['whole_florist_over_fraq']:6.2f}")
    one = t[1]
    for m in ("fraq", "florist"):
        r = rec["roofs"][m]
        lines.append(f"  1 thread, {m}: roofline {r['roof'] * 1e3:.2f} ms ({r['kernel_count']} kernels: FLOP terms "
                     f"{r['flop_roof'] * 1e3:.2f} ms, bytes terms {r['bytes_roof'] * 1e3:.2f} ms), reached "
                     f"{one[f'{m}_pct_roofline']:.0f}% of it and {one[f'{m}_pct_gemm_bound']:.0f}% of its GEMM-rate bound "
                     f"({r['flops'] / 1e9:.2f} counted GFLOP)")

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    roof = TARGETS["gemm_bound_1t"].get(name)
    scale = TARGETS["scaling_2t"]
    lines += [
        f"  FRAQ 2 thr / 1 thr = {rec['fraq_2t_over_1t']:.2f} (target <= {scale}: "
        f"{verdict(rec['fraq_2t_over_1t'] <= scale)}); whole-model fraq 2/1 = {rec['whole_fraq_2t_over_1t']:.2f} "
        f"(target <= {scale}: {verdict(rec['whole_fraq_2t_over_1t'] <= scale)}); FLoRIST 2/1 = "
        f"{rec['florist_2t_over_1t']:.2f}",
        f"  1 thread: FRAQ {t[1]['fraq_over_gemm_bound']:.2f}x its Eq. 12 GEMM-rate bound"
        + ("" if roof is None else f" (target <= {roof:g}: {verdict(t[1]['fraq_over_gemm_bound'] <= roof)})")
        + f", FLoRIST {t[1]['florist_over_fraq']:.2f}x FRAQ (target >= {TARGETS['florist_1t']:g}: "
        f"{verdict(t[1]['florist_over_fraq'] >= TARGETS['florist_1t'])})",
        f"  best vs best: FLoRIST at {rec['florist_best_threads']} thr / FRAQ at {rec['fraq_best_threads']} thr = "
        f"{rec['florist_best_over_fraq_best']:.2f}",
    ]
    return lines


def _parser() -> argparse.ArgumentParser:
    from fraq.internals import GRAMS

    ap = argparse.ArgumentParser(prog="python -m benchmarks.roofline", description=plain(__doc__.split("\n")[0]))
    ap.add_argument("--backend", default=os.environ.get("FRAQ_BENCH_BACKEND") or None,
                    help="FRAQ backend to measure (default: FRAQ_BENCH_BACKEND, else recompress's default)")
    ap.add_argument("--gram", default=None, choices=list(GRAMS),
                    help="FRAQ's Gram form (default: recompress's default)")
    ap.add_argument("--compare", nargs="+", metavar="METHOD",
                    help="time these FRAQ configurations (fraq:backend=cholesky,gram=product) and FLoRIST "
                         "interleaved instead (see above)")
    ap.add_argument("--clients", metavar="SIZE", choices=list(SIZES),
                    help="time FRAQ and the dense path interleaved along the clients sweep of SIZE instead (see above)")
    ap.add_argument("--shapes", nargs="+", metavar="MxN", help="with --clients: only these shapes of the sweep")
    ap.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(cases.PRESET_NAMES))
    ap.add_argument("--repeats", type=int, default=11, help="timed repeats per measurement (default 11)")
    ap.add_argument("--out", default="results/bench", help="results directory (<out>/roofline/)")
    return ap


def _checked(ap: argparse.ArgumentParser, args) -> list:
    """Every argument checked before anything is measured (argparse's error, naming it);
    returns ``--compare``'s methods."""
    import fraq

    if args.backend is not None and args.backend not in fraq.BACKENDS:
        ap.error(f"--backend / FRAQ_BENCH_BACKEND (={args.backend!r}) is not one of {sorted(fraq.BACKENDS)}")
    if args.repeats < 1:
        ap.error(f"--repeats(={args.repeats}) must be >= 1")
    if args.shapes and not args.clients:
        ap.error("--shapes needs --clients")
    known = [f"{m}x{n}" for m, n, _ in SIZES[args.clients]["clients"]["shapes"]] if args.clients else []
    bad = [x for x in args.shapes or [] if x not in known]
    if bad:
        ap.error(f"--shapes {bad[0]!r} is not a shape of the {args.clients} clients sweep ({', '.join(known)})")
    check_out_dir(args.out)
    try:
        table_path()  # the kernel table can be saved (FRAQ_KERNEL_TABLE), before anything is measured
        return compare_specs(args.compare or [])
    except ValueError as e:
        ap.error(f"--compare {e}" if args.compare and str(e).startswith("'") else str(e))


def _load(label: str, load=None) -> str:
    load = os.getloadavg() if load is None else load
    return f"{label} {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def _clients(args, load) -> None:
    """``--clients``: FRAQ against the dense path along the clients sweep, one result file."""
    from benchmarks.experiments import clients

    with threads(1):
        rec = clients.ratios(args.clients, repeats=args.repeats, shapes=args.shapes, log=lambda s: print(s, flush=True))
    rec.update(load_average_before=list(load), load_average_after=list(os.getloadavg()))
    path = write_result(args.out, "roofline", f"clients-{args.clients}",
                        {"size": args.clients, "shapes": args.shapes, "repeats": args.repeats}, rec)
    print("\n".join(clients_report(rec)) + f"\n  -> {path}", flush=True)


def _compare(args, specs: list, load) -> None:
    """``--compare``: per preset, the configurations and FLoRIST interleaved, one result file each."""
    for name in args.presets:
        print(f"{name}: measuring ...", flush=True)
        rec = compare_preset(name, specs, args.repeats)
        rec.update(load_average_before=list(load), load_average_after=list(os.getloadavg()))
        path = write_result(args.out, "roofline", f"{name}-compare",
                            {"preset": name, "configs": [str(s) for s in specs], "tau": cases.TAU,
                             "repeats": args.repeats, "thread_counts": list(THREAD_COUNTS)}, rec)
        print("\n".join(compare_report(name, rec)) + f"\n  -> {path}", flush=True)


def _roofline(args, load) -> None:
    """The default run: the fixed cost, then per preset FRAQ against its roofline and FLoRIST."""
    rec = fixed_cost(args.repeats)
    path = write_result(args.out, "roofline", "fixed-cost", {"shape": list(SMALL), "tau": cases.TAU,
                                                             "repeats": 20 * args.repeats}, rec)
    print("\n".join(fixed_cost_report(rec)) + f"\n  -> {path}", flush=True)
    for name in args.presets:
        print(f"{name}: measuring ...", flush=True)
        rec = measure_preset(name, args.backend, args.repeats, log=lambda s: print(s, flush=True), gram=args.gram)
        rec["load_average_before"] = list(load)
        rec["load_average_after"] = list(os.getloadavg())
        key = f"{name}-{rec['backend']}" + ("" if args.gram is None else f"-{rec['gram']}")
        path = write_result(args.out, "roofline", key,
                            {"preset": name, "backend": rec["backend"], "gram": rec["gram"], "tau": cases.TAU,
                             "repeats": args.repeats, "thread_counts": list(THREAD_COUNTS)}, rec)
        print("\n".join(report(name, rec)) + f"\n  -> {path}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from fraq.internals import machine_record

    ap = _parser()
    args = ap.parse_args(argv)
    specs = _checked(ap, args)
    machine = machine_record()
    load = os.getloadavg()
    print(f"bench-roofline: {machine['cpu']}, {machine['cores']} cores, BLAS {machine['blas']}, torch "
          f"{machine['torch']}; float32; torch threads {' and '.join(map(str, THREAD_COUNTS))} "
          f"(default here {machine['threads']}); {_load('load average', load)}", flush=True)
    if args.clients:
        _clients(args, load)
    elif specs:
        _compare(args, specs, load)
    else:
        _roofline(args, load)
    print(_load("load average after:"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
