"""The exactness certificate's cost beside FRAQ's aggregation, interleaved in one run.

``python -m benchmarks.certificate_cost [--preset roberta-base] [--rounds 15] [--tau 0.95]``
builds the preset's seeded client factors (:func:`benchmarks.cases.build_model`), then
per round times one FRAQ aggregation (``Aggregator.aggregate``, batched by shape) and one
``result.certificate(updates)`` of that result, back to back, and prints both medians and
the median of the per-round ratios (certificate / aggregation). A ratio is only as steady
as the machine: the rounds interleave the two calls so that a change in load hits both.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.certificate_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="roberta-base")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--tau", type=float, default=0.95)
    p.add_argument("--layers", type=int, default=None, help="build the preset on this many layers (default all)")
    args = p.parse_args(argv)
    from benchmarks.cases import build_model
    from fraq.aggregators import get_aggregator

    model = build_model(args.preset, layers=args.layers)
    ups = model.updates()
    agg = get_aggregator("fraq", tau=args.tau)
    res = agg.aggregate(ups)
    res.certificate(ups)  # warm-up of both
    t_agg, t_cert = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        res = agg.aggregate(ups)
        t1 = time.perf_counter()
        cert = res.certificate(ups)
        t2 = time.perf_counter()
        t_agg.append(t1 - t0)
        t_cert.append(t2 - t1)
    ratios = [c / a for a, c in zip(t_agg, t_cert)]
    name, worst = cert.worst
    print(f"{args.preset}: {len(model.shapes)} modules x {model.preset.clients} clients, ranks {model.preset.ranks[0]}, "
          f"fraq tau={args.tau}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"aggregate    median {1e3 * statistics.median(t_agg):8.1f} ms")
    print(f"certificate  median {1e3 * statistics.median(t_cert):8.1f} ms")
    print(f"certificate / aggregate, median of {args.rounds} interleaved rounds: {statistics.median(ratios):.2f} "
          f"[{min(ratios):.2f}, {max(ratios):.2f}]")
    print(f"worst module {name}: {worst}")


if __name__ == "__main__":
    main()
