"""A basis applied to p kept directions, written row-major or column-major, interleaved.

``python -m benchmarks.tall_products [--blocks 6] [--threads 1] [--quick]`` times, for each
case (:data:`CASES`: dtype and the product's sides m x k times k x p, a batch of two), the
product ``M @ N`` as torch writes it (row-major) and
:func:`fraq.internals.tall_product` (the same product written column-major), in blocks
alternating the two, and prints per case both medians and the median of the per-block
ratios column-major / row-major with the smallest and largest. ``SLOWER`` marks a case
where even the smallest ratio is above 1.05: the column-major product slower than
torch's beyond every block's noise, which on MKL's AVX2 and AVX-512 paths does not
happen (docs/performance.md, "Tall products"; MKL's generic COMPATIBLE path is another
matter). M is held column-major, as a LAPACK ``Q`` or a stacked
B factor is, N row-major, as a small eigen- or singular-vector block is. A ratio is only
as steady as the machine: take it with the load average well under one, nothing else
running.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks._options import positive
from benchmarks.measure.timing import block_median

CASES = [(dtype, m, k, p) for dtype in (torch.float32, torch.float64)
         for m, k, p in [(768, 16, 8), (768, 64, 8), (768, 256, 8), (3072, 64, 8), (768, 64, 18), (768, 64, 64),
                         (768, 256, 128)]]
"""(dtype, m, k, p): Fig. 3's and Tables 1-3's bases (d = 768 or 3072, stacked rank 16-256)
applied to p = 8 kept directions, rSVD's q = 18, and p = k, where the row-major product is
at its best."""
QUICK = [(torch.float32, 64, 8, 2)]
"""The cases of ``--quick``: one small product, for a test of the command."""
SLOWER = 1.05
"""A case whose smallest per-block ratio exceeds this is reported ``SLOWER``."""


def operands(dtype: torch.dtype, m: int, k: int, p: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """M (2, m, k) column-major and N (2, k, p) row-major, Gaussian."""
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(2, k, m, generator=g, dtype=dtype).mT
    return M, torch.randn(2, k, p, generator=g, dtype=dtype)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tall_products", description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=positive, default=6, help="interleaved blocks per case (default 6)")
    p.add_argument("--threads", type=positive, default=1, help="torch threads for every product (default 1)")
    p.add_argument("--quick", action="store_true", help="one small case (a check of the command)")
    args = p.parse_args(argv)
    from fraq.internals import tall_product

    before = torch.get_num_threads()
    seconds = 0.01 if args.quick else 0.1
    print(f"column-major / row-major, median of {args.blocks} interleaved blocks [smallest, largest]; "
          f"{args.threads} thread(s); torch {torch.__version__}")
    try:
        torch.set_num_threads(args.threads)
        for dtype, m, k, pp in QUICK if args.quick else CASES:
            M, N = operands(dtype, m, k, pp)
            rows, cols = [], []
            for _ in range(args.blocks):
                rows.append(block_median(lambda: M @ N, seconds))
                cols.append(block_median(lambda: tall_product(M, N), seconds))
            ratios = [c / r for r, c in zip(rows, cols)]
            label = f"{str(dtype).removeprefix('torch.')} 2 x ({m} x {k}) @ ({k} x {pp})"
            print(f"{label:36s} row-major {1e6 * statistics.median(rows):9.1f} us  column-major "
                  f"{1e6 * statistics.median(cols):9.1f} us  ratio {statistics.median(ratios):.3f} "
                  f"[{min(ratios):.3f}, {max(ratios):.3f}]" + ("  SLOWER" if min(ratios) > SLOWER else ""),
                  flush=True)
    finally:
        torch.set_num_threads(before)


if __name__ == "__main__":
    main()
