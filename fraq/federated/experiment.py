"""A federated experiment: every method of a setting over its seeds and variants, one result file per run.

A *point* is one (variant, method, seed): the method run end to end on the partition,
initialization and data order that the seed draws, under the variant's overrides (the
embedded default has a ``homogeneous`` variant, every client at rank 8, and a
``heterogeneous`` one, ranks 4, 16, 32, 64 as in the paper's Table 3). Every method
sees the same seeds, so methods compare in pairs, seed by seed.

Each point writes ``<out>/results/federated/<variant>-<method>-seed<seed>.json`` in the
project's one result format (:mod:`fraq._results`: config, result, machine, versions,
git sha), which :mod:`analysis` reads; it draws the table, the curves and the verdicts
(``python -m analysis.reproduce --out <out>``). While a point runs, its state after
every round is in ``<out>/checkpoints/<key>.pt``; it is removed once the result is
written, so an interrupted experiment continues where it stopped (``--resume``).

The data and the model are loaded and encoded once for the whole experiment
(:meth:`~fraq.federated.task.Task.derive`); a point only draws its partition again.
One progress display (:mod:`fraq._progress`) counts the rounds of every point and estimates the time
left from the steady rounds. :func:`run_experiment` runs them all into an output directory,
after the checks of :mod:`fraq.federated.outputs`; its command line is
:mod:`fraq.federated.cli`.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fraq.federated.config import Config
from fraq.methods import MethodSpec

__all__ = ["EXPERIMENT", "PACKAGES", "Point", "points", "rounds_of", "run_experiment", "run_points"]

EXPERIMENT = "federated"
"""The experiment name of the result files (their directory under ``<out>/results``)."""

PACKAGES = ("transformers", "peft", "safetensors", "flwr")
"""Versions recorded in every result beside fraq's, torch's and numpy's."""


@dataclass(frozen=True)
class Point:
    """One run: ``method`` under ``variant`` with ``seed``; ``config`` is the run's checked
    :class:`~fraq.federated.config.Config` (its :class:`~fraq.federated.config.Run`'s).
    ``method`` is the :class:`~fraq.methods.MethodSpec` the configuration was parsed into,
    carried to the run as it is."""

    variant: str
    method: MethodSpec
    seed: int
    config: Config

    @property
    def key(self) -> str:
        from fraq.federated.method_specs import method_label

        return f"{self.variant}-{method_label(self.method)}-seed{self.seed}"

    def record(self) -> dict:
        """What the result file records as its config: the variant, the method and the run's
        configuration (:meth:`Config.to_record <fraq.federated.config.Config.to_record>`:
        every key a run reads, ``seed`` included)."""
        return {"variant": self.variant, "method": str(self.method), **self.config.to_record(run=True)}

    def result_file(self, out: Path) -> Path:
        from fraq._results import result_path

        return result_path(Path(out) / "results", EXPERIMENT, self.key)

    def checkpoint_file(self, out: Path) -> Path:
        return Path(out) / "checkpoints" / f"{self.key}.pt"

    def adapters_file(self, out: Path, t: int) -> Path:
        return Path(out) / "adapters" / f"{self.key}_round{t}.safetensors"

    def files(self, out: Path) -> list[Path]:
        """Every file this point writes in ``out``."""
        paths = [self.result_file(out), self.checkpoint_file(out)]
        saved = self.config.federated.save_adapters_round
        if saved is not None:
            paths.append(self.adapters_file(out, saved))
        return paths

    def finished(self, out: Path) -> dict | None:
        """The result record of this point in ``out`` if one is there; ValueError naming the
        file when it is not a result of this point's configuration."""
        path = self.result_file(out)
        if not path.exists():
            return None
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"result file {str(path)!r} cannot be read ({type(e).__name__}: {e})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("result"), dict):
            raise ValueError(f"result file {str(path)!r} is not a result record (no 'result' object)")
        if rec.get("config") != self.record():
            raise ValueError(f"result file {str(path)!r} was written with another configuration")
        from fraq.federated.results import check_records

        check_records(rec["result"].get("rounds"), f"result file {str(path)!r}")
        return rec


def points(config: Config) -> list[Point]:
    """Every point of the setting ``config`` (:func:`~fraq.federated.config.load_config`'s):
    its runs (:func:`~fraq.federated.config.runs`: variants in order, then seeds), each
    with every method (an interrupted experiment has every method on its first seeds)."""
    from fraq.federated.config import runs

    return [Point(run.variant, spec, run.seed, run.config) for run in runs(config) for spec in config.methods]


def rounds_of(point: Point) -> int:
    """The rounds of ``point`` (the progress bar's unit)."""
    return point.config.federated.rounds


def run_points(task, todo: list[Point], out: Path, *, states: dict | None = None, total: int | None = None,
               done: int = 0, progress: bool = True, log=print) -> list[Path]:
    """Run ``todo`` in order on ``task`` (its data and model; each point draws its partition
    through :meth:`~fraq.federated.task.Task.derive`), writing each result; return the files.

    ``states``: point key -> the checkpointed state to continue from. ``total`` / ``done``:
    rounds of the whole experiment and those already finished, for the progress bar.
    """
    from fraq._results import write_result
    from fraq.federated.adapters import save_client_adapters
    from fraq.federated.round_loop import run_method
    from fraq.federated.task import DTYPES

    states = dict(states or {})
    total = sum(rounds_of(p) for p in todo) + done if total is None else total
    bar = None
    if progress:
        from fraq._progress import Progress

        bar = Progress(total, done=done, desc="federated", unit="rounds")
        log = bar.write
    drawn, run_task = None, None  # the (variant, seed) whose partition run_task holds
    written = []
    try:
        for p in todo:
            if bar is not None:
                bar.label(p.key[:60])
            if drawn != (p.variant, p.seed):  # points come seed by seed: one partition per seed
                drawn, run_task = (p.variant, p.seed), task.derive(p.config, log=lambda *a: None)
            ckpt = p.checkpoint_file(out)

            def save(t, updates, meta, p=p):
                save_client_adapters(p.adapters_file(out, t), updates, {**meta, "seed": p.seed, "variant": p.variant})

            t0 = time.perf_counter()
            res = run_method(run_task, p.method, checkpoint=ckpt, state=states.pop(p.key, None),
                             log=lambda msg, p=p: log(f"{p.variant} seed {p.seed} {msg}"),
                             on_round=None if bar is None else (lambda t: bar.update()), save_adapters=save)
            if res.get("skipped") and bar is not None:
                bar.update(rounds_of(p))
            res["wall_seconds"] = time.perf_counter() - t0
            written.append(write_result(Path(out) / "results", EXPERIMENT, p.key, p.record(), res,
                                        device=task.backbone.device, dtype=DTYPES[p.config.model.dtype],
                                        packages=PACKAGES))
            ckpt.unlink(missing_ok=True)
    finally:
        if bar is not None:
            bar.close()
    return written


@contextlib.contextmanager
def _hf_bars(enabled: bool):
    """transformers' and the hub's progress bars on only when ``enabled``, as they were afterwards."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    before = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()


def run_experiment(config: Config, out_dir: str | Path, *, plan: list[Point] | None = None, resume: bool = False,
                   overwrite: bool = False, ask=None, backbone=None, progress: bool = True, log=print) -> list[Path]:
    """Run every point of ``config`` (:func:`points`) into ``out_dir``; return the result files of all of them.

    Everything is checked before the model and the data are loaded: the configuration
    (when :func:`~fraq.federated.config.load_config` built it, every variant's when the
    points are drawn), ``out_dir`` (never an input, nor a place holding files of this run's
    names, unasked: :mod:`fraq.federated.outputs`), and with ``resume`` every earlier result
    and checkpoint. Earlier results are deleted only once the model and data have loaded.

    Args:
        plan: ``points(config)``, when the caller computed it already (the command line
            computes it once, for this run and for its Ctrl-C line); None: computed here.
        resume: continue: finished points are kept, interrupted ones continue from their
            last checkpoint; a result of another configuration is refused (ValueError).
            An ``out_dir`` with nothing of this run's to continue is refused too.
        overwrite: delete the earlier versions of the files this run writes
            (:func:`~fraq.federated.outputs.written`) first; every other file in ``out_dir``
            is left alone.
        ask: called with a question when earlier files exist and neither ``resume`` nor
            ``overwrite`` is set; it returns True to overwrite. None: raise instead.
        backbone: a prebuilt :class:`~fraq.federated.model.Backbone` (tests).
    """
    from fraq._files import file_target
    from fraq.federated.outputs import check_inputs, check_out_dir, existing, read_earlier, written
    from fraq.federated.task import Task

    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other")
    pts = points(config) if plan is None else plan
    out_dir = Path(out_dir)
    check_out_dir(out_dir)
    check_inputs(config, pts, out_dir)
    for path in written(pts, out_dir):  # a FIFO, a device or a directory there is refused, even with overwrite
        file_target(path, "output")
    old = existing(pts, out_dir) if out_dir.is_dir() else []
    if resume and not old:
        raise ValueError(f"--resume: {str(out_dir)!r} holds no earlier run of these points to continue (no result "
                         f"or checkpoint of them): run without --resume to start one, or give the --out of the run "
                         f"to continue")
    replace = bool(old) and not resume
    if replace:
        names = [str(p.relative_to(out_dir)) for p in old]
        question = (f"{out_dir} holds files this run writes, e.g. results of an earlier run ({', '.join(names[:4])}"
                    f"{', ...' if len(old) > 4 else ''}). Overwrite them?")
        if not overwrite and not (ask is not None and ask(question)):
            raise FileExistsError(f"{question} Refused: pass --resume to continue that run or --overwrite to "
                                  f"replace it, or choose another --out")
    finished, states = read_earlier(pts, out_dir) if resume else (set(), {})
    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    t0 = time.perf_counter()
    with _hf_bars(progress and sys.stderr.isatty()):  # transformers' weight-loading bar: at a terminal only
        task = Task(pts[0].config, backbone=backbone, log=log)
    if replace:
        for p in old:
            p.unlink(missing_ok=True)
    todo = [p for p in pts if p.key not in finished]
    if finished:
        log(f"{len(finished)} of {len(pts)} points finished earlier: kept")
    done = sum(rounds_of(p) for p in pts if p.key in finished)
    done += sum(states[p.key].round for p in todo if p.key in states)
    run_points(task, todo, out_dir, states=states, total=sum(rounds_of(p) for p in pts), done=done,
               progress=progress, log=log)
    files = [p.result_file(out_dir) for p in pts]
    log(f"{len(pts)} results ({len(todo)} run now, in {(time.perf_counter() - t0) / 60:.1f} min) in "
        f"{out_dir / 'results' / 'federated'}; the table, curves and verdicts: "
        f"python -m analysis.reproduce --out {out_dir}")
    return files
