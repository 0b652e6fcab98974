"""Paired timings: the compared calls interleaved round by round, in several fresh processes.

A claim about a ratio of two methods' times ("FRAQ is faster than FlexLoRA") is only as
good as the pairing of their samples. This module builds every such measurement the same
way:

- **Rounds.** One round is one sample of every compared call, in a balanced order
  (:func:`paired_rounds`, :func:`benchmarks.measure.timing.balanced_order`: over n rounds
  each call follows every other equally often, so no method is always the one that runs
  after a heavy call). A drift of the machine's speed (shared or virtual cores,
  frequency scaling) slows the calls of one round alike, so the per-round ratio cancels it;
  :func:`analysis.verdicts.judge` with ``paired=True`` takes the sign-test interval of the
  median of that ratio over rounds.
- **Loop calibration.** A call shorter than ``min_sample`` (:data:`MIN_SAMPLE`, 0.2 ms) is
  timed as a loop of k calls and the sample is the loop's time over k, with k fixed per
  call from its warm-up time (``loops`` in the result). Timer resolution and the
  per-sample overhead (a few microseconds) stay below 1% of every sample, and a fast
  method costs about ``min_sample`` per round while a slow one (a dense SVD, seconds)
  runs once per round: one round is one sample of each, never hundreds of the fast one
  to match the slow one's time.
- **Warm-up.** Every call runs once untimed before the rounds (the calibration call): a
  first call pays for lazy initialisation (MKL's thread pools and workspaces, allocator
  growth), which is not the steady state the claim is about.
- **GC off** while the rounds run (:func:`benchmarks.measure.timing.gc_off`).
- **Launches.** Samples from one process carry none of the run-to-run variance between
  processes (memory layout, which core, the allocator's state); docs/performance.md
  records 10-20% drift between runs. :func:`launched` runs the rounds in ``launches``
  fresh interpreters, one after another, and concatenates them; every sample records its
  ``launch`` and its ``round`` (0..n-1 over all launches), so the analysis pairs sample k
  of every call. One launch runs in this process (the ``tiny`` size of the tests).

Each launch measures every group of a list (a group is one point's compared calls: the
methods at one (sweep, d, r, mode) of Fig. 3), so one experiment pays for ``launches``
interpreter starts, not one per point. The result of each call is
:meth:`~benchmarks.measure.timing.Timing.as_dict` plus ``round``, ``launch``, ``loops``
(k per launch), ``min_sample``, ``launches``, ``compared`` (the keys measured together),
``group`` (a random id shared by the calls of one measurement: the analysis pairs
samples only of results with the same id, so results of two runs are never paired) and
``looks`` (``[first, last]``: the sample counts the rounds could have stopped at, every one
between; ``[n, n]`` for rounds of a fixed count). Rounds that stop at the first decided look
test at every look, so the analysis judges them with the sign-test ranks of all the looks
(:func:`fraq.internals.sign_ranks`), as :func:`decided` did; a result without ``looks`` is
judged as rounds of a fixed count.
"""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from benchmarks.measure.children import child_env, die_with_parent
from benchmarks.measure.timing import Timing, balanced_order, gc_off, sync
from fraq.internals import sign_ranks

__all__ = ["MAX_LOOPS", "MIN_SAMPLE", "SIGN_LEVEL", "Weighted", "cached", "decided", "launched", "measure_groups",
           "merged", "paired_rounds"]

MIN_SAMPLE = 2e-4
"""Shortest sample, seconds: perf_counter's resolution (well under a microsecond) and a
sample's own overhead (one to two microseconds) stay at or below 1% of it. Kept this short
so that every call a figure compares at the ``reduced`` and ``paper`` sizes (each 0.5 ms or
more) is timed as one call per sample, as a server makes it: a looped sample's later calls
run warm, after their own first, while a single call runs after the other methods' calls,
so two calls on either side of the threshold would be timed in different conditions (the
faster one favoured). Only calls under it (the ``tiny`` size's) are looped."""

MAX_LOOPS = 10_000
"""Most calls in one loop: a call that fast is timed over 10,000 calls, enough for the 1%."""


class Weighted(list):
    """A sample made of several calls weighted and summed: ``[(fn, weight), ...]``, the
    sample being sum(weight x time of fn). One module per shape, each shape's time times
    its number of modules, is timed this way (:mod:`benchmarks.experiments.tables123`).

    ``seconds``: each call's time in a warm-up the caller has already run (None: not run):
    :func:`paired_rounds` then sets the loop counts from it and makes no calibration call
    of its own, which for a call of a minute is a minute saved per launch."""

    def __init__(self, pairs=(), seconds: list[float] | None = None):
        super().__init__(pairs)
        self.seconds = seconds


def _parts(call) -> list[tuple[Callable, float]]:
    return list(call) if isinstance(call, Weighted) else [(call, 1.0)]


def _loop_time(fn: Callable, loops: int, device: torch.device) -> float:
    """Seconds of ``loops`` calls of ``fn`` over ``loops`` (CUDA: events, then a synchronize)."""
    if device.type == "cuda":
        stream = torch.cuda.current_stream(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(loops):
            fn()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / loops
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def paired_rounds(calls: dict, rounds: int, *, device: torch.device | str = "cpu", min_sample: float = MIN_SAMPLE,
                  launch: int = 0, min_rounds: int | None = None,
                  decides: list[tuple[str, str]] | None = None, hold: list[tuple[str, str]] | None = None,
                  leave: bool = False) -> dict[str, dict]:
    """``rounds`` rounds of every call in ``calls`` (key -> zero-argument callable, or a
    :class:`Weighted` list), in a balanced order (:func:`~benchmarks.measure.timing.balanced_order`
    over the calls still timed), after one untimed call of each
    (none where a Weighted list carries its warm-up's ``seconds``; a second for a call
    under ``min_sample``, whose time sets its loop count
    k = ceil(min_sample / time), at most :data:`MAX_LOOPS`).

    With ``min_rounds`` (at most ``rounds``), the rounds stop early, after round
    ``min_rounds`` or any later one, once the first call of ``calls`` is decided against
    every other (:func:`decided` with ``against`` the first key: the claims a sweep's
    rounds serve compare one method, listed first, with each of the others), or, with
    ``decides``, once each of those pairs of keys is (the comparisons the claims on the
    group read; a pair naming a key not in ``calls`` is left out): rounds are spent where
    such a comparison is still open, up to ``rounds``.

    With ``decides`` and ``leave`` (one launch: :func:`launched`), a call leaves the rounds
    on its own, after round ``min_rounds`` or a later one, once no pair it belongs to is
    open: a pair counts as decided from the first round it is, and a call in no pair leaves
    at ``min_rounds``; a pair of ``hold`` keeps both its calls to ``rounds`` (a comparison
    a claim judges over several points round by round). The rounds end when no call is
    left. Sample j of every call is still from round j, so the analysis pairs the first n
    samples of the calls it compares (:func:`analysis.verdicts.judge`), n at least
    ``min_rounds``; a slow call no open comparison needs (FLoRIST beside FRAQ against the
    dense path) is not timed in rounds that serve only the others.

    The looks (every round from ``min_rounds`` to ``rounds``) are one group-sequential sign
    test (:func:`decided` with ``looks``): a pair whose calls do not differ is called decided
    at any of them with probability at most 1 - :data:`SIGN_LEVEL`, not that at each.

    Returns ``{key: {"samples": [...], "loops": [k, ...], "round": [...], "launch": [...],
    "looks": [first, last]}}``, sample j of every key from round j (``loops`` one k per part
    of a Weighted call; ``looks`` the round counts the rounds could stop at, ``[rounds,
    rounds]`` without ``min_rounds``)."""
    if rounds < 1:
        raise ValueError(f"rounds(={rounds}) must be >= 1")
    if min_rounds is not None and not 1 <= min_rounds <= rounds:
        raise ValueError(f"min_rounds(={min_rounds}) must be between 1 and rounds(={rounds})")
    device = torch.device(device)
    looks = (rounds, rounds) if min_rounds is None else (min_rounds, rounds)
    keys = list(calls)
    pairs = None if decides is None else [(a, b) for a, b in decides if a in calls and b in calls]
    held = [(a, b) for a, b in hold or () if a in calls and b in calls]
    loops: dict[str, list[int]] = {}
    for k in keys:
        loops[k] = []
        known = getattr(calls[k], "seconds", None)
        for i, (fn, _) in enumerate(_parts(calls[k])):
            sync(device)
            t = known[i] if known is not None else _loop_time(fn, 1, device)
            if t < min_sample:  # the warm-up's own time is inflated by first-call costs: calibrate on a second
                t = _loop_time(fn, 1, device)
            loops[k].append(1 if t >= min_sample else min(MAX_LOOPS, math.ceil(min_sample / max(t, 1e-9))))
    samples: dict[str, list[float]] = {k: [] for k in keys}
    active, open_pairs = list(keys), list(pairs or ())
    sync(device)
    with gc_off():
        for j in range(rounds):
            for k in [active[i] for i in balanced_order(len(active), j)]:
                samples[k].append(sum(w * _loop_time(fn, n, device)
                                      for (fn, w), n in zip(_parts(calls[k]), loops[k])))
            if min_rounds is None or j + 1 < min_rounds:
                continue
            if leave and pairs is not None:
                open_pairs = [(a, b) for a, b in open_pairs
                              if not decided({a: samples[a], b: samples[b]}, pairs=[(a, b)], looks=looks)]
                active = [k for k in active if any(k in p for p in open_pairs + held)]
                if not active:
                    break
            elif decided(samples, against=keys[0], looks=looks) if pairs is None else \
                    decided(samples, pairs=pairs, looks=looks):
                break
    return {k: dict(samples=samples[k], loops=loops[k], round=list(range(len(samples[k]))),
                    launch=[launch] * len(samples[k]), looks=list(looks)) for k in keys}


SIGN_LEVEL = 0.95
"""Coverage of the interval :func:`decided` asks of each pair over all the looks the rounds
make: the analysis's (:data:`analysis.verdicts.LEVEL`)."""


def decided(samples: dict[str, list[float]], level: float = SIGN_LEVEL, *, against: str | None = None,
            pairs: list[tuple[str, str]] | None = None, looks: tuple[int, int] | None = None) -> bool:
    """Whether the pairs of calls are decided: the per-round ratio of their times has a
    sign-test interval for its median wholly above or wholly below 1, so the analysis's
    paired verdict on which is faster is as decisive as more rounds of this kind could make
    it. The pairs: ``pairs`` where given (none: decided), else ``against`` with every other
    key, or (None) every pair. False below the rounds that such an interval needs (6 at 95%).

    ``looks``: ``(first, last)``, the round counts at which the caller asks, every one from
    ``first`` to ``last`` (rounds that stop at the first decided one); the interval's rank at
    this n is then :func:`fraq.internals.sign_ranks` over those looks, so that a pair whose
    calls' times are exchangeable is called decided at *any* of them with probability at most
    1 - ``level`` (6..12 at 95%: 4.30%, where 95% at each look gives 7.1%). None: one look at
    this n (the fixed-n sign test). The analysis reads the same looks from the result
    (``looks``, module docstring) and judges with the same ranks."""
    keys = list(samples)
    n = len(samples[keys[0]]) if keys else 0
    if n == 0:
        return False
    first, last = (n, n) if looks is None else looks
    if not first <= n <= last:
        raise ValueError(f"{n} rounds are not among the looks {first}..{last}")
    j = sign_ranks(range(first, last + 1), level)[n]
    if j is None:
        return False
    if pairs is None:
        pairs = [(against, k) for k in keys if k != against] if against is not None else \
            [(keys[a], keys[b]) for a in range(len(keys)) for b in range(a + 1, len(keys))]
    for a, b in pairs:
        ratios = sorted(x / y for x, y in zip(samples[a], samples[b])) if _timed(samples[a], samples[b]) else [1.0] * n
        if not (ratios[j - 1] > 1.0 or ratios[n - j] < 1.0):
            return False
    return True


def _timed(*timings: Sequence[float]) -> bool:
    """Whether every time in ``timings`` is one a ratio can be taken of: positive and finite.
    A zero (a clock too coarse for the call) or a NaN or infinity (a failed measurement) has no
    ratio, so a pair with one is never decided by :func:`decided` (its ratios count as 1)."""
    return all(0 < t < math.inf for ts in timings for t in ts)


def _target(name: str) -> Callable:
    """``"package.module:function"`` -> the function."""
    module, _, fn = name.partition(":")
    return getattr(importlib.import_module(module), fn)


def _one_launch(target: str, groups: list[dict], rounds: int, device: str, min_sample: float,
                launch: int, min_rounds: int | None = None, on_group: Callable[[dict], None] | None = None,
                leave: bool = False) -> list[dict]:
    """Every group's rounds in this process: ``target(group, device)`` gives the group's calls,
    and a group's ``decides`` and ``hold`` (pairs of keys), where it has them, the comparisons
    its rounds wait on (:func:`paired_rounds`, whose ``leave`` this passes on);
    ``on_group(group)`` after each group's rounds."""
    build = _target(target)
    out = []
    for group in groups:
        calls = build(group, device)
        decides = group.get("decides")
        out.append(paired_rounds(calls, rounds, device=device, min_sample=min_sample, launch=launch,
                                 min_rounds=min_rounds,
                                 decides=None if decides is None else [tuple(p) for p in decides],
                                 hold=[tuple(p) for p in group.get("hold") or ()], leave=leave))
        del calls
        if on_group is not None:
            on_group(group)
    return out


def _fresh(target: str, groups: list[dict], rounds: int, device: str, min_sample: float, launch: int,
           min_rounds: int | None = None) -> list[dict]:
    """:func:`_one_launch` in a fresh interpreter at this process's torch threads."""
    root = Path(__file__).resolve().parents[2]
    job = dict(target=target, groups=groups, rounds=rounds, device=device, min_sample=min_sample, launch=launch,
               threads=torch.get_num_threads(), min_rounds=min_rounds)
    done = subprocess.run([sys.executable, "-m", "benchmarks.measure.paired"], input=json.dumps(job, allow_nan=False),
                          text=True, capture_output=True, cwd=root, env=child_env(), preexec_fn=die_with_parent())
    if done.returncode != 0:
        raise RuntimeError(f"launch {launch} of {target} failed (exit status {done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def launched(target: str, groups: list[dict], *, rounds: int, launches: int, device: torch.device | str = "cpu",
             min_sample: float = MIN_SAMPLE, min_rounds: int | None = None,
             on_group: Callable[[dict], None] | None = None, first: dict | None = None,
             here: bool = False) -> list[dict[str, dict]]:
    """Per group, ``{key: timing}``: ``rounds`` paired rounds of the group's calls in each of
    ``launches`` launches (fresh interpreters, one after another; one launch: this process),
    concatenated (module docstring for the fields). ``first``: one group's launch 0, its
    :func:`paired_rounds` output from this process (calls the caller prepared and warmed
    already), then launches 1 to ``launches`` - 1 fresh. ``here``: launch 0 built and run in
    this process (one interpreter start and import fewer), the others fresh. With
    ``min_rounds``, each launch stops a group's rounds once its comparisons are decided
    (:func:`paired_rounds`). ``on_group(group)``
    once a group's timing is complete: after its rounds in this process (one launch), after
    the last launch otherwise (a progress display's steps)."""
    if launches < 1:
        raise ValueError(f"launches(={launches}) must be >= 1")
    device = str(torch.device(device))
    if first is not None:  # launch 0 ran in this process, on calls the caller had prepared
        if len(groups) != 1:
            raise ValueError(f"first is one group's launch 0; got {len(groups)} groups")
        runs = [first] + [_fresh(target, groups, rounds, device, min_sample, i, min_rounds)[0]
                          for i in range(1, launches)]
        if on_group is not None:
            on_group(groups[0])
        return [merged(runs, device=device, min_sample=min_sample)]
    if launches == 1:  # the calls may leave the rounds on their own (:func:`paired_rounds`)
        runs = [_one_launch(target, groups, rounds, device, min_sample, 0, min_rounds, on_group, leave=True)]
    else:
        runs = [_one_launch(target, groups, rounds, device, min_sample, 0, min_rounds) if i == 0 and here else
                _fresh(target, groups, rounds, device, min_sample, i, min_rounds) for i in range(launches)]
        for group in groups if on_group is not None else ():
            on_group(group)
    return [merged([run[g] for run in runs], device=device, min_sample=min_sample) for g in range(len(groups))]


def merged(runs: list[dict], *, device: torch.device | str = "cpu", min_sample: float = MIN_SAMPLE) -> dict:
    """One group's :func:`paired_rounds` outputs, one per launch, as ``{key: timing}`` (the
    module docstring's fields, one new group id). ``looks``: the sums of the launches' first
    and last looks (a run without ``looks``: its own sample count, one look), the sample counts
    the concatenation could end at."""
    gid, keys = uuid.uuid4().hex[:12], list(runs[0])
    out = {}
    for k in keys:
        samples = [s for run in runs for s in run[k]["samples"]]
        spans = [run[k].get("looks") or [len(run[k]["samples"])] * 2 for run in runs]
        timing = Timing(tuple(samples), torch.get_num_threads(), str(torch.device(device))).as_dict()
        out[k] = dict(timing, round=list(range(len(samples))), launch=[x for run in runs for x in run[k]["launch"]],
                      loops=[run[k]["loops"] for run in runs], min_sample=min_sample, launches=len(runs),
                      compared=keys, group=gid, looks=[sum(a for a, _ in spans), sum(b for _, b in spans)])
    return out


_CACHE: dict[tuple, dict] = {}


def _cache_key(target: str, group: dict, device) -> tuple:
    return target, json.dumps(group, sort_keys=True, default=str, allow_nan=False), str(torch.device(device))


def measure_groups(target: str, groups: list[dict], *, rounds: int, launches: int, device: torch.device | str = "cpu",
                   min_sample: float = MIN_SAMPLE, min_rounds: int | None = None,
                   on_group: Callable[[dict], None] | None = None, here: bool = False) -> None:
    """Measure ``groups`` (:func:`launched`, whose ``here`` this passes on) and keep each
    group's timings for :func:`cached`. Groups already kept are not measured again; repeated
    groups are measured once. ``on_group(group)`` once each group's timing is complete
    (:func:`launched`)."""
    todo = list({json.dumps(g, sort_keys=True, default=str, allow_nan=False): g for g in groups
                 if _cache_key(target, g, device) not in _CACHE}.values())
    if not todo:
        return
    for group, timing in zip(todo, launched(target, todo, rounds=rounds, launches=launches, device=device,
                                            min_sample=min_sample, min_rounds=min_rounds, on_group=on_group,
                                            here=here)):
        _CACHE[_cache_key(target, group, device)] = timing


def cached(target: str, group: dict, key: str, *, rounds: int, launches: int, device: torch.device | str = "cpu",
           min_sample: float = MIN_SAMPLE, min_rounds: int | None = None) -> dict:
    """Call ``key``'s timing in ``group``, measuring the group first when it is not kept yet
    (a point measured on its own, as asv or a test does)."""
    measure_groups(target, [group], rounds=rounds, launches=launches, device=device, min_sample=min_sample,
                   min_rounds=min_rounds)
    return _CACHE[_cache_key(target, group, device)][key]


def _main() -> None:
    job = json.loads(sys.stdin.read())
    torch.set_num_threads(job["threads"])
    out = _one_launch(job["target"], job["groups"], job["rounds"], job["device"], job["min_sample"], job["launch"],
                      job.get("min_rounds"))
    sys.stdout.write("\n" + json.dumps(out, allow_nan=False) + "\n")


if __name__ == "__main__":
    # The module itself, not this ``__main__`` copy of it: the experiments' Weighted is its class.
    from benchmarks.measure.paired import _main as main

    main()
