"""The exactness certificates' cost beside FRAQ's aggregation, interleaved in one run.

``python -m benchmarks.certificate_cost [--preset roberta-base] [--rounds 15] [--tau 0.95]
[--methods gram,probe] [--layers L] [--source uploads|buffer]`` builds the preset's seeded client factors
(:func:`benchmarks.cases.build_model`), then per round times one FRAQ aggregation
(``Aggregator.aggregate``, batched by shape; with ``--source buffer`` the round buffer's
``aggregate()``, the uploads added to a fresh buffer before each round, untimed, as they
arrive) and, back to back, each certificate of that
result (``result.certificate(updates, method=...)``: ``gram``, exact with a rounding
bound; ``probe``, 8 Gaussian probes with its defaults, a bound with probability 0.999),
and prints the medians and, per certificate, the median of the per-round ratios
(certificate / aggregation) with the smallest and largest. The probe certificate's
target is a tenth of the aggregation (docs/library.md, "The probe certificate"). A ratio
is only as steady as the machine: the rounds interleave the calls so that a change in
load hits every one of them, each round's certificates after its aggregation in a balanced
order (:func:`benchmarks.measure.timing.balanced_order`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks._options import names_of, positive
from benchmarks.measure.timing import balanced_order

METHODS = ("gram", "probe")
"""The certificates :meth:`fraq.aggregators.AggregationResult.certificate` computes."""
SOURCES = ("uploads", "buffer")
"""Where a round's uploads are held: the list ``aggregate`` takes, or a round buffer."""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.certificate_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="roberta-base")
    p.add_argument("--rounds", type=positive, default=15)
    p.add_argument("--tau", type=float, default=0.95)
    p.add_argument("--methods", type=names_of("--methods", METHODS), default=list(METHODS),
                   help=f"the certificates to time, comma-separated (default {','.join(METHODS)})")
    p.add_argument("--layers", type=positive, default=None, help="build the preset on this many layers (default all)")
    p.add_argument("--source", choices=SOURCES, default="uploads",
                   help="uploads: aggregate(list) and certify against the list; buffer: each round's uploads "
                        "added (untimed) to a round buffer, its aggregate() timed and certified from its stacks")
    args = p.parse_args(argv)
    from benchmarks.cases import build_model
    from fraq.aggregators import get_aggregator

    model = build_model(args.preset, layers=args.layers)
    ups = model.updates()
    agg = get_aggregator("fraq", tau=args.tau)

    def source():  # what one round aggregates and certifies: the list, or a buffer holding it
        if args.source == "uploads":
            return ups
        buf = agg.open_round(model.shapes, clients=len(ups), ranks=list(model.preset.ranks))
        for u in ups:
            buf.add(u)
        return buf

    def aggregate(src):
        return agg.aggregate(src) if args.source == "uploads" else src.aggregate()

    src = source()
    res = aggregate(src)
    for method in args.methods:  # warm-up of every call
        res.certificate(src, method=method)
    t_agg: list[float] = []
    t_cert: dict[str, list[float]] = {m: [] for m in args.methods}
    certs = {}
    for j in range(args.rounds):
        src = source()
        t0 = time.perf_counter()
        res = aggregate(src)
        t_agg.append(time.perf_counter() - t0)
        for i in balanced_order(len(args.methods), j):  # the certificates after each other alike
            method = args.methods[i]
            t1 = time.perf_counter()
            certs[method] = res.certificate(src, method=method)
            t_cert[method].append(time.perf_counter() - t1)
    print(f"{args.preset}: {len(model.shapes)} modules x {model.preset.clients} clients, ranks {model.preset.ranks[0]}, "
          f"fraq tau={args.tau}, from the {args.source}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"aggregate            median {1e3 * statistics.median(t_agg):8.1f} ms")
    for method in args.methods:
        ratios = [c / a for a, c in zip(t_agg, t_cert[method])]
        name, worst = certs[method].worst
        print(f"certificate ({method:5s}) median {1e3 * statistics.median(t_cert[method]):8.1f} ms; "
              f"/ aggregate, median of {args.rounds} interleaved rounds: {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}, {max(ratios):.3f}]; worst module {name}: {worst}")


if __name__ == "__main__":
    main()
