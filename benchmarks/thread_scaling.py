"""More threads never make a call slower: each call at one torch thread and at t, interleaved.

``python -m benchmarks.thread_scaling [--threads T] [--blocks 6] [--calls recompress,stack,...]
[--team-work W] [--quick]`` times every case of the named calls (:data:`CALLS`) in blocks,
each block a run of calls at one thread then a run at T (default: torch's thread count
when more than one, else 2), and prints per case the median of the per-block ratios
T threads / one thread with the smallest and largest, and ``SLOWER`` where even the
smallest ratio is above 1.05 (a slowdown no block's noise explains). ``--team-work W``
adds to each block a run at T threads with ``fraq.internals.TEAM_WORK`` set to W (0:
every whole batch keeps the thread team) and its ratio (``other``), to compare the rule
with another threshold in the same run. A ratio is only as steady as the machine: take it with the load average well under
one, nothing else running.

The calls: ``recompress`` (:func:`fraq.recompress` at tau = 0.95 on a grid of batch
sizes, sides and stacked ranks around the Fig. 3 and Tables 1-3 shapes), ``stack``
(:func:`fraq.stack` of clients of rank 8 on the same grid), ``aggregate`` (FRAQ's
whole-model aggregation of RoBERTa-base's first two layers (one with ``--quick``), 10
clients of rank 8) and
``probe`` (that result's probe certificate).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch

from benchmarks._options import names_of, positive
from benchmarks.measure.timing import block_median

CALLS = ("recompress", "stack", "aggregate", "probe")
"""The calls this benchmark times (the module docstring)."""

GRID = [(nb, d, D, r) for nb, d, D in [(1, 768, 768), (2, 768, 768), (4, 768, 768), (1, 768, 3072), (1, 3072, 3072)]
        for r in (16, 32, 64, 128)]
"""(matrices, short side, long side, stacked rank) of the recompress and stack cases."""
QUICK = [(2, 64, 64, 16)]
"""The grid of ``--quick``: one small case, for a test of the command."""
SLOWER = 1.05
"""A case whose smallest per-block ratio exceeds this is reported ``SLOWER``."""


def cases(calls: list[str], quick: bool) -> list[tuple[str, Callable[[], object]]]:
    """(label, zero-argument call) for every case of ``calls``, inputs built once."""
    import fraq

    g = torch.Generator().manual_seed(0)
    out: list[tuple[str, Callable[[], object]]] = []
    for nb, d, D, r in QUICK if quick else GRID:
        B, A = torch.randn(nb, d, r, generator=g), torch.randn(nb, r, D, generator=g)
        if "recompress" in calls:
            out.append((f"recompress {nb} x {d} x {D}, r = {r}", lambda B=B, A=A: fraq.recompress(B, A, tau=0.95)))
        if "stack" in calls:
            Bs = [B[..., i:i + 8].contiguous() for i in range(0, r, 8)]
            As = [A[..., i:i + 8, :].contiguous() for i in range(0, r, 8)]
            out.append((f"stack {nb} x {d} x {D}, r = {r}", lambda Bs=Bs, As=As: fraq.stack(Bs, As)))
    if {"aggregate", "probe"} & set(calls):
        from benchmarks.cases import build_model
        from fraq.aggregators import get_aggregator

        layers = 1 if quick else 2
        model = build_model("roberta-base", layers=layers)
        ups = model.updates()
        agg = get_aggregator("fraq", tau=0.95)
        res = agg.aggregate(ups)
        if "aggregate" in calls:
            out.append((f"aggregate roberta-base, {layers} layers", lambda: agg.aggregate(ups)))
        if "probe" in calls:
            out.append(("probe certificate, the same", lambda: res.certificate(ups, method="probe")))
    return out


def _block(fn: Callable[[], object], threads: int, seconds: float) -> float:
    """The median time of ``fn`` over a block of at least ``seconds`` (and 5 calls) at ``threads``."""
    torch.set_num_threads(threads)
    return block_median(fn, seconds)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.thread_scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=positive, default=None,
                   help="the thread count compared with one (default torch's when more than one, else 2)")
    p.add_argument("--blocks", type=positive, default=6, help="interleaved blocks per case (default 6)")
    p.add_argument("--calls", type=names_of("--calls", CALLS), default=list(CALLS),
                   help=f"the calls to time, comma-separated (default {','.join(CALLS)})")
    p.add_argument("--team-work", type=float, default=None,
                   help="also time T threads with fraq.internals.TEAM_WORK at this value, in the same blocks")
    p.add_argument("--quick", action="store_true", help="one small case per call (a check of the command)")
    args = p.parse_args(argv)
    from fraq.internals import TEAM_WORK, team_work

    threads = args.threads or max(torch.get_num_threads(), 2)
    if threads < 2:
        p.error(f"--threads(={threads}) must be at least 2: it is compared with one thread")
    before = torch.get_num_threads()
    seconds = 0.01 if args.quick else 0.15
    other = "" if args.team_work is None else f"; also {threads} threads at TEAM_WORK {args.team_work:g} (other)"
    print(f"{threads} threads / 1 thread, median of {args.blocks} interleaved blocks [smallest, largest]; "
          f"TEAM_WORK {TEAM_WORK:g}{other}; torch {torch.__version__}")
    try:
        for label, fn in cases(args.calls, args.quick):
            ones, many, alts = [], [], []
            for _ in range(args.blocks):
                ones.append(_block(fn, 1, seconds))
                many.append(_block(fn, threads, seconds))
                if args.team_work is not None:
                    with team_work(args.team_work):
                        alts.append(_block(fn, threads, seconds))
            line = f"{label:40s} 1 thread {1e3 * statistics.median(ones):9.3f} ms  " + _ratio(ones, many)
            if alts:
                line += "   other " + _ratio(ones, alts)
            print(line + ("  SLOWER" if min(b / a for a, b in zip(ones, many)) > SLOWER else ""), flush=True)
    finally:
        torch.set_num_threads(before)


def _ratio(ones: list[float], many: list[float]) -> str:
    """``T-thread ms, ratio median [smallest, largest]`` of the per-block ratios."""
    ratios = [b / a for a, b in zip(ones, many)]
    return (f"{1e3 * statistics.median(many):9.3f} ms  ratio {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f}, {max(ratios):.3f}]")


if __name__ == "__main__":
    main()
