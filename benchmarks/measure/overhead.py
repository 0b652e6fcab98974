"""The host's share of one whole-model aggregate, counted so that any CPU can hold it to account.

On a GPU the math of a LoRA aggregate is milliseconds; what is left is the host's: the
synchronisations (:mod:`benchmarks.measure.host_reads`), the kernel launches (non-view
aten ops, :mod:`benchmarks.measure.ops`) and the Python around them. The first two are
counts, the same on every machine; the third is timed where the math is free. Three
measurements of a preset's module and client structure:

* :func:`per_group`: host reads and non-view ops of one ``aggregate`` call, divided by
  the number of shape groups (distinct module shapes: a batched aggregate runs one group
  per shape). It runs on :func:`counted_preset`: every module of the preset, its clients
  and ranks, each side divided by one power of two, the smallest division that keeps every
  module's smaller side at least twice the stacked rank, so the basis step runs as it does
  at full size (where the stacked rank is far below the sides) and the shape groups stay
  distinct. Counted at one thread. The reduction also keeps each group's batch below a
  CPU chunk (:data:`fraq._parallel.CHUNK_BYTES`), so the CPU runs every group whole, as
  CUDA always does: at full size a CPU runs a group in chunks, each with its own ops and
  its own host read, which the CUDA configuration does not make.
* :func:`python_ms`: the median time of one ``aggregate`` of :func:`python_preset` (every
  module 16 x 16, the preset's clients and ranks: the math is free, the time is Python's),
  at one thread, methods interleaved call by call so a change of load hits each alike.
* :func:`python_ratio`: one method's Python time over another's (FRAQ over FLoRA, which
  only stacks), from the same interleaved run.

The counts are cheap (three calls on the reduced shapes); the 16 x 16 timing is a few
hundred milliseconds per preset and method pair.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks.measure.host_reads import HostReadCounter
from benchmarks.measure.ops import OpCounter
from benchmarks.measure.timing import gc_off, threads

__all__ = ["CUDA_CONFIGURATION", "PYTHON_SIDE", "GroupCounts", "counted_preset", "per_group", "python_ms", "python_preset",
           "python_ratio", "shape_groups"]

PYTHON_SIDE = 16
"""m = n of every module in :func:`python_preset`: the eigenproblem and products of a
16 x 16 module take microseconds, so what is timed is the Python around them."""



def _cuda_configuration() -> dict:
    """CUDA's entry of the defaults table, less the eigensolver route (a CPU counts the
    CUDA pipeline's ops with its own ``eigh``)."""
    from fraq.internals import defaults_for

    cuda = defaults_for("cuda")
    return {"backend": cuda.backend, "pipeline": cuda.pipeline, "reads": cuda.reads}


CUDA_CONFIGURATION = _cuda_configuration()
"""FRAQ's options as ``"auto"`` resolves them on CUDA (basis, pipeline and when the host
reads): what the counts of FRAQ are taken in, so a CPU counts what a GPU runs."""


@dataclasses.dataclass(frozen=True)
class GroupCounts:
    """One call's host reads and non-view ops, in total, by kind, and per shape group."""

    groups: int
    host_reads: int
    ops: int
    reads_by_kind: dict
    ops_by_name: dict

    @property
    def host_reads_per_group(self) -> float:
        return self.host_reads / self.groups

    @property
    def ops_per_group(self) -> float:
        return self.ops / self.groups


def counted_preset(preset):
    """``preset`` (a :class:`fraq.presets.Preset` or its name) with every side divided by
    the smallest power of two that keeps each module's smaller side at least twice the
    stacked rank sum_k r_k (module docstring); the preset itself when none does."""
    from fraq.presets import get_preset

    preset = get_preset(preset) if isinstance(preset, str) else preset
    floor = 2 * sum(preset.ranks)
    side = min(min(g.m, g.n) for g in preset.groups)
    d = 1
    while side % (2 * d) == 0 and side // (2 * d) >= floor:
        d *= 2
    groups = tuple(dataclasses.replace(g, m=g.m // d, n=g.n // d) for g in preset.groups)
    return dataclasses.replace(preset, name=f"{preset.name}/{d}", groups=groups)


def python_preset(preset):
    """``preset`` with every module :data:`PYTHON_SIDE` x :data:`PYTHON_SIDE` (its modules,
    clients and ranks kept)."""
    from fraq.presets import get_preset

    preset = get_preset(preset) if isinstance(preset, str) else preset
    groups = tuple(dataclasses.replace(g, m=PYTHON_SIDE, n=PYTHON_SIDE) for g in preset.groups)
    return dataclasses.replace(preset, name=f"{preset.name}@{PYTHON_SIDE}", groups=groups)


def shape_groups(preset) -> int:
    """The distinct module shapes of ``preset``: the groups a batched aggregate runs."""
    return len({(g.m, g.n) for g in preset.groups})


def _call(agg, model, inputs: Callable | None) -> Callable[[], object]:
    ups, state = inputs(model) if inputs is not None else (model.updates(), None)
    return lambda: agg.aggregate(ups, state)


def per_group(agg, preset, *, inputs: Callable | None = None, layers: int | None = None,
              device: torch.device | str = "cpu") -> GroupCounts:
    """Host reads and non-view ops of one warm ``agg.aggregate`` on :func:`counted_preset`
    of ``preset`` (its first ``layers`` layers; default all), on ``device``, at one thread.
    ``inputs``: ``model -> (uploads, state)`` (a :class:`benchmarks.cases.Model`) for a
    method whose clients upload otherwise (default: the model's LoRA uploads, no state)."""
    from benchmarks.cases import build_model

    small = counted_preset(preset)
    call = _call(agg, build_model(small, layers=layers, device=device), inputs)
    with threads(1):
        call()  # lazy set-up is not counted
        with OpCounter() as ops:
            call()
        with HostReadCounter() as reads:
            call()
    return GroupCounts(shape_groups(small), reads.total, ops.non_view_total, dict(reads.reads), dict(ops.non_view))


def python_ms(aggs: dict, preset, *, repeats: int = 7, inputs: dict | None = None, layers: int | None = None,
              device: torch.device | str = "cpu") -> dict[str, float]:
    """label -> median milliseconds of one ``aggregate`` of :func:`python_preset` of
    ``preset`` (its first ``layers`` layers; default all), for every aggregator of ``aggs``
    (label -> aggregator), interleaved call by call, ``repeats`` calls each after one
    warm-up, at one thread, the garbage collector off. ``inputs``: label -> ``model ->
    (uploads, state)``, as for :func:`per_group`."""
    from benchmarks.cases import build_model

    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda d: None
    model = build_model(python_preset(preset), layers=layers, device=device)
    calls = {label: _call(agg, model, (inputs or {}).get(label)) for label, agg in aggs.items()}
    samples: dict[str, list[float]] = {label: [] for label in calls}
    with threads(1):
        for call in calls.values():
            call()
        with gc_off():
            for _ in range(repeats):
                for label, call in calls.items():
                    sync(device)
                    t0 = time.perf_counter()
                    call()
                    sync(device)
                    samples[label].append(time.perf_counter() - t0)
    return {label: 1e3 * statistics.median(s) for label, s in samples.items()}


def python_ratio(agg, baseline, preset, *, repeats: int = 7, device: torch.device | str = "cpu") -> float:
    """``agg``'s Python time over ``baseline``'s at :func:`python_preset` of ``preset``
    (:func:`python_ms`, interleaved in one run)."""
    ms = python_ms({"method": agg, "baseline": baseline}, preset, repeats=repeats, device=device)
    return ms["method"] / ms["baseline"]


def main() -> None:
    """Print FRAQ's (CUDA configuration, and with ``reads="call"``) and FLoRA's counts and
    16 x 16 times on the two presets the targets name (docs/performance.md, "Host reads and
    launches"), the methods interleaved call by call."""
    import os

    from fraq.aggregators import get_aggregator
    from fraq.methods import MethodSpec

    # method text -> the options beneath its own (FRAQ's: CUDA's configuration)
    methods = {"fraq": CUDA_CONFIGURATION, "fraq:reads=call": CUDA_CONFIGURATION, "flora": {}}
    specs = {m: MethodSpec.parse(m) for m in methods}
    print(f"torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.2f}")
    print("preset          method           groups  reads/group  ops/group  (client, module)  Python ms at 16x16  / FLoRA")
    for name in ("roberta-base", "llama-3.2-3b"):
        aggs = {m: get_aggregator(specs[m].name, **{**o, **specs[m].kwargs}) for m, o in methods.items()}
        ms = python_ms(aggs, name, repeats=15)
        pairs = python_preset(name).modules * python_preset(name).clients
        for m, agg in aggs.items():
            c = per_group(agg, name)
            print(f"{name:<15} {m:<16} {c.groups:>6} {c.host_reads_per_group:>12g} {c.ops_per_group:>10g} {pairs:>17}"
                  f" {ms[m]:>19.2f} {ms[m] / ms['flora']:>8.2f}")


if __name__ == "__main__":
    main()
