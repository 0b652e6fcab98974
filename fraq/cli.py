"""``fraq`` / ``python -m fraq``: aggregate peft LoRA adapters from the command line.

Commands: ``fraq aggregate CLIENT_DIR... -o OUT_DIR`` (peft adapters in, one peft adapter
out: :mod:`fraq.peft`) and ``fraq example-adapters DIR`` (a tiny model and client adapters
to try it on). The latency demo is a benchmark: ``make demo`` (``python -m benchmarks.demo``).

Arguments are parsed before torch, safetensors or peft is imported, so ``--help`` and a
bad argument answer at once; a command imports what it needs once its arguments are
known to be good. Every failure is one line ``fraq COMMAND: error: ...`` naming the path
or value: exit status 2 for an input refused before any work, 1 for a failure while
writing (the earlier output is then left whole).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fraq.methods import PACKAGE_METHODS

__all__ = ["main"]

_USAGE = """usage: fraq COMMAND ...

fraq: aggregate peft LoRA adapters from the command line.

commands:
  fraq aggregate CLIENT_DIR... -o OUT_DIR [--weights N...] [--tau T] [--report]
                                     aggregate peft LoRA adapters into one (fraq aggregate --help)
  fraq example-adapters DIR          write a tiny model and 3 client adapters to try aggregate on
  fraq --version                     the installed version
"""


def cli_words(err: Exception) -> str:
    """A library error as a command-line user reads it: "pass overwrite=True (--overwrite)"
    becomes "pass --overwrite"."""
    import re

    return re.sub(r"\b\w+=True \((--[\w-]+)\)", r"\1", str(err))


def version() -> str:
    """fraq's version, without importing torch."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("fraq")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``aggregate`` and ``example-adapters``; print the commands for none or ``--help``,
    the version for ``--version``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-V"], ["--version"]):
        print(f"fraq {version()}")
        return 0
    if argv[:1] == ["aggregate"]:
        return aggregate_main(argv[1:])
    if argv[:1] == ["example-adapters"]:
        return example_main(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(_USAGE)
        raise SystemExit(0)
    if not argv:
        print(_USAGE, file=sys.stderr)
        return 2
    print(f"fraq: error: unknown command {argv[0]!r}: the commands are aggregate and example-adapters "
          f"(fraq --help)", file=sys.stderr)
    return 2


def aggregate_main(argv: list[str]) -> int:
    """``fraq aggregate``: see :func:`fraq.peft.aggregate_adapters`. A bad input is refused before any
    work with one line ``fraq aggregate: error: ...`` and exit status 2 (argparse's convention); a
    failure while writing gives status 1 and leaves the earlier output whole."""
    parser = argparse.ArgumentParser(
        prog="fraq aggregate",
        description="Aggregate peft LoRA adapter directories (adapter_config.json + adapter_model.safetensors) "
                    "into one peft adapter whose every module has scale 1, or into a dense weight delta.",
        epilog="example: fraq aggregate c0 c1 c2 --weights 120 80 40 --tau 0.95 -o merged --report")
    parser.add_argument("clients", nargs="+", metavar="CLIENT_DIR", help="peft adapter directories")
    parser.add_argument("-o", "--out", type=Path,
                        help="output adapter directory (with --delta: the .safetensors file); omit to only report")
    parser.add_argument("--weights", type=float, nargs="+", metavar="N",
                        help="one data weight per client, normalized inside (default: equal)")
    parser.add_argument("--method", default="fraq", metavar="METHOD",  # checked by the registry: any registered one
                        help=f"a registered aggregator: the package's ({', '.join(PACKAGE_METHODS)}), and those named "
                             "by the fraq.aggregators entry points or FRAQ_METHODS, with options as "
                             "NAME:KEY=VALUE,... (e.g. fraq:backend=cholesky,tau=0.9; default fraq)")
    parser.add_argument("--tau", type=float, help="energy threshold in (0, 1] (fraq, florist; default: the method's)")
    parser.add_argument("--rank", type=int, help="fixed rank per module instead of --tau (fraq)")
    parser.add_argument("--delta", action="store_true",
                        help="write dense per-module deltas <module>.weight in the base weight's layout")
    parser.add_argument("--base", type=Path, metavar="DIR",
                        help="with --delta: the base model directory whose module types give each delta's layout "
                             "(default: the adapters' base_model_name_or_path)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"],
                        help="dtype written (default float32)")
    parser.add_argument("--compute-dtype", default="float64", choices=["float64", "float32"],
                        help="dtype of the arithmetic (default float64: exact at --tau 1 to float32 rounding)")
    parser.add_argument("--uniform-rank", action="store_true",
                        help="pad every module to the largest rank with zeros: no rank_pattern in the config")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing OUT (swapped in whole; other plain files in it are kept) "
                             "and an existing --json file; inputs are never written")
    parser.add_argument("--report", action="store_true",
                        help="print per module: shape, client ranks, rank kept, energy, error, parameters")
    parser.add_argument("--no-certificate", action="store_true",
                        help="skip the exactness certificate (per module ||update - exact||_F / ||exact||_F with a "
                             "float64 rounding bound; about the flops of FRAQ's own recompression)")
    parser.add_argument("--probe-certificate", action="store_true",
                        help="certify from 8 Gaussian probes instead, at about a tenth of FRAQ's own flops "
                             "(not of its time on a CPU: docs/library.md): '<= b with probability 0.999' per "
                             "module (fraq.aggregators.certify_probe)")
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="write the report rows as JSON ('-': stdout, which then holds only the JSON; "
                             "--report's table goes to stderr)")
    args = parser.parse_args(argv)
    if args.out is None and not (args.report or args.json):
        parser.error("nothing to do: pass -o OUT, --report or --json")
    if args.no_certificate and args.probe_certificate:
        parser.error("--no-certificate and --probe-certificate: give one")
    from fraq._files import leftovers_as_lines

    with leftovers_as_lines("fraq aggregate"):
        return _aggregate(args)


def _aggregate(args: argparse.Namespace) -> int:
    import torch

    from fraq._files import check_file_target
    from fraq.aggregators import MethodLoadError, load_outside_methods
    from fraq.methods import MethodSpec
    from fraq.peft import CONFIG, WEIGHTS, aggregate_adapters
    from fraq.peft.aggregate import client_paths
    from fraq.peft.writer import check_file_out, write_json

    def fail(err: Exception, code: int) -> int:
        print(f"fraq aggregate: error: {cli_words(err)}", file=sys.stderr)
        return code

    to_file = args.json is not None and str(args.json) != "-"
    try:  # everything is checked before any work: the JSON path here, the rest in aggregate_adapters
        load_outside_methods()
        method = MethodSpec.parse(args.method)
        paths = client_paths(args.clients)
        if to_file:
            check_file_target(args.json, "--json", dash=True)
            taken = [] if args.out is None else [args.out] if args.delta else \
                [args.out, args.out / CONFIG, args.out / WEIGHTS]
            check_file_out(args.json, args.overwrite, paths, "--json", taken)
        options = method.kwargs
        for flag in ("tau", "rank"):
            if getattr(args, flag) is not None and flag in options:
                raise ValueError(f"--{flag}(={getattr(args, flag)!r}) and --method(={args.method!r}) both set "
                                 f"{flag}; give it once")
        tau = args.tau if args.tau is not None else options.pop("tau", None)
        rank = args.rank if args.rank is not None else options.pop("rank", None)
        agg = aggregate_adapters(paths, args.out, weights=args.weights, method=method.name, tau=tau,
                                 rank=rank, delta=args.delta, dtype=getattr(torch, args.dtype),
                                 compute_dtype=getattr(torch, args.compute_dtype), uniform_rank=args.uniform_rank,
                                 overwrite=args.overwrite, report=bool(args.report or args.json), base=args.base,
                                 certificate=not args.no_certificate,
                                 certificate_method="probe" if args.probe_certificate else "gram", **options)
    except (ValueError, TypeError, MethodLoadError) as e:
        return fail(e, 2)
    except OSError as e:  # a failure while writing (disk full, permissions changed): the old output is intact
        return fail(e, 1)
    if args.report:  # beside JSON on stdout, the table goes to stderr: stdout stays one JSON document
        print(agg.table(), file=sys.stderr if args.json is not None and not to_file else sys.stdout)
    if args.json is not None:
        if to_file:
            try:
                write_json(args.json, agg.to_json(), args.overwrite, paths)
            except (ValueError, OSError) as e:
                return fail(e, 1)
        else:
            print(json.dumps(agg.to_json(), indent=2, allow_nan=False))
    if agg.certificate is not None:  # the worst module (--report's table has every module's)
        from fraq.peft.report import certificate_line

        print(certificate_line(agg.certificate), file=sys.stderr)
    if agg.path is not None:
        t = agg.totals()
        if agg.delta:
            print(f"wrote delta {agg.path}: {t['modules']} dense <module>.weight deltas, method {agg.method}",
                  file=sys.stderr)
        else:
            print(f"wrote adapter {agg.path}: {t['modules']} modules, {t['params']} parameters "
                  f"({t['params_pct_flora']:.1f}% of the FLoRA stack), method {agg.method}", file=sys.stderr)
    return 0


def example_main(argv: list[str]) -> int:
    """``fraq example-adapters DIR``: see :func:`fraq.peft.example_clients`."""
    parser = argparse.ArgumentParser(
        prog="fraq example-adapters",
        description="Write a tiny random BERT (no download) to DIR/base and client peft adapters of it to "
                    "DIR/client0, DIR/client1, ... (mixed ranks, rsLoRA, rank_pattern). Needs transformers and peft.")
    parser.add_argument("dir", type=Path, metavar="DIR")
    parser.add_argument("--clients", type=int, default=3, help="number of adapters (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.clients < 1:
        parser.error(f"--clients(={args.clients}) must be >= 1")
    from fraq._files import check_parent

    try:
        if args.dir.exists() and (not args.dir.is_dir() or any(args.dir.iterdir())):
            raise ValueError(f"DIR(={str(args.dir)!r}) exists and is not an empty directory: give a new one")
        check_parent(args.dir, "DIR")
    except (ValueError, OSError) as e:
        parser.error(str(e))
    from fraq._files import leftovers_as_lines
    from fraq.peft import example_clients

    try:
        with leftovers_as_lines("fraq example-adapters"):
            paths = example_clients(args.dir, clients=args.clients, seed=args.seed)
    except ImportError as e:
        print(f"fraq example-adapters: error: {e} (pip install -e '.[fl]')", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"fraq example-adapters: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.dir / 'base'} and {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
