"""The campaign: the plan's points measured in one long-lived process, under a watchdog, into a ledger.

    python -m benchmarks.gpu_check --campaign --out DIR [--device cuda] [--budget-s 420] [--size gpu]
        [--experiments NAME,...] [--watchdog-floor-s 30]

**What it measures.** The plan (:func:`benchmarks.gpu_check.plan.plan`) of the device kind
the measuring process reports and the working tree's fingerprint: every prioritized point
that neither the committed ledger (``docs/results/gpu``: the archives and ``ledger.json``)
nor ``DIR/ledger.json`` holds for them, highest priority first (``--experiments``: those
experiments' alone). The plan's whole checks (the CUDA tests, the asv and pytest-benchmark
quick runs) are not points: each runs at its priority, after that
priority's points, as a GPU check of that one part in ``DIR/checks/NAME`` (:func:`_run_check`),
and goes into the ledger as experiment ``check`` (``--checks``: those alone; with
``--experiments`` and no ``--checks``, none). Points are sent in units (:func:`units`): consecutive points of
one experiment, those of one group where the experiment times a group's methods together
(``prepare_points`` and ``group``), so their paired timing is one step of the unit's first point.

**How.** One measuring process (:mod:`benchmarks.gpu_check.measurer`) imports torch,
brings the device up and imports CuPy once, then measures unit after unit. Before a unit is
sent, its expected seconds (the points' :meth:`~benchmarks.gpu_check.ledger.Ledger.cost`)
must fit what is left of the budget less :data:`RESERVE_S`; one that does not is left for a
later call and the smaller ones after it are still tried (first fit, as the plan). Each
point has a watchdog: ``max(WATCHDOG_FACTOR x its expected seconds, --watchdog-floor-s)``
(the first point of a unit is charged the whole unit's, its paired timing being in it). A
point past its watchdog is killed with the process (its process group: launches it started
go too), recorded ``timed out`` with its seconds, and a fresh process goes on with the
unit's next point; a point whose process dies is recorded ``crashed`` with the exit status,
the same way (one that falls silent or dies between points is charged to the point it
would have started next, so every restart moves the call on). A unit whose paired timing
(its ``prepare`` step) did not finish is recorded whole: its points share that timing. A
point still running when the budget ends is killed and recorded nowhere (``cut``: the next
call measures it).

**What it writes** in ``DIR`` (:data:`FILES`): ``results/<experiment>/<key>.json`` (each
the moment its point is measured, whole or not at all, with its ``seconds`` and
``steps``), ``ledger.json`` (an entry per point tried: measured, timed out, crashed or
failed, with its seconds; :func:`benchmarks.gpu_check.ledger.append`, read, added, written
whole beside and renamed, after every point), ``campaign.log`` (every step of every
point with its seconds, the measuring process's output, each restart and why),
``device.json`` (:func:`benchmarks.gpu_check.child.device_record`, on the first start),
``cupy-kernel-cache/`` (CuPy's compiled kernels, seeded from the committed ones:
:func:`kernel_cache`) and, at the end, ``results.tar.gz`` (the results packed, as the
committed folders hold them).
A call stopped from outside leaves whole files: every result and the ledger up to its
last point.

**Resuming.** A second call with the same ``DIR`` reads ``DIR/ledger.json`` and measures
only what it lacks: nothing is measured twice with the same code (fingerprint) on the same
device kind, and a point that timed out, crashed or failed is not tried again with that
code. A ``DIR`` holding results of another device or size, or files this command does not
write, is refused before any work; a call holds ``DIR`` alone (:mod:`benchmarks.gpu_check.folder`).
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.gpu_check import ledger

__all__ = ["FILES", "KERNEL_CACHE", "RESERVE_S", "SEED", "START_LIMIT_S", "WATCHDOG_FACTOR", "WATCHDOG_FLOOR_S",
           "Options", "campaign", "kernel_cache", "refused", "units"]

ROOT = Path(__file__).resolve().parents[2]

KERNEL_CACHE = "cupy-kernel-cache"
"""``DIR``'s folder of CuPy's compiled kernels: the measuring process's ``CUPY_CACHE_DIR``
(:func:`kernel_cache`), so the kernels a call compiles come back with its results."""

SEED = ROOT / "docs" / "results" / "gpu" / KERNEL_CACHE
"""The committed kernels of earlier calls (copied here from a call's ``DIR/cupy-kernel-cache``):
each call starts from them, so a kernel is compiled once per CuPy version and GPU
architecture (both in CuPy's cache keys), not once per call."""

FILES = ("results", "results.tar.gz", "ledger.json", "campaign.log", "device.json", KERNEL_CACHE, "checks")
"""Everything the campaign writes in ``DIR``."""


def kernel_cache(out: Path, seed: Path = SEED) -> Path:
    """``out``'s :data:`KERNEL_CACHE` folder, made where absent, with every file of ``seed``
    it lacks copied in (a file it holds already, from an earlier call on this folder, is
    kept: CuPy names a kernel's file by its key, so the same name is the same kernel).
    CuPy writes what it compiles there once the measuring process's ``CUPY_CACHE_DIR``
    names it; a CPU call leaves it as seeded."""
    import shutil

    cache = out / KERNEL_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    if seed.is_dir():
        for f in seed.iterdir():
            if f.is_file() and not (cache / f.name).exists():
                shutil.copyfile(f, cache / f.name)
    return cache

WATCHDOG_FACTOR = 3.0
"""A point's watchdog in expected seconds: a point's cost is its newest measured seconds on
that device kind, or an estimate scaled by the kind's measured-over-estimated ratio; three
times that holds a slow clock, a busy host and an estimate a third of the truth, while a
point that hangs (the H200's Tables 1-3 point that logged nothing for 370 s) gives its
time back after three of its own."""

WATCHDOG_FLOOR_S = 30.0
"""The shortest watchdog: a point of milliseconds still builds its inputs, creates cuBLAS
and cuSOLVER handles on its first call, and has CuPy compile its kernels (seconds each);
a call's budget holds a few of these for a hang."""

START_LIMIT_S = 180.0
"""Seconds a measuring process may take to report ready: torch's import, a CUDA context
and CuPy's import take 10-20 s on the GPU images used; a process past this is killed."""

STARTS = 3
"""Starts in a row that may fail (no ready report) before the campaign stops."""

RESERVE_S = 5.0
"""Seconds of the budget kept for packing ``results.tar.gz`` and the summary (at most a tenth of it)."""


@dataclass(frozen=True)
class Options:
    """One call's options, checked by :func:`benchmarks.gpu_check.__main__.main`."""

    out: Path
    device: str
    size: str = "gpu"
    budget_s: float = 420.0
    experiments: tuple[str, ...] | None = None
    watchdog_floor_s: float = WATCHDOG_FLOOR_S
    checks: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Point:
    """A planned point: its experiment, key, recorded config and expected seconds."""

    experiment: str
    key: str
    config: dict
    seconds: float


@dataclass
class Tally:
    """What the call did: points per state, those cut or left, the checks left, restarts."""

    states: dict[str, list[str]] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)
    unplanned: list[int] = field(default_factory=list)
    restarts: int = 0

    def add(self, state: str, name: str) -> None:
        self.states.setdefault(state, []).append(name)


def units(points: list[Point]) -> list[list[Point]]:
    """``points`` in units, in order: consecutive points of one experiment whose module has
    ``prepare_points`` and the same ``group(config)``, else each point alone."""
    from benchmarks.experiments import get

    out: list[list[Point]] = []
    last = None
    for p in points:
        module = get(p.experiment)
        grouped = hasattr(module, "prepare_points") and hasattr(module, "group")
        group = json.dumps(module.group(p.config), sort_keys=True, default=str, allow_nan=False) if grouped else None
        tag = (p.experiment, group) if grouped else None
        if tag is None or tag != last:
            out.append([])
        out[-1].append(p)
        last = tag
    return out


def refused(out: Path, *, device, size: str) -> str | None:
    """Why ``out`` cannot take this call's results (None: it can): a file this command does
    not write, or a result of another device or size (:func:`benchmarks.run._foreign`)."""
    from benchmarks.gpu_check.folder import LOCK
    from benchmarks.run import _foreign

    if not out.is_dir():
        return None
    ours = set(FILES) | {LOCK}
    foreign = sorted(p.name for p in out.iterdir() if p.name not in ours and not p.name.endswith(".tmp"))
    if foreign:
        return (f"--out(={str(out)!r}) holds files the campaign does not write ({', '.join(foreign[:3])}"
                f"{', ...' if len(foreign) > 3 else ''}): give it an empty or new directory")
    for path in sorted((out / "results").rglob("*.json")) if (out / "results").is_dir() else []:
        why = _foreign(path, size, device)
        if why is not None:
            return f"--out(={str(out)!r}) holds {path.relative_to(out)}, a result of {why}: give a new directory"
    return None


class _Measurer:
    """The measuring process, its answers read by a thread into a queue (None: its end)."""

    def __init__(self, opts: Options, start: float, log):
        from benchmarks.measure.children import child_env, die_with_parent

        cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--measurer", "--device", opts.device, "--size",
               opts.size, "--out", str(opts.out), "--start", repr(start)]
        env = child_env(PYTHONUNBUFFERED="1", FRAQ_BENCH_DEVICE=opts.device,
                        CUPY_CACHE_DIR=str(kernel_cache(opts.out)))
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                     start_new_session=True, preexec_fn=die_with_parent())
        self.started, self.greeted = time.time(), False
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.answers.put(json.loads(line))
            except ValueError:
                continue
        self.answers.put(None)

    def next(self, timeout: float) -> dict | None | str:
        """The next answer, None when the process has ended, ``"timeout"`` when none came."""
        try:
            return self.answers.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return "timeout"

    def send(self, **order) -> bool:
        try:
            self.proc.stdin.write(json.dumps(order, allow_nan=False) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def kill(self) -> int:
        """Kill the process and what it started (its process group); returns its exit status."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.wait()

    def stop(self) -> None:
        """Ask it to stop; kill it where it does not within 10 s."""
        if self.proc.poll() is None:
            self.send(stop=True)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


class _Call:
    """One campaign call's state: the log, the ledger file, the tally and the measuring process."""

    def __init__(self, opts: Options, start: float, log, fp: str):
        self.opts, self.start, self.log, self.fp = opts, start, log, fp
        self.end = start + opts.budget_s - min(RESERVE_S, opts.budget_s / 10)
        self.book = opts.out / "ledger.json"
        self.tally = Tally()
        self.kind: str | None = None
        self.measurer: _Measurer | None = None

    def say(self, text: str) -> None:
        line = f"[+{time.time() - self.start:7.1f} s] campaign: {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def record(self, p: Point, state: str, seconds: float, detail: str = "") -> None:
        """``p``'s entry added to ``DIR/ledger.json`` and the tally."""
        t = time.time()
        ledger.append(self.book, [ledger.Entry(self.kind, self.fp, p.experiment, p.key,
                                               time.strftime("%Y-%m-%dT%H:%M:%S"), round(seconds, 3),
                                               f"campaign {self.opts.out.name}", p.config, state, detail)])
        self.tally.add(state, f"{p.experiment}/{p.key}")
        self.say(f"{p.experiment}/{p.key}: {state} {seconds:.2f} s{f' ({detail})' if detail else ''}; "
                 f"ledger {time.time() - t:.2f} s")

    def ready(self) -> bool:
        """A measuring process ready for a unit (started where there is none); False when
        :data:`STARTS` starts in a row failed or the budget ended first."""
        if self.measurer is not None and self.measurer.greeted and self.measurer.proc.poll() is None:
            return True
        for attempt in range(STARTS):
            t = time.time() if self.measurer is None or self.measurer.greeted else self.measurer.started
            if self.measurer is None or self.measurer.greeted:
                self.measurer = _Measurer(self.opts, self.start, self.log)
            hello = self.measurer.next(min(START_LIMIT_S, self.end - time.time()))
            if isinstance(hello, dict) and "hello" in hello:
                self.tally.restarts += self.kind is not None
                self.measurer.greeted = True
                if self.kind is not None and hello["hello"] != self.kind:
                    self.say(f"the measuring process reports {hello['hello']!r}, the first {self.kind!r}: stopping")
                    return False
                self.kind = hello["hello"]
                self.say(f"measuring process {self.measurer.proc.pid} ready in {time.time() - t:.2f} s "
                         f"({hello['seconds']:.2f} s its own): {self.kind}")
                return True
            status = self.measurer.kill()
            self.measurer.greeted = True  # spent: the next try starts another
            self.say(f"measuring process did not start (exit status {status}, {time.time() - t:.2f} s; "
                     f"try {attempt + 1} of {STARTS})")
            if time.time() >= self.end:
                return False
        return False

    def run_unit(self, unit: list[Point]) -> list[Point]:
        """Measure ``unit``; returns its points to measure in a fresh process (those after one
        that timed out or crashed)."""
        m = self.measurer
        if not m.send(unit=[[p.experiment, p.key] for p in unit]):
            return unit
        current, began, prepared, capped = None, time.time(), False, False
        deadline = began + self.opts.watchdog_floor_s
        answered: set[int] = set()
        while True:
            msg = m.next(deadline - time.time())
            if isinstance(msg, dict) and "start" in msg:
                current, began, prepared = msg["start"], time.time(), False
                expected = sum(p.seconds for p in unit) if current == 0 else unit[current].seconds
                deadline = began + max(WATCHDOG_FACTOR * expected, self.opts.watchdog_floor_s)
                capped = deadline > self.end
                deadline = min(deadline, self.end)
            elif isinstance(msg, dict) and msg.get("step") == "prepare":
                prepared = True
            elif isinstance(msg, dict) and ("done" in msg or "failed" in msg):
                i = msg["done"] if "done" in msg else msg["failed"]
                answered.add(i)
                if "done" in msg:
                    self.record(unit[i], "measured", msg["seconds"],
                                f"skipped: {msg['skipped']}" if msg["skipped"] else "")
                else:
                    self.record(unit[i], "failed", msg["seconds"], msg["error"])
                current, began, capped = None, time.time(), False
                deadline = began + self.opts.watchdog_floor_s
            elif isinstance(msg, dict) and msg.get("unit_done"):
                return []
            elif msg == "timeout" or msg is None:
                if current is None:  # silent or gone between points: charged to the point it would start next
                    current = min(set(range(len(unit))) - answered, default=None)
                    if current is None:
                        self.measurer.kill()
                        return []
                return self._ended(unit, current, began, prepared, timed_out=msg == "timeout",
                                   cut=msg == "timeout" and capped)

    def _ended(self, unit: list[Point], current: int, began: float, prepared: bool, *,
               timed_out: bool, cut: bool) -> list[Point]:
        """The measuring process hung or died inside ``unit``: record the point it was in
        (with the unit's other points where their paired timing was not done), kill the
        process; returns the points still to measure. ``cut``: the budget ended first."""
        seconds = time.time() - began
        status = self.measurer.kill()
        p = unit[current]
        if cut:
            self.tally.cut.append(f"{p.experiment}/{p.key}")
            self.say(f"{p.experiment}/{p.key}: cut at the end of the budget after {seconds:.2f} s (not recorded)")
            return unit[current + 1:]
        state = "timed out" if timed_out else "crashed"
        detail = f"killed after {seconds:.1f} s by the watchdog" if timed_out else f"exit status {status}"
        shared = current == 0 and not prepared and hasattr(_module(p.experiment), "prepare_points")
        hit = unit if shared and len(unit) > 1 else [p]
        for q in hit:
            self.record(q, state, seconds, detail + (" (in its group's paired timing)" if len(hit) > 1 else ""))
        self.say(f"restarting the measuring process ({state} in {p.experiment}/{p.key})")
        return [] if len(hit) > 1 else unit[current + 1:]


def _module(experiment: str):
    from benchmarks.experiments import get

    return get(experiment)


def _level(call: _Call, book: ledger.Ledger, level: int) -> list[Point] | None:
    """The points of priority ``level`` that ``book`` lacks, in the plan's order (None: no
    experiment of this call has points at ``level``)."""
    from benchmarks.gpu_check import plan
    from benchmarks.run import _config

    opts = call.opts
    exps = tuple(dict.fromkeys(e for p, e, _, _ in plan.PRIORITIES
                               if p == level and (opts.experiments is None or e in opts.experiments)))
    if not exps:
        return None
    taken, _ = plan.plan(book, call.kind, call.fp, math.inf, opts.size, exps)
    configs = {(exp, key): config for _, exp, key, config in plan._points(opts.size, exps)}
    return [Point(i.experiment, i.key, _config(configs[(i.experiment, i.key)], opts.size), i.seconds)
            for i in taken if i.priority == level]


def _checks_left(call: _Call, book: ledger.Ledger) -> list[tuple[int, str, float]]:
    """The plan's whole checks (not points) that ``book`` lacks, as ``(priority, name,
    expected seconds)``: the GPU check's parts of those names (the newest measured seconds
    on this kind where known, else the plan's figure)."""
    from benchmarks.gpu_check import plan

    out = []
    for p, name, seconds, _ in plan.CHECKS:
        if ("check", name) in book.measured(None if p == plan.ONCE_PER_FINGERPRINT else call.kind, call.fp):
            continue
        known = book.seconds(call.kind, "check", name)
        out.append((p, name, known if known is not None else seconds))
    return out


NOT_HERE_STATE = "not on this device"
"""A part's state where it needs another device (:data:`benchmarks.gpu_check.child.NOT_HERE`,
which imports torch; this process does not)."""

CHECKS_DIR = "checks"
"""``DIR``'s folder of the whole checks: ``checks/NAME/``, each the folder of a GPU check of
that one part (:mod:`benchmarks.gpu_check`: its summary, log and files)."""

_CHECK_STATES = {"done": "measured", NOT_HERE_STATE: "measured", "failed": "failed", "cut": "timed out"}
"""A GPU check part's state -> the ledger's (a part that needs a device this is not has still
run: it says so, and the ledger's detail keeps it)."""


def _run_check(call: _Call, name: str, seconds: float) -> None:
    """Whole check ``name`` as a GPU check of that part alone, in ``DIR/checks/NAME``, under
    a watchdog like a point's (``max(WATCHDOG_FACTOR x seconds, --watchdog-floor-s)``, within
    the budget's remainder); its entry in the ledger (experiment ``check``, key ``name``) with
    the part's state and seconds, its output in the log."""
    import re

    from benchmarks.measure.children import child_env, die_with_parent

    out = call.opts.out / CHECKS_DIR / name
    out.mkdir(parents=True, exist_ok=True)
    limit = max(1.0, min(call.end - time.time(), max(WATCHDOG_FACTOR * seconds, call.opts.watchdog_floor_s)))
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--out", str(out), "--device", call.opts.device,
           "--size", call.opts.size, "--budget-s", f"{max(10.0, limit - 5.0):.0f}", "--parts", name]
    call.say(f"check {name}: {seconds:.1f} s expected, watchdog {limit:.0f} s")
    t0 = time.time()
    try:
        subprocess.run(cmd, cwd=ROOT, env=child_env(PYTHONUNBUFFERED="1"), stdout=call.log, stderr=subprocess.STDOUT,
                       timeout=limit, preexec_fn=die_with_parent())
    except subprocess.TimeoutExpired:
        state, detail = "timed out", f"past its watchdog of {limit:.0f} s"
    else:
        summary = (out / "summary.md").read_text() if (out / "summary.md").is_file() else ""
        m = re.search(rf"^\| {re.escape(name)} \| ([a-z ]+?) \|(.*)$", summary, re.M)
        part_state = m.group(1) if m else "failed"
        state = _CHECK_STATES.get(part_state, "failed")
        detail = "" if part_state == "done" else (m.group(2).strip(" |") if m else "the check wrote no summary")
        if part_state == NOT_HERE_STATE:
            detail = NOT_HERE_STATE
    call.record(Point("check", name, None, seconds), state, time.time() - t0, detail)


def _measure(call: _Call, points: list[Point]) -> None:
    """``points`` unit after unit, each where it fits the budget's remainder (first fit)."""
    queue_ = units(points)
    while queue_:
        unit = queue_.pop(0)
        if call.end - time.time() <= 0 or not call.ready():
            call.tally.left += [f"{p.experiment}/{p.key}" for u in [unit, *queue_] for p in u]
            return
        need, room = sum(p.seconds for p in unit), call.end - time.time()
        if need > room:
            call.tally.left += [f"{p.experiment}/{p.key}" for p in unit]
            call.say(f"{unit[0].experiment}/{unit[0].key}" + (f" and {len(unit) - 1} more" if len(unit) > 1 else "")
                     + f": {need:.1f} s expected, {max(0.0, room):.1f} s left: for a later call")
            continue
        rest = call.run_unit(unit)
        if rest:
            queue_.insert(0, rest)


def campaign(opts: Options) -> int:
    """Run one campaign call (see the module's docstring); prints its log lines and a summary.
    Returns 0 when every point tried was measured, 1 otherwise (and when no measuring
    process started).

    The plan is made one priority at a time, each when the ones before it are done: some
    experiments build their points from float64 references (Fig. 4's, half a minute at the
    ``gpu`` size, P5), which a call whose budget the first priorities fill never pays for."""
    from benchmarks.gpu_check import plan
    from benchmarks.gpu_check.parent import _pack, _terminate_as_exit

    start = time.time()
    opts.out.mkdir(parents=True, exist_ok=True)
    _terminate_as_exit()
    log = (opts.out / "campaign.log").open("a")
    call = _Call(opts, start, log, ledger.fingerprint())
    call.say(f"campaign on {opts.device} at size {opts.size}, budget {opts.budget_s:g} s, fingerprint {call.fp}")
    started = False
    try:
        call.measurer = _Measurer(opts, start, log)  # starting while the ledger is read
        t = time.time()
        book = ledger.Ledger(list(ledger.load().entries) + ledger.read(call.book))
        call.say(f"ledger {time.time() - t:.2f} s: {len(book.entries)} entries")
        if not call.ready():
            call.say("no measuring process started: stopping")
            return 1
        started = True
        # --experiments and --checks choose what the call measures: with neither, everything
        points_too = opts.checks is None or opts.experiments is not None
        checks = [] if opts.checks is None and opts.experiments is not None else \
            [c for c in _checks_left(call, book) if opts.checks is None or c[1] in opts.checks]
        levels = sorted({p for p, _, _, _ in plan.PRIORITIES} | {p for p, _, _ in checks})
        for level in levels:
            if call.end - time.time() <= 0:
                call.tally.unplanned.append(level)
                continue
            t = time.time()
            points = _level(call, book, level) if points_too else None
            if points is not None:
                call.say(f"P{level}: {len(points)} points to measure, {sum(p.seconds for p in points):.1f} s "
                         f"expected (planned in {time.time() - t:.2f} s)")
                _measure(call, points)
            for _, name, seconds in (c for c in checks if c[0] == level):
                if seconds > call.end - time.time():
                    call.tally.left.append(f"check/{name}")
                    call.say(f"check {name}: {seconds:.1f} s expected, {max(0.0, call.end - time.time()):.1f} s "
                             "left: for a later call")
                    continue
                _run_check(call, name, seconds)
    finally:
        if call.measurer is not None:
            call.measurer.stop()
        if (opts.out / "results").is_dir():
            _pack(opts.out, opts.out)
        text = _summary(call)
        if started:
            for line in text.splitlines():
                call.say(line)
        log.close()
    return 0 if set(call.tally.states) <= {"measured"} else 1


def _summary(call: _Call) -> str:
    t = call.tally
    lines = [f"summary: {len(t.states.get('measured', []))} measured, "
             + ", ".join(f"{len(t.states.get(s, []))} {s}" for s in ledger.STATES[1:])
             + f", {len(t.cut)} cut, {len(t.left)} left for a later call, {t.restarts} restarts; "
             f"{time.time() - call.start:.1f} s of {call.opts.budget_s:g} s"]
    if t.unplanned:
        lines.append(f"not planned (no time left): {', '.join(f'P{p}' for p in t.unplanned)}")
    for state in ledger.STATES[1:]:
        if t.states.get(state):
            lines.append(f"{state}: {', '.join(t.states[state])}")
    return "\n".join(lines)
