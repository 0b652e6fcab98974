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
(:func:`fraq.federated.experiment.run_experiment`); the analysis draws the table and the
curves from those files. A file is never overwritten without asking: an output directory that holds
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
import os
import sys
from pathlib import Path

from fraq._help import plain
from fraq.federated.experiment import points, run_experiment
from fraq.federated.outputs import interrupted

__all__ = ["build_parser", "main"]


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
    return key, raw  # parsed with the other flags' values (_overrides): an error is then one line


def build_parser() -> argparse.ArgumentParser:
    from fraq.federated.config_files import SETTINGS

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


def _data_dir(flag: str | None, config) -> str | None:
    """The local folder of the published data sets for ``config``: ``--data-dir``, else ``$FRAQ_DATA``
    when the setting's data set is one of them (:data:`~fraq.federated.published.PUBLISHED`);
    None (the hub, or another source) otherwise. An absolute path, so a result records where
    its data came from whatever the working directory."""
    from fraq.federated.published import PUBLISHED

    if flag is not None:
        return str(Path(flag).absolute())
    env = os.environ.get("FRAQ_DATA")
    if env and config.dataset.get("name") in PUBLISHED and config.dataset.get("data_dir") is None:
        return str(Path(env).absolute())
    return None


def _overrides(args: argparse.Namespace) -> dict:
    """The dotted config keys the flags set (``--set`` last, so it wins; its values are JSON,
    else strings, :func:`~fraq.federated.config_files.parse_value`)."""
    from fraq.federated.config_files import parse_value

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
    for key, raw in args.set:
        over[key] = parse_value(key, raw)
    return over


def _configure(args: argparse.Namespace):
    """The run's :class:`~fraq.federated.config.Config` from the flags, and one note per
    variant the flags changed (:meth:`~fraq.federated.config.Config.ranks_given`,
    :meth:`~fraq.federated.config.Config.clients_given`); ValueError naming the key and value."""
    from fraq.federated.config import load_config

    config = load_config(args.config, _overrides(args))
    data_dir = _data_dir(args.data_dir, config)
    if data_dir is not None:
        config = config.override({"dataset.data_dir": data_dir})
    if args.variants is not None:
        config = config.only_variants(args.variants)
    notes = []
    ranks = "--set federated.ranks" if any(k == "federated.ranks" for k, _ in args.set) else \
        "--ranks" if args.ranks is not None else None
    if ranks is not None:
        config, notes = config.ranks_given(ranks, args.variants is not None)
    given = "--set federated.clients" if any(k == "federated.clients" for k, _ in args.set) else \
        "--clients" if args.clients is not None else None
    if given is not None:
        config, cut = config.clients_given(given)
        notes += cut
    return config, notes


def _ask(question: str) -> bool:
    """Overwrite earlier files? Only a yes at a terminal says so."""
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from fraq.aggregators import MethodLoadError, load_outside_methods

    try:  # the methods from outside the package, before any work: one line naming a failing one
        load_outside_methods()
    except MethodLoadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        config, notes = _configure(args)
        plan = points(config)  # the run plan, once: the output checks, the run and the Ctrl-C line read it
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or Path("results") / "federated" / Path(args.config).stem)
    for note in notes:
        print(note, file=sys.stderr)
    try:
        run_experiment(config, out, plan=plan, resume=args.resume, overwrite=args.overwrite, ask=_ask,
                       progress=not args.no_progress)
    except KeyboardInterrupt:
        print(interrupted(plan, out, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return 130
    except (OSError, ImportError, ValueError) as e:  # bad input: a message naming it, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
