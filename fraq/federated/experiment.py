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
left from the steady rounds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from fraq.methods import MethodSpec

__all__ = ["EXPERIMENT", "PACKAGES", "Point", "points", "rounds_of", "run_points"]

EXPERIMENT = "federated"
"""The experiment name of the result files (their directory under ``<out>/results``)."""

PACKAGES = ("transformers", "peft", "safetensors", "flwr")
"""Versions recorded in every result beside fraq's, torch's and numpy's."""


@dataclass(frozen=True)
class Point:
    """One run: ``method`` under ``variant`` with ``seed``; ``cfg`` is its validated configuration.
    ``method`` is the :class:`~fraq.methods.MethodSpec` the configuration was parsed into,
    carried to the run as it is."""

    variant: str
    method: MethodSpec
    seed: int
    cfg: dict

    @property
    def key(self) -> str:
        from fraq.federated.config import method_label

        return f"{self.variant}-{method_label(self.method)}-seed{self.seed}"

    @property
    def config(self) -> dict:
        """What the result file records as its config: the run's configuration (every key a
        run reads, ``seed`` included), the variant and the method."""
        from fraq.federated.records import jsonable

        run = {k: v for k, v in self.cfg.items() if k not in ("methods", "seeds", "variants")}
        return jsonable({"variant": self.variant, "method": self.method, **run})

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
        saved = self.cfg["federated"].get("save_adapters_round")
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
        if rec.get("config") != json.loads(json.dumps(self.config)):
            raise ValueError(f"result file {str(path)!r} was written with another configuration")
        from fraq.federated.results import check_records

        check_records(rec["result"].get("rounds"), f"result file {str(path)!r}")
        return rec


def points(cfg: dict) -> list[Point]:
    """Every point of the validated setting ``cfg`` (a :func:`~fraq.federated.config.load_config`
    dictionary, its ``methods`` parsed): variants in order, then seeds, then methods (an
    interrupted experiment has every method on its first seeds)."""
    from fraq.federated.config import runs

    by_variant: dict[str, list[tuple[int, dict]]] = {}
    for variant, seed, run_cfg in runs(cfg):
        by_variant.setdefault(variant, []).append((seed, run_cfg))
    return [Point(variant, spec, seed, run_cfg) for variant, seeded in by_variant.items()
            for seed, run_cfg in seeded for spec in cfg["methods"]]


def rounds_of(point: Point) -> int:
    """The rounds of ``point`` (the progress bar's unit)."""
    return point.cfg["federated"]["rounds"]


def run_points(task, todo: list[Point], out: Path, *, states: dict | None = None, total: int | None = None,
               done: int = 0, progress: bool = True, log=print) -> list[Path]:
    """Run ``todo`` in order on ``task`` (its data and model; each point draws its partition
    through :meth:`~fraq.federated.task.Task.derive`), writing each result; return the files.

    ``states``: point key -> the checkpointed state to continue from. ``total`` / ``done``:
    rounds of the whole experiment and those already finished, for the progress bar.
    """
    from fraq._results import write_result
    from fraq.federated.adapters import save_client_adapters
    from fraq.federated.server import run_method
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
                drawn, run_task = (p.variant, p.seed), task.derive(p.cfg, log=lambda *a: None)
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
            written.append(write_result(Path(out) / "results", EXPERIMENT, p.key, p.config, res,
                                        device=task.backbone.device, dtype=DTYPES[p.cfg["model"]["dtype"]],
                                        packages=PACKAGES))
            ckpt.unlink(missing_ok=True)
    finally:
        if bar is not None:
            bar.close()
    return written
