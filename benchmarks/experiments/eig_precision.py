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

Run: ``.venv/bin/python -m benchmarks.run eig_precision``.
"""

from __future__ import annotations

import torch

import fraq
from benchmarks import cases
from benchmarks.experiments import Experiment
from benchmarks.measure import timed
from benchmarks.sizes import size_config
from fraq.reference import optimal_error, reference_svd, relative_error

EXPERIMENT = Experiment()

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


def _dtype(name: str) -> torch.dtype:
    return {"float32": F32, "float64": F64}[name]


def lora_case(tau: float, eig_dtype: str) -> dict:
    Bs, As = cases.clients(768, 768, (8,) * 10, 36, 0)
    B, A = fraq.stack(list(Bs), list(As), scales=[2.0] * 10)
    ref = fraq.recompress(B.double(), A.double(), tau=tau)
    edt = _dtype(eig_dtype)
    res = fraq.recompress(B, A, tau=tau, eig_dtype=edt)
    t = timed(lambda: fraq.recompress(B, A, tau=tau, eig_dtype=edt), repeats=7)
    return {"recompress_ms": t.median * 1e3, "recompress_timing": t.as_dict(), **_accuracy(B, A, res, ref.rank)}


def condition_case(kappa: float, p: int, eig_dtype: str) -> dict:
    Bs, As, _ = cases.conditioned(768, 768, 64, kappa, seed=int(kappa) % 1000 + p)
    B, A = Bs[0][0], As[0][0]
    return _accuracy(B, A, fraq.recompress(B, A, rank=p, eig_dtype=_dtype(eig_dtype)))


def eig_timing(eig_dtype: str) -> dict:
    H = torch.randn(36, 80, 768, generator=torch.Generator().manual_seed(0))
    Gd = (H @ H.mT).to(_dtype(eig_dtype))
    t = timed(lambda: torch.linalg.eigh(Gd), repeats=9)
    return {"eigh_ms": t.median * 1e3, "eigh_iqr_ms": t.iqr * 1e3, "eigh_timing": t.as_dict()}


def points(size: str) -> list[dict]:
    """Every row: LoRA-like stacks at tau 0.8 and 0.95, conditioned aggregates at p = 32 and
    64, the eigensolver alone; each with a float32 and a float64 eigensolver. The same at
    every size."""
    size_config(size, "eig_precision")
    cases_ = [dict(case=f"lora roberta tau={tau}", kind="lora", tau=tau) for tau in (0.8, 0.95)]
    cases_ += [dict(case=f"kappa={kappa:.0e} p={p}", kind="condition", kappa=kappa, p=p)
               for kappa in (1.0, 1e2, 1e4, 1e6, 1e8, 1e10) for p in (32, 64)]
    cases_ += [dict(case="eigh 36 x (80 x 80)", kind="eigh")]
    return [dict(c, eig_dtype=e) for c in cases_ for e in ("float32", "float64")]


def key(config: dict) -> str:
    return f"{config['case']}-{config['eig_dtype']}".replace(" ", "_")


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """One row (on the CPU: the question is the eigensolver's precision)."""
    c = config
    if c["kind"] == "lora":
        return lora_case(c["tau"], c["eig_dtype"])
    if c["kind"] == "condition":
        return condition_case(c["kappa"], c["p"], c["eig_dtype"])
    return eig_timing(c["eig_dtype"])
