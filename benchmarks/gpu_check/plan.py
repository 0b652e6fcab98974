"""What the next GPU call should measure: the points the ledger lacks, by priority, in a budget.

    python -m benchmarks.gpu_check --plan [--device cuda] [--budget-s 420] [--device-kind NAME]

prints the plan and measures nothing (no GPU needed). Every point of every experiment the
GPU check measures, at the ``gpu`` size, and the checks run once per fingerprint, has a
priority (:data:`PRIORITIES`, the one table, read from the experiment modules'
declarations); the plan takes those the ledger
(:mod:`benchmarks.gpu_check.ledger`) lacks for the device kind and the working tree's
fingerprint, highest priority first and in the registry's order within one, each at its
expected seconds (:meth:`~benchmarks.gpu_check.ledger.Ledger.cost`), while they fit
``budget - STARTUP_S``; one that does not fit is left for a later call and the smaller
ones after it are still taken (first fit: a minutes-long point does not hold back the
seconds-long ones behind it).

P4's items are measured once per fingerprint on any GPU kind (the CUDA tests pass or not,
the workspace and TF32 checks are the code's), every other point once per fingerprint
and device kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.experiments import priorities

__all__ = ["CHECKS", "PRIORITIES", "STARTUP_S", "Item", "items", "plan", "priority", "render"]

STARTUP_S = 25.0
"""Seconds of a call spent before and after its points: the device record (5-6 s in each of
the committed calls), an interpreter start with torch's import and a CUDA context (about
10 s), and the GPU check's reserve for the last packing and summary (5 s), rounded up."""

PRIORITIES: tuple[tuple[int, str, str | None, str], ...] = priorities()
"""``(priority, experiment, tables123's point part or None for any, what)``, by priority and in
the registry's order within one: each experiment module's own ``Experiment.gpu``
(:func:`benchmarks.experiments.priorities`); a point takes the first row that matches it.
P0 to P3 are the paper's claims, P4 the once-per-fingerprint checks, P5 the rest."""

ONCE_PER_FINGERPRINT = 4
"""The priority whose items are measured once per fingerprint on any device kind."""

CHECKS: tuple[tuple[int, str, float, str], ...] = (
    (4, "tests", 15.0, "the tests marked cuda (11-13.5 s in the committed calls)"),
    (4, "asv-quick", 60.0, "the asv suite's quick run on the device (not yet timed on a GPU: a guess)"),
    (4, "pytest-benchmark-quick", 60.0, "tests/bench's quick checks on the device (not yet timed on a GPU: "
                                        "a guess)"),
)
"""Whole checks that are not runner points, as ``(priority, name, seconds, what)``: in the
ledger as experiment ``check``, key ``name``."""


@dataclass(frozen=True)
class Item:
    """One thing a call can measure: ``experiment``/``key`` at ``priority``, expected to take
    ``seconds`` (``source``: ``measured``, ``estimated`` or ``fixed``)."""

    priority: int
    experiment: str
    key: str
    seconds: float
    source: str


def priority(experiment: str, config: dict) -> int | None:
    """The priority of a point (None: not one the GPU check measures)."""
    for p, exp, part, _ in PRIORITIES:
        if exp == experiment and (part is None or config.get("part") == part):
            return p
    return None


def _points(size: str = "gpu", experiments: tuple[str, ...] | None = None) -> list[tuple[int, str, str, dict]]:
    """``(priority, experiment, key, config)`` of every prioritized point at ``size`` (of
    ``experiments`` alone where given: some build their points from float64 references,
    Fig. 4's for half a minute at the ``gpu`` size)."""
    from benchmarks.experiments import get

    out = []
    for exp in dict.fromkeys(e for _, e, _, _ in PRIORITIES if experiments is None or e in experiments):
        module = get(exp)
        for config in module.points(size):
            p = priority(exp, config)
            if p is not None:
                out.append((p, exp, module.key(config), config))
    return out


def items(ledger, kind: str, size: str = "gpu", experiments: tuple[str, ...] | None = None) -> list[Item]:
    """Every item at ``size`` with its expected seconds on ``kind``, by priority (the points
    of ``experiments`` alone, and no check, where given)."""
    from benchmarks.experiments import cost

    out = [Item(p, exp, key, *ledger.cost(kind, exp, key, config, cost))
           for p, exp, key, config in _points(size, experiments)]
    for p, name, seconds, _ in CHECKS if experiments is None else ():
        known = ledger.seconds(kind, "check", name)
        out.append(Item(p, "check", name, known if known is not None else seconds,
                        "measured" if known is not None else "fixed"))
    return sorted(out, key=lambda i: i.priority)


def plan(ledger, kind: str, fp: str, budget_s: float, size: str = "gpu",
         experiments: tuple[str, ...] | None = None) -> tuple[list[Item], list[Item]]:
    """``(taken, left)``: the items the ledger lacks for ``kind`` and ``fp``, those that fit
    ``budget_s - STARTUP_S`` (first fit, by priority) and those that do not (of
    ``experiments``' points alone where given: :func:`items`)."""
    done = ledger.measured(kind, fp)
    done_any = ledger.measured(None, fp)
    room = budget_s - STARTUP_S
    taken, left = [], []
    for item in items(ledger, kind, size, experiments):
        point = (item.experiment, item.key)
        if point in (done_any if item.priority == ONCE_PER_FINGERPRINT else done):
            continue
        if item.seconds <= room:
            taken.append(item)
            room -= item.seconds
        else:
            left.append(item)
    return taken, left


def render(taken: list[Item], left: list[Item], *, kind: str, fp: str, budget_s: float) -> str:
    """The plan as text: one line per item taken, the total, and what is left by priority."""
    lines = [f"plan for {kind}, fingerprint {fp}, budget {budget_s:g} s ({STARTUP_S:g} s of start-up)"]
    lines += [f"P{i.priority}  {i.experiment}/{i.key}  {i.seconds:.1f} s ({i.source})" for i in taken]
    total = sum(i.seconds for i in taken)
    lines.append(f"total {len(taken)} items, {total:.1f} s + {STARTUP_S:g} s start-up of {budget_s:g} s")
    for p in sorted({i.priority for i in left}):
        rest = [i for i in left if i.priority == p]
        lines.append(f"left for later calls: P{p} {len(rest)} items, {sum(i.seconds for i in rest):.1f} s")
    return "\n".join(lines)
