"""The one runner: every point of every experiment in the registry, one JSON per result.

    .venv/bin/python -m benchmarks.run [EXPERIMENT ...] [--size tiny|reduced|paper]
        [--out DIR] [--device cpu|cuda|cuda:N] [--threads N] [--rerun]

Experiments are :mod:`benchmarks.experiments`' (default: what ``make run`` reproduces,
:data:`benchmarks.experiments.DEFAULT`); sizes are :data:`benchmarks.sizes.SIZES`'
(``reduced`` what ``make run`` reproduces, ``paper`` the paper's sizes where feasible;
``--estimate`` gives each one's minutes).
For every experiment and every point of ``points(size)`` it calls ``measure(config,
device)`` and writes ``<out>/<experiment>/<key>.json`` in :mod:`benchmarks.results`'
format (config with its ``size``, result, machine, versions, git sha, device, threads).
The timed experiments run first, one point at a time; the untimed ones
(:data:`benchmarks.experiments.UNTIMED`: errors, ranks, counts) after them, in
``--processes`` processes (two on a 2-core CPU) that each take the next unclaimed chunk of
points, since nothing they record depends on the load (:mod:`benchmarks.untimed`). What the
runner's functions share travels as one frozen :class:`RunContext`.

Each size has its own default ``--out`` (:data:`DEFAULT_OUT`: ``results/reproduce/results``
for ``reduced``, what ``make run`` draws; ``results/reproduce-<size>/results`` for the
others), and a result is never written over one of another size, device or dtype: a run
that would is refused before it measures anything, naming the file (choose another
``--out``).

A run is resumable: a point whose result file exists with the same config, recorded on
the same device and dtype, and whole (every key of the format, and the fields its
experiment's figure reads, :data:`fraq._fields.REQUIRED`, each of its type: numbers where
numbers belong, timing samples a list of finite numbers) is not measured again; a file
that is not whole is measured again, with one line naming it and why (the file is written
whole or not at all, so an interrupted run leaves no half result), so rerunning the same
command after a crash or Ctrl-C continues where it stopped. ``--rerun`` measures every point again. Progress on
stderr (:mod:`fraq._progress`:
a line redrawn at a terminal, one plain line per finished point at most every 10 s
elsewhere) shows the point being measured and the time left, weighing each point by its
experiment's estimate of its cost (``cost(config)``, :mod:`benchmarks.experiments`)
scaled by the steady rate measured so far; ``--estimate`` prints the estimates without
measuring. Ctrl-C stops it with one line: the results written are kept, and the same
command goes on.

``analysis.reproduce`` draws the figures and the report from the files. The device is
``--device``, else ``FRAQ_BENCH_DEVICE``, else cpu; a device this machine does not have
stops the run at once with a one-line error (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks.experiments import DEFAULT, EXPERIMENTS, UNTIMED
from benchmarks.experiments import cost as registry_cost
from benchmarks.experiments import timing_cost as registry_timing_cost
from benchmarks.untimed import SPLIT_S, HelperFailed, chunks, measure_shared, untimed_processes
from fraq.internals import plain
from fraq.internals import Progress

THREADS = 1
"""Default torch threads: on 2-core machines shared with other jobs, 2-thread LAPACK calls
have been seen to slow 100x."""


DEFAULT_OUT = {"reduced": Path("results/reproduce/results"), "paper": Path("results/reproduce-paper/results"),
               "tiny": Path("results/reproduce-tiny/results")}
"""Each size's default results directory: ``make run`` (reduced) and ``make reproduce-paper``
draw from these; a size of its own keeps one size's results from replacing another's."""


class ForeignResult(ValueError):
    """A result path the run would write holds what it must not write over: a result of
    another size, device or dtype, or something that is not a result file (a directory)."""


def default_out(size: str) -> Path:
    """The default ``--out`` of ``size``."""
    return DEFAULT_OUT.get(size, Path(f"results/reproduce-{size}/results"))


def _device_name(device) -> str:
    """A device as a result records it, ``cuda`` and ``cuda:0`` alike."""
    d = torch.device(device)
    return f"{d.type}:{d.index or 0}" if d.type != "cpu" else "cpu"


def _foreign(path: Path, size: str, device: torch.device, dtype: str = "float32") -> str | None:
    """What in ``path``'s result differs from this run's size, device or dtype (None: nothing,
    or no readable result there: a damaged file is measured again)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return _other(rec, size, device, dtype)


def _other(rec, size: str, device: torch.device, dtype: str = "float32") -> str | None:
    """What in record ``rec`` differs from this run's size, device or dtype, or None (also
    for what is not a record, and for a field it does not record)."""
    if not isinstance(rec, dict):
        return None
    theirs = {"size": (rec.get("config") or {}).get("size") if isinstance(rec.get("config"), dict) else None,
              "device": rec.get("device"), "dtype": rec.get("dtype")}
    mine = {"size": size, "device": _device_name(device), "dtype": dtype}
    for what in ("size", "device", "dtype"):
        if not isinstance(theirs[what], str):
            continue
        try:
            other = _device_name(theirs[what]) if what == "device" else theirs[what]
        except RuntimeError:  # not a device torch knows: another run's, whatever it was
            other = theirs[what]
        if other != mine[what]:
            return f"{what} {theirs[what]}, this run's is {mine[what] if what != 'device' else str(device)}"
    return None


def _finished(path: Path, config: dict, size: str, device: torch.device) -> tuple[bool, str | None]:
    """(whether ``path`` holds a finished result of ``config``, what damages it when the
    config is this point's but the record is not whole: :func:`fraq._results.damage`).

    Finished means: this point's config, recorded on this run's device and dtype, and
    whole (every key of the format, and the fields its experiment's result holds, each of
    its type). A whole result of another device or dtype is not finished and not damaged:
    the run refuses to write over it (:func:`_foreign`)."""
    from fraq.internals import damage

    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return False, None
    if not isinstance(rec, dict) or rec.get("config") != json.loads(json.dumps(config, default=str, allow_nan=False)):
        return False, None
    why = damage(rec)
    if why is not None:
        return False, why
    return _other(rec, size, device) is None, None


def _config(config: dict, size: str) -> dict:
    """What a result file records as its config: the point's, and the size it belongs to."""
    return {**config, "size": size}


def plan(experiments=DEFAULT, size: str = "reduced") -> list[tuple[str, object, dict]]:
    """(experiment, module, config) for every point of ``experiments`` at ``size``, in order."""
    from benchmarks import experiments as registry

    out = []
    for name in experiments:
        module = registry.get(name)
        out += [(name, module, config) for config in module.points(size)]
    return out


def _ordered(experiments) -> tuple:
    """``experiments`` in the runner's order: the timed ones as given, then the untimed ones."""
    return tuple(e for e in experiments if e not in UNTIMED) + tuple(e for e in experiments if e in UNTIMED)


def estimate(experiments=DEFAULT, size: str = "reduced", threads: int = THREADS) -> str:
    """Per experiment, its points and their estimated minutes on an idle machine (the timed
    points one at a time on one core; the untimed ones split between the processes
    :func:`untimed_processes` gives this machine), and the total."""
    experiments = _ordered(experiments)
    split = untimed_processes([p for p in plan(experiments, size) if p[0] in UNTIMED], threads, torch.device("cpu"))
    lines, total = [], 0.0
    for name in experiments:
        configs = [c for n, _, c in plan((name,), size)]
        minutes = sum(registry_cost(name, c) for c in configs) / 60 / (split if name in UNTIMED else 1)
        total += minutes
        lines.append(f"{name:<16} {len(configs):>4} points  {minutes:6.1f} min"
                     + (f" ({split} processes)" if name in UNTIMED and split > 1 else ""))
    return "\n".join(lines + [f"{'total':<16} {'':>4}         {total:6.1f} min (estimated, idle)"])


def described(config: dict, result: dict) -> dict:
    """``result`` with the fields the analysis shows its method by
    (:func:`benchmarks.measure.described.describe`: ``display_name``, ``family``,
    ``paper_order``, ...) when the point measures one compared method (``config["method"]``);
    a field the experiment's own result holds is kept. A point of several methods
    (tables123) describes each of its rows itself; a ``method`` that names no compared
    method (an experiment's own variant) adds nothing."""
    from benchmarks.measure.described import describe

    method = config.get("method")
    if not isinstance(method, str):
        return result
    try:
        fields = describe(method)
    except ValueError:  # not a compared method: the analysis shows it by its name
        return result
    return {**fields, **result}


@dataclass(frozen=True)
class RunContext:
    """What one run's functions share: where and how it measures (``out``, ``size``,
    ``device``, ``threads``, ``rerun``), the points it measures (``todo``), and its running
    state: the progress display (``bar``, None without one), the counts it returns
    (``counts``), the experiments whose ``prepare_points`` ran (``prepared``), each point's
    cost by ``id(config)`` (``cost_of``) and what of it the point's paired timing already
    showed done (``credited``). Frozen: a function is handed one run, never a changed one;
    the containers are the run's state, changed in place as points are measured."""

    out: Path
    size: str
    device: torch.device
    threads: int
    rerun: bool
    todo: tuple
    bar: Progress | None
    counts: dict
    prepared: set
    cost_of: dict
    credited: dict


def run(out: Path, experiments=DEFAULT, *, size: str = "reduced", device: torch.device = torch.device("cpu"),
        threads: int = THREADS, progress: bool = True, rerun: bool = False, processes: int | None = None,
        claims: Path | None = None) -> dict:
    """Measure every point of ``experiments`` not yet in ``out`` (all of them with ``rerun``)
    at ``threads`` torch threads; returns ``{"measured": n, "skipped": n, "seconds": s,
    "processes": n}`` (and ``"helped"``: how many of those measured the other processes wrote).

    The timed experiments run first, in ``experiments``' order, each point alone; then the
    :data:`~benchmarks.experiments.UNTIMED` ones, in ``processes`` processes (default
    :func:`~benchmarks.untimed.untimed_processes`): this one and fresh interpreters
    (``--claims``), each taking the next chunk of points (:func:`~benchmarks.untimed.chunks`)
    no other has claimed, so they finish together however wrong the estimates are; their
    results are the same in any process (:mod:`benchmarks.untimed`). ``claims``: the claims
    directory of such a run, for a helper process, which measures only the untimed
    experiments' chunks it claims there."""
    from benchmarks.measure import threads as torch_threads

    t0 = time.perf_counter()
    out, device = Path(out), torch.device(device)
    counts = {"measured": 0, "skipped": 0}
    experiments = _ordered(experiments)
    names = tuple(e for e in experiments if e in UNTIMED)
    with torch_threads(threads):
        todo = _todo(out, experiments, size, device, rerun, counts, helper=claims is not None)
        untimed = [p for p in todo if p[0] in UNTIMED]
        parts = chunks(plan(names, size)) if untimed else []  # the same in every process: the plan's alone
        if claims is not None or not untimed:
            split = 1
        else:
            split = untimed_processes(untimed, threads, device) if processes is None else max(1, int(processes))
            split = min(split, len(parts))
        costs = [registry_cost(name, config) / (split if name in UNTIMED else 1) for name, _, config in todo]
        # The display advances by each point's estimated cost (seconds on one idle core): time
        # left = the steady rate (seconds per cost, the first point left out) x cost left,
        # right however the machine's speed or load scales the estimates. Untimed points
        # count 1 / split of their cost: that many processes measure them at once.
        bar = Progress(sum(costs), desc=f"{size} on {device}", stream=sys.stderr,
                       count=lambda n, total: f"{counts['measured']}/{len(todo)} points")
        ctx = RunContext(out=out, size=size, device=device, threads=threads, rerun=rerun, todo=tuple(todo),
                         bar=bar if progress else None, counts=counts, prepared=set(),
                         cost_of={id(config): c for (_, _, config), c in zip(todo, costs)}, credited={})
        try:
            timed = [(p, c) for p, c in zip(todo, costs) if p[0] not in UNTIMED]
            rest = [(p, c) for p, c in zip(todo, costs) if p[0] in UNTIMED]
            for point, c in timed + (rest if split == 1 and claims is None else []):
                _one(ctx, point, c)
            if split > 1 or claims is not None:
                measure_shared(ctx, names, rest, parts, split, claims, partial(_one, ctx))
        finally:
            if progress:
                bar.close()
    return dict(counts, seconds=time.perf_counter() - t0, processes=split)


def _todo(out: Path, experiments: tuple, size: str, device: torch.device, rerun: bool, counts: dict,
          helper: bool) -> list[tuple[str, object, dict]]:
    """The planned points of ``experiments`` (the untimed ones alone for a ``helper``) whose
    result in ``out`` is not finished (every one with ``rerun``), counting the others in
    ``counts["skipped"]`` and the damaged ones in ``counts["damaged"]``, each damaged file
    named in one line. Raises :class:`ForeignResult` before anything is measured when a
    path the run would write holds what it must not write over."""
    from benchmarks.results import result_path

    points = plan(experiments, size)
    if helper:
        points = [p for p in points if p[0] in UNTIMED]
    todo, damaged = [], []
    for name, module, config in points:
        path = result_path(out, name, module.key(config))
        whole, why = (False, None) if rerun else _finished(path, _config(config, size), size, device)
        if whole:
            counts["skipped"] += 1
        else:
            todo.append((name, module, config))
            if why is not None:
                damaged.append(f"{path}: {why}")
    for name, module, config in todo:  # before any measurement: nothing of another run is replaced
        path = result_path(out, name, module.key(config))
        folder = path.parent
        if folder.exists() and not folder.is_dir() or path.exists() and not path.is_file():
            where, kind, what = (folder, "a file", "results") if folder.exists() and not folder.is_dir() else \
                (path, "a directory" if path.is_dir() else "not a file", "a result")
            raise ForeignResult(f"--out(={str(out)!r}) holds {str(where)!r}, {kind} where this run writes "
                                f"{what}: move it away or choose another --out")
        why = _foreign(path, size, device) if path.exists() else None
        if why is not None:
            raise ForeignResult(f"--out(={str(out)!r}) holds {str(path)!r}, a result of {why}: it is never "
                                f"written over; choose another --out (the default of --size {size} is "
                                f"{default_out(size)}), or move that run's results away to measure here")
    for line in damaged:  # one line each, once nothing is refused: measured again, never drawn as measured
        print(f"remeasuring {line}", file=sys.stderr)
    counts["damaged"] = len(damaged)
    return todo


def _one(ctx: RunContext, point: tuple, c: float) -> None:
    """Measure one point and write its result; advance the display by its cost ``c`` (less
    what its paired timing already showed)."""
    from benchmarks.results import write_result

    name, module, config = point
    key = module.key(config)
    bar = ctx.bar
    if bar is not None:
        bar.label(f"{name} {key}"[:70])
    if name not in ctx.prepared and hasattr(module, "prepare_points"):  # measurements spanning its points
        ctx.prepared.add(name)
        these = [cf for n, _, cf in ctx.todo if n == name]
        if bar is not None and hasattr(module, "timing_cost"):
            bar.label(f"{name}: paired timings of {len(these)} points"[:70])
            parts = SimpleNamespace(timing_cost=partial(registry_timing_cost, name))
            module.prepare_points(these, ctx.device, on_group=partial(_credit, parts, bar, ctx.credited, ctx.cost_of))
        else:
            module.prepare_points(these, ctx.device)
    write_result(ctx.out, name, key, _config(config, ctx.size), described(config, module.measure(config, ctx.device)),
                 device=ctx.device)
    ctx.counts["measured"] += 1
    if bar is not None:
        bar.update(c - ctx.credited.pop(id(config), 0.0))


def _credit(module, bar: Progress, credited: dict, cost_of: dict, configs: list[dict]) -> None:
    """A group's paired timing is done: show its points' timing share (``module.timing_cost``:
    the experiment's, scaled as its costs are, :func:`benchmarks.experiments.timing_cost`;
    at most each point's whole cost) as done, so the display moves and its rate holds while
    an experiment's timings run before its first point is written."""
    for c in configs:
        share = min(module.timing_cost(c), cost_of.get(id(c), 0.0)) - credited.get(id(c), 0.0)
        if share > 0:
            credited[id(c)] = credited.get(id(c), 0.0) + share
            bar.update(share)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.cases import check_environment
    from benchmarks.device import checked
    from benchmarks.measure.kernels import table_path
    from benchmarks.sizes import SIZES
    from fraq.internals import check_dir_out
    from fraq.aggregators import MethodLoadError, load_outside_methods

    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=plain(__doc__.split("\n")[0]))
    ap.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                    help=f"any of {', '.join(EXPERIMENTS)} (default: {' '.join(DEFAULT)})")
    ap.add_argument("--size", choices=list(SIZES), default="reduced", help="default reduced")
    ap.add_argument("--out", type=Path, help="results directory (default: each size its own, " + ", ".join(
        f"{size} {default_out(size)}" for size in SIZES) + "); a result of another size, device or dtype there "
        "is never written over")
    ap.add_argument("--device", help="cpu, cuda or cuda:N (default: FRAQ_BENCH_DEVICE, else cpu)")
    ap.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS})")
    ap.add_argument("--rerun", action="store_true", help="measure points whose results already exist again")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--processes", type=int, metavar="N",
                    help="processes the untimed experiments (" + ", ".join(UNTIMED) + ": errors, ranks and counts, "
                    "measured after the timed ones) are split between (default: 2 on a CPU with a core for each "
                    f"beside --threads, where their estimate is at least {SPLIT_S:g} s per process; else 1)")
    ap.add_argument("--claims", type=Path, help=argparse.SUPPRESS)  # a helper of a run: the run's claims directory
    ap.add_argument("--estimate", action="store_true",
                    help="print each experiment's estimated minutes on an idle machine (its points' cost; the "
                    "untimed ones divided between the processes that measure them) and exit")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = default_out(args.size)
    unknown = [e for e in args.experiments if e not in EXPERIMENTS]
    if unknown:
        ap.error(f"EXPERIMENT(={unknown[0]!r}) is not one of {', '.join(EXPERIMENTS)}")
    try:
        device = checked(args.device)
        check_dir_out(args.out, "--out")
        check_environment()
        load_outside_methods()
        table_path(device)  # the kernel table can be saved (FRAQ_KERNEL_TABLE), before anything is measured
    except (ValueError, MethodLoadError) as exc:  # malformed, not on this machine, a plug-in that fails: one line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads < 1:
        ap.error(f"--threads(={args.threads}) must be >= 1")
    if args.processes is not None and args.processes < 1:
        ap.error(f"--processes(={args.processes}) must be >= 1")
    if args.estimate:
        print(estimate(tuple(args.experiments) or DEFAULT, args.size, args.threads))
        return 0
    try:
        done = run(args.out, tuple(args.experiments) or DEFAULT, size=args.size, device=device,
                   threads=args.threads, progress=not args.no_progress, rerun=args.rerun, processes=args.processes,
                   claims=args.claims)
    except KeyboardInterrupt:
        print(f"interrupted: the results written in {args.out} are kept; the same command without --rerun "
              f"measures the rest", file=sys.stderr)
        return 130
    except ForeignResult as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except HelperFailed as exc:
        print(f"error: {exc}; the results written are kept (rerun to go on)", file=sys.stderr)
        return 1
    except OSError as exc:  # a result could not be written (disk full, made read-only meanwhile)
        from fraq.internals import failed_write

        print(f"error: {failed_write(exc)}; the results written before it are kept (rerun to go on)",
              file=sys.stderr)
        return 1
    print(f"results: {args.out} ({done['measured']} measured, {done['skipped']} already there; "
          f"{done['seconds'] / 60:.1f} min, device {device}, {args.threads} thread(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
