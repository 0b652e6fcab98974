"""The rows of Tables 1-3: which aggregators, with which options, on which uploads.

Every registered aggregator is a row (the package's and those from outside it), in the
paper's order, with the paper's options (:data:`PAPER_SETTINGS`), each followed by the same
on each of its kernel variants; a method whose clients alternate the trained factor has a
row per round. A row that the preset's client ranks rule out carries the aggregator's own
error (:func:`row_applicable`). How a dense-factorization row is timed on a preset
(:func:`dense_plan`: the whole model, one module per shape, or not at all) is decided here
too, from the preset's shapes alone. The timing of the rows is
:mod:`benchmarks.experiments.tables123`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from benchmarks.cases import Model, lora_a2_inputs
from fraq.aggregators import ClientUpdate, get_aggregator
from fraq.presets import Preset

__all__ = ["DENSE_WORK", "PAPER_SETTINGS", "QUICK_DENSE_WORK", "SHAPE_ONLY", "TableRow", "dense_plan",
           "module_shapes", "row_aggregator", "row_applicable", "row_fields", "row_label", "row_uploads",
           "table_rows"]


@dataclass(frozen=True)
class TableRow:
    """One table row: a registry name, its options, and the preset rule for special cases."""

    label: str
    name: str
    options: dict = field(default_factory=dict)


PAPER_SETTINGS = {"florist": lambda hetero: [{"tau": 0.85 if hetero else 0.90}],  # the FLoRIST paper's thresholds
                  "fraq": lambda hetero: [{"tau": 0.80}, {"tau": 0.95}]}
"""The options of the paper's rows, by registry name: preset heterogeneity -> one options
dict per row. A method not named here has one row with its default options."""


def row_label(name: str, options: dict) -> str:
    """A row's label: ``fraq (tau=0.80)``; the name alone for default options."""
    text = ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in options.items())
    return f"{name} ({text})" if text else name


def table_rows(preset: Preset) -> list[TableRow]:
    """The rows of ``preset``'s table: every registered aggregator (the package's and those
    from outside it, :mod:`fraq.aggregators.registry`) in the paper's order (its class's
    ``paper_order``; the others after, in registration order), with the paper's options
    (:data:`PAPER_SETTINGS`), each followed by the same on each of its kernel variants
    (its class's ``kernel_variants``: ``flexlora (kernel=fraq)``); a method whose clients
    alternate the trained factor (``alternating_freeze``) has a row for each round, B's
    and A's."""
    from fraq.aggregators import AGGREGATORS

    hetero = len(set(preset.ranks)) > 1
    classes = sorted(AGGREGATORS.values(), key=lambda c: (c.paper_order is None, c.paper_order or 0))
    rows = []
    for cls in classes:
        settings = PAPER_SETTINGS.get(cls.name, lambda h: [{}])(hetero)
        kernels = getattr(cls, "kernel_variants", ())  # an older fraq (benchmarks.regress) has none
        for options in settings + [{**o, "kernel": k} for k in kernels for o in settings]:
            if cls.alternating_freeze:
                rows += [TableRow(f"{row_label(cls.name, options)} ({part} round)", cls.name, {**options, "round": rnd})
                         for part, rnd in (("B", 1), ("A", 2))]
            else:
                rows.append(TableRow(row_label(cls.name, options), cls.name, dict(options)))
    return rows



DENSE_WORK = 1e12
"""Above this sum of m n min(m, n) over a preset's modules, a dense per-module method is
timed on one module per shape. The dense SVD costs ~10 m n min(m, n) FLOPs, ~1e10 per
second on one core here: LLaMA-3.2-3B's 8.7e12 is minutes per aggregation (whole model),
RoBERTa-base's 3.3e10 seconds."""


QUICK_DENSE_WORK = 1e10
"""In quick mode a dense method runs on one module per shape where that work is at most
this (RoBERTa-base: 4.5e8, a fraction of a second) and is skipped above it (LLaMA-3.2-3B:
1.9e11, about a minute per sample)."""


def dense_plan(preset: Preset, *, quick: bool) -> str:
    """How the preset's dense per-module methods are timed: ``"full"`` (the whole model),
    ``"per-shape"`` (one module of every shape, extrapolated) or ``"skip"``."""
    if quick:
        per_shape = sum(m * n * min(m, n) for m, n in {(g.m, g.n) for g in preset.groups})
        return "per-shape" if per_shape <= QUICK_DENSE_WORK else "skip"
    whole = sum(g.count * g.m * g.n * min(g.m, g.n) for g in preset.groups)
    return "full" if whole <= DENSE_WORK else "per-shape"


def row_aggregator(method: TableRow):
    """The row's aggregator (``round`` is the table's option: which LoRA-A^2 round is timed)."""
    return get_aggregator(method.name, **{k: v for k, v in method.options.items() if k != "round"})


def row_uploads(model: Model, agg, method: TableRow, names):
    """The uploads of modules ``names`` as the method's clients send them, and the state
    the timed round starts from."""
    if agg.single_matrix:
        return model.florg_updates(names), None
    if agg.alternating_freeze:
        return lora_a2_inputs(model, names, method.options.get("round", 1))
    return model.updates(names), None


def row_fields(method: TableRow) -> dict:
    """The row's fields for the analysis (:func:`benchmarks.measure.described.describe`),
    its display name carrying the row's options as its label does: ``FRAQ (tau=0.80)``."""
    from benchmarks.measure.described import describe

    fields = describe(method.name)
    suffix = method.label[len(method.name):]
    return dict(fields, display_name=fields["display_name"] + suffix)


def row_applicable(method: TableRow, preset: Preset) -> str | None:
    """The aggregator's own error for the preset's client ranks, found on 4 x 4 stand-ins
    named after the preset's first module."""
    agg = row_aggregator(method)
    A0 = {r: torch.ones(r, 4) for r in set(preset.ranks)}
    probe = f"layers.0.{preset.groups[0].name}"
    ups = [ClientUpdate({probe: (None if agg.single_matrix else torch.zeros(4, r), A0[r])}, scale=s)
           for r, s in zip(preset.ranks, preset.scales)]
    try:
        agg.aggregate(ups)
    except ValueError as exc:
        return str(exc)
    return None


SHAPE_ONLY = ("flexlora", "fedsvd", "fedmomentum")
"""Dense methods whose time on one module depends on its shape alone, not on the client
ranks: FlexLoRA and FedMomentum form the m x n aggregate (2 m n sum r_k FLOPs, under 2% of
its SVD's ~10 m n min(m, n) at LLaMA's shapes and ranks up to 232) and decompose it, FedSVD
the product of the averaged factors (2 m n r). Timed on one
module per shape for one preset, it serves every later preset with the same shapes
(Table 3's heterogeneous ranks take Table 2's timing, each row saying so). FLoRG is not
here: its Procrustes step and Gram follow the ranks."""


def module_shapes(preset: Preset) -> tuple:
    return tuple(sorted({(g.m, g.n) for g in preset.groups}))
