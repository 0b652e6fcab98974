"""The host's work of one round through the round buffer, counted per client and per call.

A server takes each client's upload as one flat tensor (``buf.layout_of(k).pack(update)``
on the client, ``buf.add(flat, weight=..., scale=...)`` on the server) and aggregates once
all are in (``buf.aggregate()``). :func:`round_counts` counts both halves of one warm
round, each with four counters run in turn, never nested (a dispatch mode's own Python
would fall into the call count):

* Python calls (:mod:`benchmarks.measure.python_calls`): the interpreter's work, the
  proxy for host *time* on a GPU, where a call's math is queued and its Python is not;
* aten ops dispatched, all and non-view (:mod:`benchmarks.measure.ops`): the
  dispatcher's work, and the kernel launches on a GPU;
* host reads (:mod:`benchmarks.measure.host_reads`): the synchronisations a GPU would make.

Two structures of a preset's modules and clients (:func:`structure`):

* ``"16x16"``: the preset's modules (RoBERTa-base 36, LLaMA-3.2-3B 196), every one
  16 x 16, in one shape group, with :data:`CLIENTS` clients of rank :data:`RANK` whatever
  the preset's own: the math is free and the host's work is all that is left, at equal
  clients and shape groups, so what grows from 36 to 196 modules is per-module work. The
  stacked rank (64) exceeds the sides, so FRAQ runs its general-rank regime there.
* ``"reduced"``: :func:`benchmarks.measure.overhead.counted_preset`, the preset's modules,
  shape groups and clients at sides reduced so that FRAQ runs the pass a GPU runs on the
  full model (one per shape group, the stacked rank at most half the smaller side).

A round's first call builds what a method caches (its weights' column factors, its
plans), so one round runs before any is counted: the counts are those of a server's
later rounds with the same clients. Nothing here is timed.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from benchmarks.measure.host_reads import HostReadCounter
from benchmarks.measure.ops import OpCounter
from benchmarks.measure.overhead import CUDA_CONFIGURATION, counted_preset, python_preset, shape_groups
from benchmarks.measure.python_calls import PythonCallCounter
from benchmarks.measure.timing import threads

__all__ = ["CLIENTS", "CONFIGURATIONS", "RANK", "STRUCTURES", "Counts", "RoundCounts", "aggregator", "round_counts",
           "structure"]

CLIENTS = 8
"""Clients of the ``"16x16"`` structure, for both presets (LLaMA-3.2-3B's own number), so
that its two presets differ in their modules alone."""

RANK = 8
"""Every client's rank in the ``"16x16"`` structure (both presets' own)."""

STRUCTURES = ("16x16", "reduced")

CONFIGURATIONS: dict[str, tuple[str, dict]] = {
    "fraq-cuda": ("fraq", dict(CUDA_CONFIGURATION)),
    "fraq-cpu": ("fraq", {}),
    "fraq-call": ("fraq", dict(CUDA_CONFIGURATION, reads="call")),
    "flora": ("flora", {}),
}
"""label -> (method, options): FRAQ as ``"auto"`` resolves on CUDA and on the CPU, FRAQ on
CUDA with one host read per call (``reads="call"``), and FLoRA, which only stacks."""


def aggregator(label: str):
    """The aggregator :data:`CONFIGURATIONS` names ``label``."""
    from fraq.aggregators import get_aggregator

    if label not in CONFIGURATIONS:
        raise ValueError(f"label(={label!r}) is not one of {sorted(CONFIGURATIONS)}")
    method, options = CONFIGURATIONS[label]
    return get_aggregator(method, **options)


def structure(preset, kind: str):
    """``preset`` (a :class:`fraq.presets.Preset` or its name) as the ``kind`` structure
    (:data:`STRUCTURES`, the module docstring)."""
    if kind == "16x16":
        p = python_preset(preset)
        return dataclasses.replace(p, name=f"{p.name}x{CLIENTS}", ranks=(RANK,) * CLIENTS,
                                   alphas=(2.0 * RANK,) * CLIENTS)
    if kind == "reduced":
        return counted_preset(preset)
    raise ValueError(f"kind(={kind!r}) must be one of {STRUCTURES}")


@dataclasses.dataclass(frozen=True)
class Counts:
    """What one counted block made: Python calls, aten ops (all and non-view), host reads."""

    python_calls: int
    aten_ops: int
    non_view_ops: int
    host_reads: int
    reads_by_kind: dict
    non_view_by_name: dict


@dataclasses.dataclass(frozen=True)
class RoundCounts:
    """One warm round through the buffer: ``adds``, every client's ``add`` together, and
    ``call``, the one ``aggregate``."""

    structure: str
    modules: int
    clients: int
    groups: int
    adds: Counts
    call: Counts

    def per_client(self, field: str) -> float:
        """``adds``'s ``field`` per client."""
        return getattr(self.adds, field) / self.clients

    def per_group(self, field: str) -> float:
        """``call``'s ``field`` per shape group."""
        return getattr(self.call, field) / self.groups


def round_counts(agg, preset, *, device: torch.device | str = "cpu") -> RoundCounts:
    """Counts of one warm round of ``agg`` through its round buffer on ``preset``'s seeded
    uploads (:func:`benchmarks.cases.build_model`), every client's upload one flat tensor
    in its layout, added in client order, then aggregated; at one thread, on ``device``."""
    from benchmarks.cases import build_model

    model = build_model(preset, device=device)
    updates = model.updates()
    K = len(updates)
    ranks = list(model.preset.ranks)

    def open_round():
        return agg.open_round(model.shapes, clients=K, ranks=ranks, device=device)

    first = open_round()
    flats = [first.layout_of(k).pack(u) for k, u in enumerate(updates)]
    del first

    def one_round(adds, call) -> None:
        buf = open_round()
        with adds:
            for flat, u in zip(flats, updates):
                buf.add(flat, weight=u.weight, scale=u.scale)
        with call:
            buf.aggregate()

    with threads(1):
        one_round(contextlib.nullcontext(), contextlib.nullcontext())
        calls = PythonCallCounter(), PythonCallCounter()
        one_round(*calls)
        ops = OpCounter(), OpCounter()
        one_round(*ops)
        reads = HostReadCounter(), HostReadCounter()
        one_round(*reads)
    adds, call = (Counts(c.total, o.total, o.non_view_total, r.total, dict(r.reads), dict(o.non_view))
                  for c, o, r in zip(calls, ops, reads))
    return RoundCounts(model.preset.name, len(model.shapes), K, shape_groups(model.preset), adds, call)


def main() -> None:
    """Print every configuration's counts on both presets in both structures (the table of
    docs/performance.md, "The host budget of a round")."""
    print(f"torch {torch.__version__}, 1 thread; per client: one add of a flat upload; per call: one aggregate")
    print("structure            config      modules  K  groups | per client: calls ops reads | per call: calls "
          "aten non-view reads")
    for kind in STRUCTURES:
        for name in ("roberta-base", "llama-3.2-3b"):
            for label in CONFIGURATIONS:
                c = round_counts(aggregator(label), structure(name, kind))
                print(f"{c.structure:<20} {label:<10} {c.modules:>8} {c.clients:>2} {c.groups:>7} |"
                      f" {c.per_client('python_calls'):>16g} {c.per_client('non_view_ops'):>3g}"
                      f" {c.per_client('host_reads'):>5g} | {c.call.python_calls:>15} {c.call.aten_ops:>4}"
                      f" {c.call.non_view_ops:>8} {c.call.host_reads:>5}")


if __name__ == "__main__":
    main()
