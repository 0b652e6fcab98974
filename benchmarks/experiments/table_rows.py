"""The rows of Tables 1-3: which aggregators, with which options, on which uploads.

A row is a method spec in :mod:`fraq.methods`' grammar (``fraq:tau=0.95``,
``flexlora:kernel=fraq``, ``lora-a2:round=1``: :class:`TableRow`), built from its text and
selected by it (:func:`select_rows`); its label (``fraq (tau=0.95)``, :func:`row_label`) is
derived from the spec for display, and is the key the paper's numbers
(``analysis/paper.json``) and every result row's ``method`` carry.

Every registered aggregator is a row (the package's and those from outside it), in the
paper's order, with the paper's options (:data:`PAPER_SETTINGS`), each followed by the same
on each of its kernel variants; a method whose clients alternate the trained factor has a
row per round (:data:`ROW_OPTIONS`). A row that the preset's client ranks rule out carries
the aggregator's own error (:func:`row_applicable`). How a dense-factorization row is timed
on a preset (:func:`dense_plan`: the whole model, one module per shape, or not at all) is
decided here too, from the preset's shapes alone. The timing of the rows is
:mod:`benchmarks.experiments.tables123`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from benchmarks.cases import Model, lora_a2_inputs
from fraq.aggregators import ClientUpdate, get_aggregator
from fraq.methods import MethodSpec
from fraq.presets import Preset

__all__ = ["DENSE_WORK", "LIKE_FOR_LIKE", "PAPER_SETTINGS", "QUICK_DENSE_WORK", "ROUNDS", "ROW_OPTIONS", "SHAPE_ONLY",
           "TableRow", "dense_plan", "module_shapes", "row_aggregator", "row_applicable", "row_fields", "row_label",
           "row_uploads", "select_rows", "table_rows"]

ROUNDS = {1: "B", 2: "A"}
"""The rounds of a method whose clients alternate the trained factor (its class's
``alternating_freeze``: LoRA-A²), by number, and the factor its clients train in each: in
round 1 they train B against the frozen initial A, in round 2 A against the B that round 1
aggregated (:func:`benchmarks.cases.lora_a2_inputs`)."""

ROW_OPTIONS = ("round",)
"""Options of a row's spec that the row layer reads and the aggregator is not given:
``round`` (:data:`ROUNDS`), which round of an alternating-freeze method is timed. The two
rounds run the same aggregator with the same options on different uploads
(:func:`row_uploads`), so which one is timed is a property of the row, not of the method:
``lora-a2:round=1`` is the B round (labelled ``lora-a2 (B round)``), ``lora-a2:round=2`` the
A round. Every alternating-freeze row names its round and no other row has one
(:class:`TableRow`), so one spec names one row."""


@dataclass(frozen=True)
class TableRow:
    """One table row: its method spec (:class:`fraq.methods.MethodSpec`), the registry name
    and options of the aggregator it times, plus the row options (:data:`ROW_OPTIONS`).

    Build one from its text with :meth:`parse` (``TableRow.parse("fraq:tau=0.95")``);
    ``name``, ``options`` (the spec's keyword options, row options included) and ``label``
    (:func:`row_label`) are read from the spec.
    """

    spec: MethodSpec

    def __post_init__(self):
        from fraq.aggregators import AGGREGATORS

        if not isinstance(self.spec, MethodSpec):
            raise TypeError(f"spec(={self.spec!r}) must be a fraq.methods.MethodSpec; TableRow.parse reads text")
        if self.name not in AGGREGATORS:
            raise ValueError(f"row {str(self.spec)!r}: {self.name!r} is not a registered aggregator: "
                             f"{', '.join(AGGREGATORS)}")
        alternating = AGGREGATORS[self.name].alternating_freeze
        rnd = self.options.get("round")
        if alternating and (type(rnd) is not int or rnd not in ROUNDS):  # not 1.0, not true
            raise ValueError(f"row {str(self.spec)!r}: {self.name}'s clients alternate the trained factor, so its "
                             f"row names its round: round(={rnd!r}) must be one of {', '.join(map(str, ROUNDS))} "
                             f"({', '.join(f'{k}: {v}' for k, v in ROUNDS.items())})")
        if not alternating and "round" in self.options:
            raise ValueError(f"row {str(self.spec)!r}: round is the row option of a method whose clients alternate "
                             f"the trained factor; {self.name}'s do not")

    @classmethod
    def parse(cls, text: str | MethodSpec) -> TableRow:
        """The row ``text`` names, in :mod:`fraq.methods`' grammar (``flexlora:kernel=fraq``)."""
        return cls(MethodSpec.parse(text))

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def options(self) -> dict:
        return self.spec.kwargs

    @property
    def label(self) -> str:
        return row_label(self.name, self.options)

    def __str__(self) -> str:
        return str(self.spec)


PAPER_SETTINGS = {"florist": lambda hetero: ["tau=0.85" if hetero else "tau=0.9"],  # the FLoRIST paper's thresholds
                  "fraq": lambda hetero: ["tau=0.8", "tau=0.95"]}
"""The options of the paper's rows, by registry name, in :mod:`fraq.methods`' grammar:
preset heterogeneity -> one options text per row. A method not named here has one row with
its default options."""

LIKE_FOR_LIKE = {"florist": ["tau=0.8,kernel=qr", "tau=0.95,kernel=qr"]}
"""Rows beside the paper's that compare a peer at FRAQ's output: FLoRIST at its best at each
of FRAQ's rows' thresholds (:data:`PAPER_SETTINGS`: tau = 0.80 and 0.95, the same energy
rule), so at each its rank, downlink and product are FRAQ's and the two rows differ in time
alone; the downlink and exactness columns then compare the two methods at the same output.
Each costs about FRAQ's row at its threshold (two thin QRs and an r x r SVD against FRAQ's
QR and r x r eigenproblem), so both are timed wherever FRAQ's rows are."""


def row_label(name: str, options: dict) -> str:
    """A row's label: ``fraq (tau=0.80)``, the name alone for default options, a round
    (:data:`ROW_OPTIONS`) last as the factor its clients train: ``lora-a2 (B round)``."""
    shown = {k: v for k, v in options.items() if k != "round"}
    text = ", ".join(f"{k}={_shown(v)}" for k, v in shown.items())
    label = f"{name} ({text})" if text else name
    return f"{label} ({ROUNDS[options['round']]} round)" if "round" in options else label


def _shown(v) -> str:
    """An option value in a label: a float with two decimals (``0.80``, the paper's numbers'
    keys) where those give it back exactly, else in full (``0.951``), so distinct values
    never share a label."""
    if isinstance(v, float) and float(f"{v:.2f}") == v:
        return f"{v:.2f}"
    return str(v)


def _takes_kernel(cls) -> bool:
    """Whether ``cls``'s constructor has a ``kernel`` option (a method from outside the
    package may declare ``kernel_variants`` and still not take one)."""
    import inspect

    params = inspect.signature(cls).parameters
    return "kernel" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def table_rows(preset: Preset) -> list[TableRow]:
    """The rows of ``preset``'s table: every registered aggregator (the package's and those
    from outside it, :mod:`fraq.aggregators.registry`) in the paper's order (its class's
    ``paper_order``; the others after, in registration order), with the paper's options
    (:data:`PAPER_SETTINGS`), each followed by the same on each of its kernel variants
    (its class's ``kernel_variants``: ``flexlora:kernel=fraq``), then its like-for-like rows
    (:data:`LIKE_FOR_LIKE`); a method whose clients alternate the trained factor (``alternating_freeze``) has a row
    for each round, B's
    and A's (``lora-a2:round=1``, ``lora-a2:round=2``: :data:`ROW_OPTIONS`)."""
    from fraq.aggregators import AGGREGATORS

    hetero = len(set(preset.ranks)) > 1
    classes = sorted(AGGREGATORS.values(), key=lambda c: (c.paper_order is None, c.paper_order or 0))
    rows = []
    for cls in classes:
        settings = PAPER_SETTINGS.get(cls.name, lambda h: [""])(hetero)
        kernels = getattr(cls, "kernel_variants", ()) if _takes_kernel(cls) else ()  # an older fraq has none
        rounds = [f"round={r}" for r in ROUNDS] if cls.alternating_freeze else [""]
        extra = [o for o in LIKE_FOR_LIKE.get(cls.name, []) if "kernel=" not in o or kernels]
        for options in settings + [_joined(o, f"kernel={k}") for k in kernels for o in settings] + extra:
            rows += [TableRow.parse(f"{cls.name}:{_joined(options, rnd)}") for rnd in rounds]
    return rows


def _joined(*options: str) -> str:
    return ",".join(o for o in options if o)


def select_rows(rows: list[TableRow], methods, where: str) -> list[TableRow]:
    """The rows of ``rows`` that ``methods`` name, in the order given: each a spec in
    :mod:`fraq.methods`' grammar, naming the row with the same registry name and keyword
    options (``fraq:tau=0.950`` names ``fraq:tau=0.95``). ValueError naming those that are
    no row of ``where``'s table, with the rows it has."""
    def same(text):
        try:
            spec = MethodSpec.parse(text)
        except ValueError:
            return None
        return next((r for r in rows if r.name == spec.name and r.options == spec.kwargs), None)

    found = [same(m) for m in methods]
    unknown = [m for m, r in zip(methods, found) if r is None]
    if unknown:
        raise ValueError(f"methods(={unknown}) are not rows of {where}'s table: {[str(r) for r in rows]}")
    return found


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
    """The row's aggregator: its spec's options but the row's own (:data:`ROW_OPTIONS`)."""
    return get_aggregator(method.name, **{k: v for k, v in method.options.items() if k not in ROW_OPTIONS})


def row_uploads(model: Model, agg, method: TableRow, names):
    """The uploads of modules ``names`` as the method's clients send them, and the state
    the timed round starts from."""
    if agg.single_matrix:
        return model.florg_updates(names), None
    if agg.alternating_freeze:
        return lora_a2_inputs(model, names, method.options["round"])
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
