"""The report of an aggregation: per module, what was kept and how far it is from the exact aggregate.

:class:`AdapterAggregation` is what :func:`fraq.peft.aggregate_adapters` returns: the
written factors and one :class:`ModuleRow` per module (``.table()`` for ``fraq aggregate
--report``, ``.to_json()`` for ``--json``). :func:`module_row` computes a row's energy
and error in float64 from the triangular factors of the round buffer's stacks (:func:`sqnorm`),
never forming an m x n matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fraq.aggregators.certificate import Certificate, ExactFactors

__all__ = ["REPORT_FORMAT", "AdapterAggregation", "ModuleRow", "certificate_line", "module_row", "sqnorm"]

REPORT_FORMAT = "fraq-aggregate-report/1"
"""The ``format`` field of :meth:`AdapterAggregation.to_json`."""


@dataclass(frozen=True)
class ModuleRow:
    """One module of the report.

    ``shape`` is the LoRA view (m, n) = (out, in); ``energy`` is
    :math:`\\|\\Delta_{out}\\|_F^2 / \\|\\Delta\\|_F^2` and ``rel_error``
    :math:`\\|\\Delta_{out} - \\Delta\\|_F / \\|\\Delta\\|_F` against the exact aggregate
    :math:`\\Delta = \\sum_k a_k s_k B_k A_k`, in float64 from the triangular factors of the
    round buffer's stacks (never m x n), accurate to a few eps64 relative to ||Delta|| when
    the stacks are float64, to their stored rounding (8 u32 per rank-1 term) when float32
    (None when not computed; absolute when Delta = 0). ``params``
    counts the written factors, ``flora_params`` the FLoRA stack, (m + n) sum_k r_k.
    """

    module: str
    shape: tuple[int, int]
    client_ranks: tuple[int, ...]
    rank: int
    energy: float | None
    rel_error: float | None
    params: int
    flora_params: int


@dataclass(frozen=True)
class AdapterAggregation:
    """What :func:`aggregate_adapters` produced.

    Attributes:
        method, options: the aggregator and its options.
        clients: the client directories; ``weights`` the normalized a_k.
        factors: module -> the written ``(lora_B (m, p), lora_A (p, n))``, scale 1.
        full: averaged ``modules_to_save`` tensors, saved key -> tensor.
        rows: one :class:`ModuleRow` per module, in file order.
        path: where the adapter directory (or delta file) was written, or None.
        delta: True when ``path`` is a delta file.
        certificate: the aggregator result's :class:`~fraq.aggregators.Certificate` (its
            update against the exact aggregate, with a rounding bound, before the cast to
            the written dtype), or None when not asked for.
    """

    method: str
    options: dict
    clients: tuple[Path, ...]
    weights: tuple[float, ...]
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]
    full: dict[str, torch.Tensor]
    rows: tuple[ModuleRow, ...]
    path: Path | None = None
    delta: bool = False
    config: dict = field(default_factory=dict)
    certificate: Certificate | None = None

    @property
    def ranks(self) -> dict[str, int]:
        return {r.module: r.rank for r in self.rows}

    def totals(self) -> dict:
        params, flora = sum(r.params for r in self.rows), sum(r.flora_params for r in self.rows)
        return {"modules": len(self.rows), "params": params, "flora_params": flora,
                "params_pct_flora": 100.0 * params / flora if flora else 0.0}

    def to_json(self) -> dict:
        cert = self.certificate
        rows = [{**vars(r), "shape": list(r.shape), "client_ranks": list(r.client_ranks),
                 **({} if cert is None else {"certificate": cert[r.module].to_json()})} for r in self.rows]
        return {"format": REPORT_FORMAT, "method": self.method, "options": {k: repr(v) if isinstance(v, torch.dtype) else v
                                                   for k, v in self.options.items()},
                "clients": [str(c) for c in self.clients], "weights": list(self.weights),
                "path": None if self.path is None else str(self.path), "delta": self.delta,
                "rows": rows, "totals": self.totals(),
                **({} if cert is None else {"certificate": cert.summary()})}

    def table(self) -> str:
        """The report as a fixed-width text table, totals last."""
        width = max([len("module")] + [len(r.module) for r in self.rows])
        rw = max([len("client ranks")] + [len(",".join(map(str, r.client_ranks))) for r in self.rows])
        cert = self.certificate
        cw = 0 if cert is None else max([len("certificate")] + [len(str(c)) for c in cert.values()])
        head = (f"{'module':<{width}}  {'m x n':>11}  {'client ranks':>{rw}}  {'rank':>5}  {'energy':>9}  "
                f"{'rel err':>9}  {'params':>10}  {'% FLoRA':>7}" + ("" if cert is None else f"  {'certificate':>{cw}}"))
        lines = [head, "-" * len(head)]
        for r in self.rows:
            shape = f"{r.shape[0]} x {r.shape[1]}"
            ranks = ",".join(map(str, r.client_ranks))
            pct = 100.0 * r.params / r.flora_params
            lines.append(f"{r.module:<{width}}  {shape:>11}  {ranks:>{rw}}  {r.rank:>5}  {_fmt(r.energy):>9}  "
                         f"{_fmt(r.rel_error):>9}  {r.params:>10}  {pct:>7.1f}"
                         + ("" if cert is None else f"  {str(cert[r.module]):>{cw}}"))
        t = self.totals()
        lines.append("-" * len(head))
        lines.append(f"{'total (' + str(t['modules']) + ' modules)':<{width}}  {'':>11}  {'':>{rw}}  {'':>5}  "
                     f"{'':>9}  {'':>9}  {t['params']:>10}  {t['params_pct_flora']:>7.1f}"
                     + ("" if cert is None else f"  {'':>{cw}}"))
        return "\n".join(lines)


def certificate_line(cert: Certificate) -> str:
    """One line naming the worst module's certificate."""
    name, c = cert.worst
    return f"certificate (||update - exact||_F / ||exact||_F, worst of {len(cert)} modules): {name}: {c}"


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6f}" if v >= 1e-3 else f"{v:.2e}"


def module_row(module: str, client_ranks: tuple[int, ...], exact: ExactFactors | None, B: torch.Tensor,
               A: torch.Tensor) -> ModuleRow:
    """The row of ``module`` whose written factors are ``(B, A)`` and whose clients had
    ``client_ranks``; energy and error only with ``exact``, the exact aggregate's stacks
    X (m, R), Y (R, n) in float64 (a round buffer's, :meth:`fraq.aggregators.RoundBuffer.exact_aggregate`):
    about 4 (m + n) (R + p)^2 flops. Stacks stored in a narrower dtype (``exact.stored``)
    are the aggregate to that dtype's rounding of the weighting, which bounds how far the
    energy and error can be from those against the uploads themselves
    (:mod:`fraq.aggregators.certificate`, "Stored stacks")."""
    m, n, p = B.shape[0], A.shape[1], B.shape[-1]
    energy = err = None
    if exact is not None:
        Bst, Ast = exact.X, exact.Y
        total = sqnorm(Bst, Ast)
        Bw, Aw = B.double(), A.double()
        kept = sqnorm(Bw, Aw)
        diff = sqnorm(torch.cat([Bst, -Bw], -1), torch.cat([Ast, Aw], -2))
        energy = kept / total if total > 0 else 1.0
        err = math.sqrt(max(diff, 0.0) / total) if total > 0 else math.sqrt(kept)
    return ModuleRow(module, (m, n), tuple(client_ranks), p, energy, err, (m + n) * p, (m + n) * sum(client_ranks))


def sqnorm(B: torch.Tensor, A: torch.Tensor) -> float:
    """:math:`\\|B A\\|_F^2 = \\|R_B R_A^T\\|_F^2` with :math:`B = Q_B R_B`, :math:`A^T = Q_A R_A`.

    The triangular factors keep the error at eps * ||B|| ||A||; the Gram form
    tr(B^T B A A^T) would lose half the digits to cancellation when B A is a small
    difference (the report's error at tau = 1). 2 (m + n) r^2 flops.
    """
    RB = torch.linalg.qr(B, mode="r").R
    RA = torch.linalg.qr(A.mT, mode="r").R
    return float(torch.linalg.matrix_norm(RB @ RA.mT) ** 2)
