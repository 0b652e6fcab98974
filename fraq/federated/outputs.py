"""The files a federated experiment writes in its output directory, and the checks before it writes any.

Every point (:class:`~fraq.federated.experiment.Point`) writes its result, its checkpoint
and, where ``federated.save_adapters_round`` is set, one round's client adapters; nothing
else in the output directory is the experiment's (:func:`written`). Before the model and the
data are loaded, :func:`check_out_dir` and :func:`check_inputs` refuse a directory that
cannot be written or that would write over an input (the ``--config`` file, a local model or
data set directory), whatever ``--overwrite`` says, and :func:`read_earlier` reads and checks
every earlier result and checkpoint of a run to resume. :func:`interrupted` is the one line
after Ctrl-C. Each takes the experiment's points, computed once by the caller.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

__all__ = ["check_inputs", "check_out_dir", "existing", "interrupted", "read_earlier", "written"]


def written(pts: list, out_dir: Path) -> list[Path]:
    """Every file the points ``pts`` write in ``out_dir``: per point its result, its checkpoint
    and its saved client adapters. Nothing else in ``out_dir`` is this run's."""
    return [f for p in pts for f in p.files(out_dir)]


def existing(pts: list, out_dir: Path) -> list[Path]:
    """The files of :func:`written` that are there now."""
    return [p for p in written(pts, out_dir) if p.exists() or p.is_symlink()]


def check_inputs(config, pts: list, out_dir: Path) -> None:
    """Refuse, whatever ``overwrite`` says, a run that would write over one of its inputs:
    ``out_dir`` equal to or inside a local model or data set directory, or a file this run
    writes (or deletes with ``--overwrite``) that is the ``--config`` file or inside one of
    those directories."""
    from fraq.federated.config_files import SETTINGS

    inputs = []
    if config.setting not in SETTINGS:
        inputs.append(("--config", Path(config.setting)))
    if Path(config.model.name).is_dir():
        inputs.append(("model.name", Path(config.model.name)))
    for key in ("path", "data_dir"):
        if isinstance(config.dataset.get(key), str) and Path(config.dataset[key]).is_dir():
            inputs.append((f"dataset.{key}", Path(config.dataset[key])))
    out = out_dir.resolve()
    writes = {p.resolve() for p in written(pts, out_dir)} | {out / d for d in ("results", "checkpoints", "adapters")}
    for flag, src in inputs:
        real = src.resolve()
        if src.is_dir() and (out == real or real in out.parents):
            raise ValueError(f"--out(={str(out_dir)!r}) is inside the {flag} directory {str(src)!r}; an input is "
                             f"never written: choose another --out")
        if real in writes:
            raise ValueError(f"--out(={str(out_dir)!r}): this run writes {str(real)!r}, which is the {flag} input "
                             f"{str(src)!r}; an input is never written: choose another --out")
        inside = next((p for p in real.parents if p in writes), None)
        if inside is not None:
            raise ValueError(f"--out(={str(out_dir)!r}): the {flag} input {str(src)!r} lies in {str(inside)!r}, "
                             f"where this run writes; an input is never written: choose another --out")


def check_out_dir(out_dir: Path) -> None:
    """``out_dir`` is a directory or can be made one: refused before any work when not."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out(={str(out_dir)!r}) is a file, not a directory")
    parent = out_dir
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out(={str(out_dir)!r}) cannot be written: {str(parent)!r} is not a writable directory")


def read_earlier(pts: list, out_dir: Path) -> tuple[set[str], dict]:
    """For ``--resume``: the keys of the finished points and the interrupted ones' states, all checked.

    Reads every point's result file and checkpoint before the model and the data are
    loaded; a damaged file or one written for another configuration raises ValueError
    naming it.
    """
    from fraq.federated.checkpoint import load_checkpoint
    from fraq.federated.results import check_records

    finished, states = set(), {}
    for p in pts:
        try:
            rec = p.finished(out_dir)
        except ValueError as e:
            raise ValueError(f"--resume: {e}; delete it, or start again with --overwrite") from None
        ckpt = p.checkpoint_file(out_dir)
        if rec is not None:
            finished.add(p.key)
        elif ckpt.exists():
            states[p.key] = load_checkpoint(ckpt, {"method": str(p.method), "config": p.config.to_record()})
            check_records(states[p.key].records, f"--resume: checkpoint {str(ckpt)!r}")
    return finished, states


def interrupted(pts: list, out: Path, argv: list[str]) -> str:
    """The one line after Ctrl-C: what of the run of ``pts`` is kept in ``out`` and the command that resumes it."""
    finished = sum(p.result_file(out).exists() for p in pts)
    ckpts = [p for p in pts if not p.result_file(out).exists() and p.checkpoint_file(out).exists()]
    if not finished and not ckpts:
        return "interrupted: nothing of this run was written yet; run the same command again to start it"
    again = [a for a in argv if a not in ("--overwrite", "--resume")] + ["--resume"]
    kept = f"{finished} of {len(pts)} points finished" + (
        f", {len(ckpts)} interrupted at its last completed round ({ckpts[0].checkpoint_file(out)})" if ckpts else "")
    return f"interrupted: kept in {out}: {kept}; resume with: python -m fraq.federated {shlex.join(again)}"
