"""Should the r x r eigenproblem of float32 FRAQ run in float64? A measurement.

Runs float32 ``fraq.recompress`` with ``eig_dtype=float32`` and ``eig_dtype=float64`` on
the same inputs and compares, against float64 references:

- the product's relative error above the float64 Eckart-Young optimum (at the rank
  selected), on LoRA-like stacks (RoBERTa-base shape) and on rank-64 aggregates with
  condition numbers 1 .. 1e10 at output ranks 32 and 64 (the paper's Fig. 4, right);
- the error of the singular values, |sigma_i^2 - sigma_ref_i^2| / sigma_1^2;
- whether the energy rule picks the float64 rank;
- the time of the batched eigensolver alone (36 Gram matrices of 80 x 80) and of the
  whole recompression.

Inputs from :mod:`benchmarks.cases` (RoBERTa-base-shaped clients,
:func:`~benchmarks.cases.conditioned`); one result file per row under
``<out>/eig_precision/`` (:mod:`benchmarks.results`).

Run: ``.venv/bin/python -m benchmarks.run eig_precision`` or
``.venv/bin/python -m benchmarks.experiments.eig_precision [--out results]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import fraq
from benchmarks import cases
from benchmarks.measure import timed
from benchmarks.results import check_out_dir, write_result
from fraq.reference import optimal_error, reference_svd, relative_error

F32, F64 = torch.float32, torch.float64


def _accuracy(B, A, res, p_ref=None):
    _, S, _ = reference_svd(B, A)
    excess = (relative_error(B, A, res.B, res.A) - optimal_error(B, A, res.rank)).max().item()
    s = res.singular_values.shape[-1]
    sv_err = ((res.singular_values.double().square() - S[..., :s].square()).abs()
              / S[..., :1].square()).max().item()
    row = {"excess_max": excess, "sv2_err_max": sv_err}
    if p_ref is not None:
        row["rank_matches_f64"] = bool(torch.equal(torch.as_tensor(res.rank), torch.as_tensor(p_ref)))
    return row


def lora_case(tau: float) -> list[dict]:
    Bs, As = cases.clients(768, 768, (8,) * 10, 36, 0)
    B, A = fraq.stack(list(Bs), list(As), scales=[2.0] * 10)
    ref = fraq.recompress(B.double(), A.double(), tau=tau)
    rows = []
    for edt in (F32, F64):
        res = fraq.recompress(B, A, tau=tau, eig_dtype=edt)
        t = timed(lambda: fraq.recompress(B, A, tau=tau, eig_dtype=edt), repeats=7)
        rows.append({"case": f"lora roberta tau={tau}", "eig_dtype": str(edt).split(".")[-1],
                     "recompress_ms": t.median * 1e3, **_accuracy(B, A, res, ref.rank)})
    return rows


def condition_case(kappa: float, p: int) -> list[dict]:
    Bs, As, _ = cases.conditioned(768, 768, 64, kappa, seed=int(kappa) % 1000 + p)
    B, A = Bs[0][0], As[0][0]
    rows = []
    for edt in (F32, F64):
        res = fraq.recompress(B, A, rank=p, eig_dtype=edt)
        rows.append({"case": f"kappa={kappa:.0e} p={p}", "eig_dtype": str(edt).split(".")[-1],
                     **_accuracy(B, A, res)})
    return rows


def eig_timing() -> list[dict]:
    H = torch.randn(36, 80, 768, generator=torch.Generator().manual_seed(0))
    G = H @ H.mT
    rows = []
    for edt in (F32, F64):
        Gd = G.to(edt)
        t = timed(lambda: torch.linalg.eigh(Gd), repeats=9)
        rows.append({"case": "eigh 36 x (80 x 80)", "eig_dtype": str(edt).split(".")[-1],
                     "eigh_ms": t.median * 1e3, "eigh_iqr_ms": t.iqr * 1e3})
    return rows


def run(out) -> list[dict]:
    """Every row, each written as one result file under ``out``."""
    rows = lora_case(0.8) + lora_case(0.95)
    for kappa in (1.0, 1e2, 1e4, 1e6, 1e8, 1e10):
        for p in (32, 64):
            rows += condition_case(kappa, p)
    rows += eig_timing()
    for r in rows:
        write_result(out, "eig_precision", f"{r['case']}-{r['eig_dtype']}".replace(" ", "_"),
                     {"case": r["case"], "eig_dtype": r["eig_dtype"]},
                     {k: v for k, v in r.items() if k not in ("case", "eig_dtype")})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results"), help="results directory (<out>/eig_precision/)")
    args = ap.parse_args(argv)
    check_out_dir(args.out)
    rows = run(args.out)
    print(f"threads={torch.get_num_threads()} torch={torch.__version__}")
    keys = ["case", "eig_dtype", "excess_max", "sv2_err_max", "rank_matches_f64", "recompress_ms", "eigh_ms"]
    print(" | ".join(f"{k:>16}" for k in keys))
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            cells.append(f"{v:>16.3e}" if isinstance(v, float) else f"{str(v):>16}")
        print(" | ".join(cells))
    print(f"wrote {args.out / 'eig_precision'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
