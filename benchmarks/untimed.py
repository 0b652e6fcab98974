"""The untimed experiments' points, shared between processes: how many, in which chunks, and who measures each.

The runner (:mod:`benchmarks.run`) measures the timed experiments first, one point at a time;
the untimed ones (:data:`benchmarks.experiments.UNTIMED`: errors, ranks, counts, nothing the
load beside them changes) after them, in :func:`untimed_processes` processes: this one and
fresh interpreters (``python -m benchmarks.run NAMES --claims DIR``, :class:`Helper`). Every
process takes the next chunk of points (:func:`chunks`) no other has claimed (:func:`claim`:
a file made with ``O_EXCL`` in a temporary claims directory, which one process alone succeeds
in making), so they finish together however wrong the cost estimates are, and the results
are the same in any process.

Why not beside the timed ones: every timed result records the 1-minute load average, and a
second busy process before it would mark it busy for a minute after.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks.experiments import cost as registry_cost

if TYPE_CHECKING:
    from benchmarks.run import RunContext
    from fraq.internals import Progress

__all__ = ["PROCESSES", "SPLIT_S", "Helper", "HelperFailed", "chunks", "claim", "ident", "measure_shared",
           "untimed_processes"]

PROCESSES = 2
"""The most processes measuring the untimed experiments (two cores hold two busy processes on
the machines this suite is built for; more would hold more inputs in memory)."""

SPLIT_S = 20.0
"""The least estimated seconds of untimed points per process worth a second interpreter."""


def untimed_processes(untimed: list, threads: int, device: torch.device) -> int:
    """How many processes measure the untimed points: :data:`PROCESSES` on a CPU with a core
    for each beside the run's ``threads`` (the cores this process may use), where their
    estimated seconds are at least :data:`SPLIT_S` per process (a second interpreter's
    start and inputs cost seconds); 1 on a GPU (one device) or else."""
    if torch.device(device).type != "cpu" or not untimed:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = min(PROCESSES, max(1, cores // max(1, threads)))
    total = sum(registry_cost(name, config) for name, _, config in untimed)
    while n > 1 and total < SPLIT_S * n:
        n -= 1
    return n


def chunks(points: list) -> list[list[tuple[str, str]]]:
    """The (experiment, key) of ``points`` in chunks, in order: consecutive points of one
    experiment whose module's ``chunk(config)`` is the same (Fig. 4's points of one group and
    method share a dense decomposition), else each point its own. The same in every process
    (it depends on the plan alone), so a chunk's index names it in the claims directory."""
    out: list[list[tuple[str, str]]] = []
    last = None
    for name, module, config in points:
        tag = (name, module.chunk(config) if hasattr(module, "chunk") else module.key(config))
        if tag != last:
            out.append([])
            last = tag
        out[-1].append((name, module.key(config)))
    return out


def claim(folder: Path, index: int) -> bool:
    """Claim chunk ``index`` for this process: True when no process claimed it before (the
    claim is a file made with O_EXCL, which one process alone succeeds in making)."""
    try:
        os.close(os.open(folder / str(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def ident(point: tuple) -> tuple[str, str]:
    """A planned point's (experiment, result key): the same in every process."""
    name, module, config = point
    return name, module.key(config)


class HelperFailed(RuntimeError):
    """A helper process measuring untimed points failed: its command, exit status and the end
    of its error output."""

    def __init__(self, helper: "Helper"):
        tail = helper.tail()
        super().__init__(f"a process measuring the untimed points ({' '.join(helper.command[2:])}) exited with "
                         f"status {helper.process.returncode}" + (f": {tail}" if tail else ""))


class Helper:
    """A fresh interpreter measuring the untimed experiments' chunks it claims in ``claims``
    (``python -m benchmarks.run NAMES --claims DIR``, the same size, results directory and
    threads), importing this checkout's packages wherever it runs."""

    def __init__(self, names: tuple, size: str, out: Path, threads: int, rerun: bool, claims: Path,
                 command: list[str] | None = None):
        from benchmarks.measure.children import child_env, die_with_parent

        self.command = command or ([sys.executable, "-m", "benchmarks.run", *names, "--size", size, "--out",
                                    str(Path(out).resolve()), "--device", "cpu", "--threads", str(threads),
                                    "--no-progress", "--claims", str(claims)] + (["--rerun"] if rerun else []))
        self.stderr = tempfile.TemporaryFile()
        self.started = time.time()
        self.process = subprocess.Popen(self.command, env=child_env(), stdout=subprocess.DEVNULL, stderr=self.stderr,
                                        preexec_fn=die_with_parent())

    def tail(self, lines: int = 5) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def stop(self) -> None:
        """End the process if it still runs (the run was interrupted or failed): what it
        wrote is kept, whole."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()


def _poll(unseen: dict, helpers: list, counts: dict, bar: Progress | None) -> None:
    """Count the untimed results other processes wrote since they started as measured, and
    advance ``bar`` by their cost."""
    if not helpers:
        return
    since = min(h.started for h in helpers) - 1.0
    for path in list(unseen):
        try:
            fresh = path.stat().st_mtime >= since
        except OSError:
            continue
        if fresh:
            c = unseen.pop(path)
            counts["measured"] += 1
            counts["helped"] = counts.get("helped", 0) + 1
            if bar is not None:
                bar.update(c)


def measure_shared(ctx: RunContext, names: tuple, rest: list, parts: list, split: int, claims: Path | None,
                   one: Callable[[tuple, float], None]) -> None:
    """Measure the untimed points ``rest`` (``((experiment, module, config), cost)`` each) of
    experiments ``names`` chunk by chunk (``parts``, :func:`chunks` of their whole plan):
    each chunk this process claims, by ``one(point, cost)``. Without ``claims`` this process
    is the run's own: it makes a claims directory and starts ``split - 1`` :class:`Helper`
    processes claiming beside it, counts what they write as measured, waits for them, and
    removes the directory; with ``claims`` it is a helper, claiming there. A helper that
    fails raises :class:`HelperFailed` once this process's chunks are done; on any exit the
    helpers still running are stopped (what they wrote is kept, whole)."""
    from benchmarks.results import result_path

    bar = ctx.bar
    helpers: list[Helper] = []
    folder = claims
    # untimed results another process may write, and their costs
    unseen = {result_path(ctx.out, n, m.key(cf)): c for (n, m, cf), c in rest} if split > 1 else {}
    try:
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="fraq-claims-"))
            helpers = [Helper(names, ctx.size, ctx.out, ctx.threads, ctx.rerun, folder) for _ in range(split - 1)]
        left = {ident(p): (p, c) for p, c in rest}
        for i, chunk in enumerate(parts):
            mine = [left[k] for k in chunk if k in left]
            if not mine or not claim(folder, i):
                continue
            for (name, module, config), c in mine:
                unseen.pop(result_path(ctx.out, name, module.key(config)), None)
                one((name, module, config), c)
                _poll(unseen, helpers, ctx.counts, bar)
        for helper in helpers:
            if bar is not None:
                bar.label(f"the other {len(helpers)} process(es)' untimed points")
            while helper.process.poll() is None:
                time.sleep(0.5)
                _poll(unseen, helpers, ctx.counts, bar)
            _poll(unseen, helpers, ctx.counts, bar)
            if helper.process.returncode != 0:
                raise HelperFailed(helper)
    finally:
        for helper in helpers:
            helper.stop()
        if helpers and folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
