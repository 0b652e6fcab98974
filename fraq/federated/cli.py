"""``python -m fraq.federated``: every method of a setting over its seeds and variants, one result file per run.

Examples::

    python -m fraq.federated                          # embedded default: all methods, 3 seeds, both rank settings
    python -m fraq.federated --methods flora fraq:tau=0.95 --rounds 2 --clients 2 --seeds 0 1
    python -m fraq.federated --config roberta --dataset clinc150 --alpha 0.02
    python -m fraq.federated --config banking77 --data-dir DIR   # DIR/banking77/ as published (or $FRAQ_DATA)
    python -m fraq.federated --variants heterogeneous  # only the heterogeneous-rank setting
    python -m fraq.federated --resume                 # continue an interrupted run
    python -m analysis.reproduce --out results/federated/quick   # the report: table, curves, verdicts

Each (variant, method, seed) writes ``<out>/results/federated/<key>.json``
(:mod:`fraq.federated.experiment`); the analysis draws the table and the curves from
those files. A file is never overwritten without asking: an output directory that holds
any file this run writes (a result or a checkpoint of one of its points) needs
``--resume`` (finished points are kept, interrupted ones continue) or ``--overwrite``
(start again); at a terminal the command asks instead. ``--overwrite`` replaces only the
files of this run's points: other results, checkpoints and saved adapters in ``--out``
stay. ``--resume`` where there is nothing of this run's to continue says so and stops.
An input (the ``--config`` file, a local model or data set directory) is never written,
whatever the flags. Ctrl-C stops the run with one line: what is kept (the finished points,
the interrupted one's last completed round) and the command that resumes it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from fraq._help import plain

__all__ = ["main", "run_experiment"]


def _written(cfg: dict, out_dir: Path) -> list[Path]:
    """Every file a run of ``cfg`` writes in ``out_dir``: per point its result, its checkpoint
    and its saved client adapters. Nothing else in ``out_dir`` is this run's."""
    from fraq.federated.experiment import points

    return [f for p in points(cfg) for f in p.files(out_dir)]


def _existing(cfg: dict, out_dir: Path) -> list[Path]:
    """The files of :func:`_written` that are there now."""
    return [p for p in _written(cfg, out_dir) if p.exists() or p.is_symlink()]


def _check_inputs(cfg: dict, out_dir: Path) -> None:
    """Refuse, whatever ``overwrite`` says, a run that would write over one of its inputs:
    ``out_dir`` equal to or inside a local model or data set directory, or a file this run
    writes (or deletes with ``--overwrite``) that is the ``--config`` file or inside one of
    those directories."""
    from fraq.federated.config import SETTINGS

    inputs = []
    if cfg.get("setting") not in SETTINGS:
        inputs.append(("--config", Path(cfg["setting"])))
    if Path(cfg["model"]["name"]).is_dir():
        inputs.append(("model.name", Path(cfg["model"]["name"])))
    for key in ("path", "data_dir"):
        if isinstance(cfg["dataset"].get(key), str) and Path(cfg["dataset"][key]).is_dir():
            inputs.append((f"dataset.{key}", Path(cfg["dataset"][key])))
    out = out_dir.resolve()
    written = {p.resolve() for p in _written(cfg, out_dir)} | {out / d for d in ("results", "checkpoints", "adapters")}
    for flag, src in inputs:
        real = src.resolve()
        if src.is_dir() and (out == real or real in out.parents):
            raise ValueError(f"--out(={str(out_dir)!r}) is inside the {flag} directory {str(src)!r}; an input is "
                             f"never written: choose another --out")
        if real in written:
            raise ValueError(f"--out(={str(out_dir)!r}): this run writes {str(real)!r}, which is the {flag} input "
                             f"{str(src)!r}; an input is never written: choose another --out")
        inside = next((p for p in real.parents if p in written), None)
        if inside is not None:
            raise ValueError(f"--out(={str(out_dir)!r}): the {flag} input {str(src)!r} lies in {str(inside)!r}, "
                             f"where this run writes; an input is never written: choose another --out")


def _check_out_dir(out_dir: Path) -> None:
    """``out_dir`` is a directory or can be made one: refused before any work when not."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out(={str(out_dir)!r}) is a file, not a directory")
    parent = out_dir
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out(={str(out_dir)!r}) cannot be written: {str(parent)!r} is not a writable directory")


def _read_earlier(pts: list, out_dir: Path) -> tuple[set[str], dict]:
    """For ``--resume``: the keys of the finished points and the interrupted ones' states, all checked.

    Reads every point's result file and checkpoint before the model and the data are
    loaded; a damaged file or one written for another configuration raises ValueError
    naming it.
    """
    from fraq.federated.checkpoint import load_checkpoint
    from fraq.federated.records import jsonable
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
            states[p.key] = load_checkpoint(ckpt, {"method": str(p.method), "config": jsonable(p.cfg)})
            check_records(states[p.key].records, f"--resume: checkpoint {str(ckpt)!r}")
    return finished, states


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


def run_experiment(cfg: dict, out_dir: str | Path, *, resume: bool = False, overwrite: bool = False,
                   ask=None, backbone=None, progress: bool = True, log=print) -> list[Path]:
    """Run every point of ``cfg`` (:func:`fraq.federated.experiment.points`) into ``out_dir``;
    return the result files of all of them.

    Everything is checked before the model and the data are loaded: the configuration
    (:func:`~fraq.federated.config.validate`, every variant's too), ``out_dir`` (never an
    input, nor a place holding files of this run's names, unasked), and with ``resume``
    every earlier result and checkpoint. Earlier results are deleted only once the model
    and data have loaded.

    Args:
        resume: continue: finished points are kept, interrupted ones continue from their
            last checkpoint; a result of another configuration is refused (ValueError).
            An ``out_dir`` with nothing of this run's to continue is refused too.
        overwrite: delete the earlier versions of the files this run writes (:func:`_written`)
            first; every other file in ``out_dir`` is left alone.
        ask: called with a question when earlier files exist and neither ``resume`` nor
            ``overwrite`` is set; it returns True to overwrite. None: raise instead.
        backbone: a prebuilt :class:`~fraq.federated.model.Backbone` (tests).
    """
    from fraq._files import file_target
    from fraq.federated.config import validate
    from fraq.federated.experiment import points, rounds_of, run_points
    from fraq.federated.server import Task

    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other")
    cfg = {**cfg, "methods": list(validate(cfg).methods)}  # text parsed once here, the specs carried
    pts = points(cfg)
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    _check_inputs(cfg, out_dir)
    for path in _written(cfg, out_dir):  # a FIFO, a device or a directory there is refused, even with overwrite
        file_target(path, "output")
    old = _existing(cfg, out_dir) if out_dir.is_dir() else []
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
    finished, states = _read_earlier(pts, out_dir) if resume else (set(), {})
    if cfg["threads"] is not None:
        import torch

        torch.set_num_threads(cfg["threads"])
    t0 = time.perf_counter()
    with _hf_bars(progress and sys.stderr.isatty()):  # transformers' weight-loading bar: at a terminal only
        task = Task(pts[0].cfg, backbone=backbone, log=log)
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


def _ranks(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ranks(={text!r}) must be comma-separated ints, e.g. 4,16,32,64") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"--ranks(={text!r}) must be positive ints")
    return vals


def _assignment(text: str) -> tuple[str, object]:
    key, eq, raw = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"--set(={text!r}) must be key=value, e.g. train.lr=0.001")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def build_parser() -> argparse.ArgumentParser:
    from fraq.federated.config import SETTINGS

    p = argparse.ArgumentParser(prog="python -m fraq.federated", description=plain(__doc__.split("\n\n")[0]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="quick", help=f"setting: {', '.join(SETTINGS)} or a JSON file (default quick)")
    p.add_argument("--methods", nargs="+", metavar="METHOD", help="aggregators, e.g. fedit flora fraq:tau=0.80")
    p.add_argument("--rounds", type=int, help="communication rounds")
    p.add_argument("--clients", type=int, help="number of clients K")
    p.add_argument("--steps", type=int, help="local optimizer steps per round")
    p.add_argument("--ranks", type=_ranks, help="client LoRA ranks, repeated to K clients (alpha = 2 r); they replace a "
                   "variant's own ranks")
    p.add_argument("--alpha", type=float, help="Dirichlet concentration of the label partition")
    p.add_argument("--partition", choices=["dirichlet", "pathological", "iid"], help="partition scheme")
    p.add_argument("--dataset", help="data set: intents, banking77, clinc150, hwu64, 20newsgroups, a hub id or a directory")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder holding banking77/ and clinc150/ as their publishers distribute them (default: "
                        "$FRAQ_DATA; neither: the Hugging Face hub)")
    p.add_argument("--model", help="Hugging Face model name or local path")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                   help="seeds, each a whole run (partition, initialization, data order); default: the setting's")
    p.add_argument("--variants", nargs="+", metavar="NAME",
                   help="run only these of the setting's variants (e.g. homogeneous heterogeneous)")
    p.add_argument("--set", type=_assignment, action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. train.lr=0.001 or federated.save_adapters_round=3")
    p.add_argument("--out", help="output directory (default results/federated/<config>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last completed round")
    p.add_argument("--overwrite", action="store_true", help="replace the files this run writes in --out without asking (others stay)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _spread(values: list, k: int) -> list:
    """``k`` of ``values``, evenly spaced from the first to the last (both kept when k >= 2)."""
    if k == 1:
        return values[:1]
    return [values[round(i * (len(values) - 1) / (k - 1))] for i in range(k)]


def _fit_variants(cfg: dict, flag: str) -> list[str]:
    """The setting's variants whose ``federated.ranks`` list more clients than ``flag`` (the
    user's ``--clients``) gives, cut to K ranks spread from the smallest to the largest (their
    ``federated.alphas`` alike), in place; one line per variant cut, saying so."""
    K = cfg["federated"]["clients"]
    notes = []
    for name, over in cfg["variants"].items():
        ranks = over.get("federated.ranks")
        if isinstance(ranks, list) and len(ranks) > K:
            over["federated.ranks"] = _spread(ranks, K)
            if isinstance(over.get("federated.alphas"), list) and len(over["federated.alphas"]) == len(ranks):
                over["federated.alphas"] = _spread(over["federated.alphas"], K)
            notes.append(f"variants.{name}: federated.ranks {ranks} cut to {over['federated.ranks']} for "
                         f"{flag}(={K}) (--variants leaves a variant out)")
    return notes


def _rank_variants(cfg: dict, flag: str, chosen: bool) -> list[str]:
    """Apply the user's ranks (``flag``: ``--ranks`` or ``--set federated.ranks``) to every
    variant, in place: a variant's own ``federated.ranks`` (and ``federated.alphas``) gives
    way to them. A variant that then runs as another one does is left out, unless the user
    named it with ``--variants`` (``chosen``); one line per variant changed, saying so."""
    notes, seen = [], []
    for name in list(cfg["variants"]):
        over = cfg["variants"][name]
        own = over.get("federated.ranks")
        if own is None:
            seen.append(over)
            continue
        rest = {k: v for k, v in over.items() if k not in ("federated.ranks", "federated.alphas")}
        if not chosen and rest in seen:
            del cfg["variants"][name]
            notes.append(f"variants.{name}: left out, as {flag} gives every client's rank (its own ranks {own}: "
                         f"--variants {name} without {flag})")
            continue
        cfg["variants"][name] = rest
        seen.append(rest)
        notes.append(f"variants.{name}: federated.ranks {own} replaced by {flag}(={cfg['federated']['ranks']})")
    return notes


def _data_dir(flag: str | None, cfg: dict) -> str | None:
    """The local folder of the published data sets for ``cfg``: ``--data-dir``, else ``$FRAQ_DATA``
    when the setting's data set is one of them (:data:`~fraq.federated.published.PUBLISHED`);
    None (the hub, or another source) otherwise. An absolute path, so a result records where
    its data came from whatever the working directory."""
    from fraq.federated.published import PUBLISHED

    if flag is not None:
        return str(Path(flag).absolute())
    env = os.environ.get("FRAQ_DATA")
    if env and cfg["dataset"].get("name") in PUBLISHED and cfg["dataset"].get("data_dir") is None:
        return str(Path(env).absolute())
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from fraq.aggregators import MethodLoadError, load_outside_methods
    from fraq.federated.config import load_config

    try:  # the methods from outside the package, before any work: one line naming a failing one
        load_outside_methods()
    except MethodLoadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    over: dict = {}
    for key, flag in (("federated.rounds", args.rounds), ("federated.clients", args.clients),
                      ("train.steps", args.steps), ("federated.ranks", args.ranks), ("partition.alpha", args.alpha),
                      ("partition.scheme", args.partition), ("model.name", args.model), ("threads", args.threads),
                      ("methods", args.methods), ("seeds", args.seeds)):
        if flag is not None:
            over[key] = flag
    if args.dataset is not None:
        d = args.dataset
        over["dataset"] = {"path": d} if Path(d).is_dir() else {"name": d}
    for key, value in args.set:
        over[key] = value
    try:
        cfg = load_config(args.config, over)
        data_dir = _data_dir(args.data_dir, cfg)
        if data_dir is not None:
            cfg = load_config(args.config, {**over, "methods": cfg["methods"], "dataset.data_dir": data_dir})
        if args.variants is not None:
            unknown = [v for v in args.variants if v not in cfg["variants"]]
            if unknown:
                raise ValueError(f"--variants: {unknown[0]!r} is not one of the setting's variants "
                                 f"{list(cfg['variants'])}")
            cfg["variants"] = {v: cfg["variants"][v] for v in dict.fromkeys(args.variants)}
        ranks = "--set federated.ranks" if any(k == "federated.ranks" for k, _ in args.set) else \
            "--ranks" if args.ranks is not None else None
        notes = _rank_variants(cfg, ranks, args.variants is not None) if ranks is not None else []
        given = "--set federated.clients" if any(k == "federated.clients" for k, _ in args.set) else \
            "--clients" if args.clients is not None else None
        notes += _fit_variants(cfg, given) if given is not None else []
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or Path("results") / "federated" / Path(args.config).stem)
    for note in notes:
        print(note, file=sys.stderr)

    def ask(question: str) -> bool:
        if not sys.stdin.isatty():
            return False
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

    try:
        run_experiment(cfg, out, resume=args.resume, overwrite=args.overwrite, ask=ask,
                       progress=not args.no_progress)
    except KeyboardInterrupt:
        print(_interrupted(cfg, out, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return 130
    except (OSError, ImportError, ValueError) as e:  # bad input: a message naming it, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _interrupted(cfg: dict, out: Path, argv: list[str]) -> str:
    """The one line after Ctrl-C: what of the run is kept in ``out`` and the command that resumes it."""
    import shlex

    from fraq.federated.experiment import points

    pts = points(cfg)
    finished = sum(p.result_file(out).exists() for p in pts)
    ckpts = [p for p in pts if not p.result_file(out).exists() and p.checkpoint_file(out).exists()]
    if not finished and not ckpts:
        return "interrupted: nothing of this run was written yet; run the same command again to start it"
    again = [a for a in argv if a not in ("--overwrite", "--resume")] + ["--resume"]
    kept = f"{finished} of {len(pts)} points finished" + (
        f", {len(ckpts)} interrupted at its last completed round ({ckpts[0].checkpoint_file(out)})" if ckpts else "")
    return f"interrupted: kept in {out}: {kept}; resume with: python -m fraq.federated {shlex.join(again)}"
