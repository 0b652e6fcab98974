"""``python -m fraq.federated``: run every method of a setting, write the results table.

Examples::

    python -m fraq.federated                          # embedded default, all methods, CPU
    python -m fraq.federated --methods flora fraq:tau=0.95 --rounds 2 --clients 2
    python -m fraq.federated --config roberta --dataset clinc150 --alpha 0.02
    python -m fraq.federated --ranks 4,16,32,64 --methods flora flexlora florist fraq
    python -m fraq.federated --resume                 # continue an interrupted run

A file is never overwritten without asking: an output directory that holds any file
this run writes (``config.json``, ``table.md``, a method's ``result.json``, ...) needs
``--resume`` (keep and continue) or ``--overwrite`` (start again); at a terminal the
command asks instead. ``--overwrite`` replaces only the files this run writes: other
methods' results, checkpoints and saved adapters in ``--out`` stay. ``--resume`` where
there is nothing of this run's to continue says so and stops. An input (the
``--config`` file, a local model or data set directory) is never written, whatever the
flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

__all__ = ["main", "run_experiment"]

_OUR_FILES = ("results.json", "rounds.csv", "table.csv", "table.md", "plot.png", "config.json")


def _written(cfg: dict, out_dir: Path) -> list[Path]:
    """Every file a run of ``cfg`` writes in ``out_dir``: the run's files, and per method of
    this run its ``result.json``, ``checkpoint.pt`` and saved client adapters. Nothing else
    in ``out_dir`` (other methods' results, other rounds' adapters) is this run's."""
    from fraq.federated.config import method_label

    paths = [out_dir / n for n in _OUR_FILES]
    saved = cfg["federated"].get("save_adapters_round")
    for spec in cfg["methods"]:
        label = method_label(spec)
        paths += [out_dir / label / "result.json", out_dir / label / "checkpoint.pt"]
        if saved is not None:
            paths.append(out_dir / "adapters" / f"{label}_round{saved}.safetensors")
    return paths


def _existing(cfg: dict, out_dir: Path) -> list[Path]:
    """The files of :func:`_written` that are there now."""
    return [p for p in _written(cfg, out_dir) if p.exists() or p.is_symlink()]


def _replaced(cfg: dict, out_dir: Path) -> list[Path]:
    """The files in ``out_dir`` that a new run would replace: every file it writes that is
    there (:func:`_existing`) except a ``config.json`` this harness wrote for a run that
    stopped before its first result (an object with ``config`` and ``run``: it holds no
    result). Any other file there under one of those names (a user's ``table.md``, a
    ``config.json`` of another program) counts, so it is never replaced unasked."""
    found = _existing(cfg, out_dir) if out_dir.is_dir() else []
    stub = out_dir / "config.json"
    if found == [stub] and _is_our_config(stub):
        return []
    return found


def _is_our_config(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and set(data) >= {"config", "run"} and isinstance(data["config"], dict)


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
    if isinstance(cfg["dataset"].get("path"), str) and Path(cfg["dataset"]["path"]).is_dir():
        inputs.append(("dataset.path", Path(cfg["dataset"]["path"])))
    out = out_dir.resolve()
    written = {out / n for n in _OUR_FILES} | {out / "adapters"}
    for flag, src in inputs:
        real = src.resolve()
        if src.is_dir() and (out == real or real in out.parents):
            raise ValueError(f"--out(={str(out_dir)!r}) is inside the {flag} directory {str(src)!r}; an input is "
                             f"never written: choose another --out")
        if real in written or any(p in written for p in real.parents) or \
                (real.parent.parent == out and real.name in ("result.json", "checkpoint.pt")):
            raise ValueError(f"--out(={str(out_dir)!r}): this run writes {str(real)!r}, which is the {flag} input "
                             f"{str(src)!r}; an input is never written: choose another --out")


def _clear(paths: list[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)


def _read_json(path: Path, what: str) -> dict:
    """A JSON object from ``path``; ValueError naming the file when it cannot be read or is damaged."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"--resume: {what} {str(path)!r} cannot be read ({type(e).__name__}: {e}); delete it, "
                         f"or start again with --overwrite") from None
    if not isinstance(data, dict):
        raise ValueError(f"--resume: {what} {str(path)!r} holds a JSON {type(data).__name__}, not an object; "
                         f"delete it, or start again with --overwrite")
    return data


def _check_out_dir(out_dir: Path) -> None:
    """``out_dir`` is a directory or can be made one: refused before any work when not."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out(={str(out_dir)!r}) is a file, not a directory")
    parent = out_dir
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out(={str(out_dir)!r}) cannot be written: {str(parent)!r} is not a writable directory")


def _read_earlier(cfg: dict, cfg_json: dict, out_dir: Path) -> tuple[dict[str, dict], dict]:
    """For ``--resume``: the finished methods' results and the interrupted ones' states, all checked.

    Reads ``config.json``, every method's ``result.json`` and ``checkpoint.pt`` before the
    model and the data are loaded; a damaged file or one written for another
    configuration raises ValueError naming it.
    """
    from fraq.federated.checkpoint import load_checkpoint
    from fraq.federated.config import method_label
    from fraq.federated.results import check_records

    if (out_dir / "config.json").exists():
        prev = _read_json(out_dir / "config.json", "config file")
        if not isinstance(prev.get("config"), dict):
            raise ValueError(f"--resume: config file {str(out_dir / 'config.json')!r} has no 'config' object; "
                             f"delete it, or start again with --overwrite")
        prev = prev["config"]
        diff = sorted(k for k in set(prev) | set(cfg_json) if k != "methods" and prev.get(k) != cfg_json.get(k))
        if diff:
            raise ValueError(f"--resume: the configuration differs from the earlier run's in {diff}; "
                             f"use the same flags, or another --out")
    finished, states = {}, {}
    for spec in cfg["methods"]:
        mdir = out_dir / method_label(spec)
        done, ckpt = mdir / "result.json", mdir / "checkpoint.pt"
        if done.exists():
            res = _read_json(done, "result file")
            if res.get("method") != spec:
                raise ValueError(f"--resume: result file {str(done)!r} is not method {spec!r}'s result "
                                 f"(method {res.get('method')!r}); delete it, or start again with --overwrite")
            check_records(res.get("rounds"), f"--resume: result file {str(done)!r}")
            if res.get("config", cfg_json) != cfg_json:
                raise ValueError(f"--resume: {str(done)!r} was written with another configuration")
            finished[spec] = res
        elif ckpt.exists():
            states[spec] = load_checkpoint(ckpt, {"method": spec, "config": cfg_json})
            check_records(states[spec].records, f"--resume: checkpoint {str(ckpt)!r}")
    return finished, states


def run_experiment(cfg: dict, out_dir: str | Path, *, resume: bool = False, overwrite: bool = False,
                   ask=None, backbone=None, progress: bool = True, log=print) -> list[dict]:
    """Run every method of ``cfg`` into ``out_dir``; return the table rows.

    Everything is checked before the model and the data are loaded: the configuration
    (:func:`~fraq.federated.config.validate`: every method with its options), ``out_dir``
    (never an input, nor a place whose files of our names we did not write, unasked), and
    with ``resume`` every earlier file. Earlier results are deleted only once the model
    and data have loaded.

    Args:
        resume: continue: finished methods are read back, interrupted ones continue from
            their last checkpoint; the configuration must match the earlier run's. An
            ``out_dir`` with nothing of this run's to continue is refused (ValueError).
        overwrite: delete the earlier versions of the files this run writes (:func:`_written`)
            first; every other file in ``out_dir`` is left alone.
        ask: called with a question when earlier results exist and neither ``resume`` nor
            ``overwrite`` is set; it returns True to overwrite. None: raise instead.
        backbone: a prebuilt :class:`~fraq.federated.model.Backbone` (tests).
    """
    from fraq._files import file_target
    from fraq.federated.adapters import save_client_adapters
    from fraq.federated.config import method_label, validate
    from fraq.federated.records import jsonable
    from fraq.federated.results import write_json, write_results

    from fraq.federated.server import Task, run_method

    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other")
    validate(cfg)
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    _check_inputs(cfg, out_dir)
    for path in _written(cfg, out_dir):  # a FIFO, a device or a directory there is refused, even with overwrite
        file_target(path, "output")
    if resume and not _existing(cfg, out_dir):
        raise ValueError(f"--resume: {str(out_dir)!r} holds no earlier run of these methods to continue (no "
                         f"config.json, result.json or checkpoint.pt): run without --resume to start one, or "
                         f"give the --out of the run to continue")
    old = _replaced(cfg, out_dir)
    cfg_json = jsonable(cfg)
    replace = bool(old) and not resume
    if replace:
        names = [str(p.relative_to(out_dir)) for p in old]
        question = (f"{out_dir} holds files this run writes, e.g. results of an earlier run ({', '.join(names[:4])}"
                    f"{', ...' if len(old) > 4 else ''}). Overwrite them?")
        if not overwrite and not (ask is not None and ask(question)):
            raise FileExistsError(f"{question} Refused: pass --resume to continue that run or --overwrite to "
                                  f"replace it, or choose another --out")
    finished, states = _read_earlier(cfg, cfg_json, out_dir) if resume else ({}, {})
    from fraq._machine import machine_record

    if cfg["threads"] is not None:  # before the machine record, which reports the thread count
        import torch

        torch.set_num_threads(cfg["threads"])
    t0 = time.perf_counter()
    task = Task(cfg, backbone=backbone, log=log)
    if replace:
        _clear(_existing(cfg, out_dir))
    run_info = {"machine": machine_record(), "versions": _versions(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json(out_dir / "config.json", {"config": cfg_json, "run": run_info})
    results = []
    for spec in cfg["methods"]:
        if spec in finished:
            res = finished[spec]
            log(f"[{spec}] finished earlier: read from {out_dir / method_label(spec) / 'result.json'}")
        else:
            res = run_method(task, spec, out_dir, resume=resume, state=states.pop(spec, None), log=log,
                             progress=progress, save_adapters=save_client_adapters)
            res["config"] = cfg_json
            write_json(out_dir / method_label(spec) / "result.json", res)
        results.append(res)
    run_info["wall_seconds"] = time.perf_counter() - t0
    rows = write_results(out_dir, [{k: v for k, v in r.items() if k != "config"} for r in results], cfg_json,
                         run_info)
    log((out_dir / "table.md").read_text(encoding="utf-8"))
    log(f"results in {out_dir}/ (results.json, rounds.csv, table.csv, table.md"
        f"{', plot.png' if (out_dir / 'plot.png').exists() else ''})")
    return rows


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "transformers", "peft", "safetensors", "flwr", "fraq"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


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

    p = argparse.ArgumentParser(prog="python -m fraq.federated", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="quick", help=f"setting: {', '.join(SETTINGS)} or a JSON file (default quick)")
    p.add_argument("--methods", nargs="+", metavar="METHOD", help="aggregators, e.g. fedit flora fraq:tau=0.80")
    p.add_argument("--rounds", type=int, help="communication rounds")
    p.add_argument("--clients", type=int, help="number of clients K")
    p.add_argument("--steps", type=int, help="local optimizer steps per round")
    p.add_argument("--ranks", type=_ranks, help="client LoRA ranks, repeated to K clients (alpha = 2 r)")
    p.add_argument("--alpha", type=float, help="Dirichlet concentration of the label partition")
    p.add_argument("--partition", choices=["dirichlet", "pathological", "iid"], help="partition scheme")
    p.add_argument("--dataset", help="data set: intents, banking77, clinc150, hwu64, 20newsgroups, a hub id or a directory")
    p.add_argument("--model", help="Hugging Face model name or local path")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--set", type=_assignment, action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. train.lr=0.001 or federated.save_adapters_round=3")
    p.add_argument("--out", help="output directory (default results/federated/<config>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last completed round")
    p.add_argument("--overwrite", action="store_true", help="replace the files this run writes in --out without asking (others stay)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from fraq.federated.config import load_config

    over: dict = {}
    for key, flag in (("federated.rounds", args.rounds), ("federated.clients", args.clients),
                      ("train.steps", args.steps), ("federated.ranks", args.ranks), ("partition.alpha", args.alpha),
                      ("partition.scheme", args.partition), ("model.name", args.model), ("threads", args.threads),
                      ("methods", args.methods)):
        if flag is not None:
            over[key] = flag
    if args.dataset is not None:
        d = args.dataset
        over["dataset"] = {"path": d} if Path(d).is_dir() else {"name": d}
    for key, value in args.set:
        over[key] = value
    try:
        cfg = load_config(args.config, over)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or Path("results") / "federated" / Path(args.config).stem)

    def ask(question: str) -> bool:
        if not sys.stdin.isatty():
            return False
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

    try:
        run_experiment(cfg, out, resume=args.resume, overwrite=args.overwrite, ask=ask,
                       progress=not args.no_progress)
    except (OSError, ImportError, ValueError) as e:  # bad input: a message naming it, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
