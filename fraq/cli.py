"""``python -m fraq``: FRAQ on the model presets with synthetic LoRA-like clients.

Commands: ``fraq [demo] [options]`` (this benchmark, the default), ``fraq aggregate
CLIENT_DIR... -o OUT_DIR`` (peft adapters in, one peft adapter out:
:mod:`fraq.peft`) and ``fraq example-adapters DIR`` (a tiny model and client
adapters to try it on). The demo: for each preset it stacks the clients' factors per module group, recompresses every
adapted matrix in batched kernels, and prints per preset and tau: server latency
(median and spread), the selected ranks, the downlink relative to the uncompressed
FLoRA stack, and the relative error against a float64 reference together with the
float64 Eckart-Young optimum at the same ranks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import fraq
from fraq.measure import machine_record, time_call
from fraq.presets import PRESETS, get_preset
from fraq.reference import optimal_error, relative_error
from fraq.synthetic import lora_clients

__all__ = ["main", "run_preset"]

DEFAULT_PRESETS = ("roberta-base", "llama-3.2-3b")


def _clients(preset, seed):
    """Per module group: stacked (B, A) with a batch dimension of ``count`` layers."""
    stacks = []
    for i, grp in enumerate(preset.groups):
        Bs, As = lora_clients(grp.m, grp.n, preset.ranks, batch=(grp.count,), seed=seed + i)
        B, A = fraq.stack(Bs, As, scales=preset.scales)
        stacks.append((grp, B, A))
    return stacks


def run_preset(name: str, taus, *, repeats: int = 5, seed: int = 0, backend: str = "householder") -> list[dict]:
    """Measure FRAQ on one preset; one row per tau."""
    preset = get_preset(name)
    stacks = _clients(preset, seed)
    rows = []
    for tau in taus:
        def run():
            return [fraq.recompress(B, A, tau=tau, backend=backend) for _, B, A in stacks]

        timing = time_call(run, repeats=repeats, warmup=1)
        results = run()
        ranks = torch.cat([res.rank.reshape(-1) for res in results])
        sent = sum(int(res.rank.sum()) * (g.m + g.n) for (g, _, _), res in zip(stacks, results))
        errs = torch.cat([relative_error(B, A, res.B, res.A) for (_, B, A), res in zip(stacks, results)])
        opts = torch.cat([optimal_error(B, A, res.rank) for (_, B, A), res in zip(stacks, results)])
        rows.append({
            "preset": name, "tau": tau, "backend": backend, "modules": preset.modules,
            "clients": preset.clients, "stacked_rank": sum(preset.ranks),
            "latency_ms": timing.median * 1e3, "latency_iqr_ms": timing.iqr * 1e3,
            "latency_samples_s": list(timing.samples), "threads": timing.threads,
            "rank_min": int(ranks.min()), "rank_median": float(ranks.float().median()),
            "rank_max": int(ranks.max()),
            "downlink_pct_flora": 100.0 * sent / preset.stack_params(),
            "rel_error_median": float(errs.median()), "rel_error_max": float(errs.max()),
            "excess_over_optimum_max": float((errs - opts).max()),
        })
    return rows


def _print(rows) -> None:
    head = (f"{'preset':<22}{'tau':>5}{'latency ms':>16}{'rank min/med/max':>18}"
            f"{'downlink %FLoRA':>17}{'rel err (med)':>15}{'excess vs opt':>15}")
    print(head)
    print("-" * len(head))
    for r in rows:
        lat = f"{r['latency_ms']:.1f} ± {r['latency_iqr_ms']:.1f}"
        ranks = f"{r['rank_min']}/{r['rank_median']:g}/{r['rank_max']}"
        print(f"{r['preset']:<22}{r['tau']:>5.2f}{lat:>16}{ranks:>18}{r['downlink_pct_flora']:>17.1f}"
              f"{r['rel_error_median']:>15.3e}{r['excess_over_optimum_max']:>15.1e}")


_COMMANDS = """commands:
  fraq [demo] [options]              this benchmark (the default command)
  fraq aggregate CLIENT_DIR... -o OUT_DIR [--weights N...] [--tau T] [--report]
                                     aggregate peft LoRA adapters into one (fraq aggregate --help)
  fraq example-adapters DIR          write a tiny model and 3 client adapters to try aggregate on
"""


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``aggregate`` and ``example-adapters``; anything else (or ``demo``) runs the demo."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["aggregate"]:
        return aggregate_main(argv[1:])
    if argv[:1] == ["example-adapters"]:
        return example_main(argv[1:])
    if argv[:1] == ["demo"]:
        argv = argv[1:]
    return demo_main(argv)


def demo_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fraq [demo]", description=__doc__.split("\n\n")[0], epilog=_COMMANDS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", action="append", choices=sorted(PRESETS),
                        help=f"preset to run (repeatable; default: {', '.join(DEFAULT_PRESETS)})")
    parser.add_argument("--tau", type=float, action="append", help="energy threshold (repeatable; default 0.8 and 0.95)")
    parser.add_argument("--backend", default="householder", choices=sorted(fraq.BACKENDS))
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (default 5)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the rows and the machine record here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats(={args.repeats}) must be >= 1")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads(={args.threads}) must be >= 1")
        torch.set_num_threads(args.threads)
    taus = args.tau or [0.8, 0.95]
    for t in taus:
        if not 0.0 < t <= 1.0:
            parser.error(f"--tau(={t}) must be in (0, 1]")
    machine = machine_record()
    print(f"fraq {fraq.__version__} | torch {machine['torch']} | {machine['cpu']} | "
          f"{machine['threads']} threads | BLAS {machine['blas']} | float32, synthetic LoRA-like clients")
    rows = []
    for name in args.preset or DEFAULT_PRESETS:
        rows += run_preset(name, taus, repeats=args.repeats, seed=args.seed, backend=args.backend)
    _print(rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
        tmp.replace(args.json)
        print(f"wrote {args.json}")
    return 0


def aggregate_main(argv: list[str]) -> int:
    """``fraq aggregate``: see :func:`fraq.peft.aggregate_adapters`. A bad input is refused before any
    work with one line ``fraq aggregate: error: ...`` and exit status 2 (argparse's convention); a
    failure while writing gives status 1 and leaves the earlier output whole."""
    from fraq.aggregators import AGGREGATORS

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
    parser.add_argument("--method", default="fraq", choices=list(AGGREGATORS), help="aggregator (default fraq)")
    parser.add_argument("--tau", type=float, help="energy threshold in (0, 1] (fraq, florist; default: the method's)")
    parser.add_argument("--rank", type=int, help="fixed rank per module instead of --tau (fraq)")
    parser.add_argument("--delta", action="store_true",
                        help="write dense per-module deltas <module>.weight in the base weight's layout")
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
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the report rows as JSON ('-': stdout)")
    args = parser.parse_args(argv)
    if args.out is None and not (args.report or args.json):
        parser.error("nothing to do: pass -o OUT, --report or --json")
    from fraq.peft import CONFIG, WEIGHTS, aggregate_adapters
    from fraq.peft.aggregate import client_paths
    from fraq.peft.writer import check_file_out, write_json

    def fail(err: Exception, code: int) -> int:
        print(f"fraq aggregate: error: {err}", file=sys.stderr)
        return code

    to_file = args.json is not None and str(args.json) != "-"
    try:  # everything is checked before any work: the JSON path here, the rest in aggregate_adapters
        paths = client_paths(args.clients)
        if to_file:
            taken = [] if args.out is None else [args.out] if args.delta else [args.out / CONFIG, args.out / WEIGHTS]
            check_file_out(args.json, args.overwrite, paths, "--json", taken)
        agg = aggregate_adapters(paths, args.out, weights=args.weights, method=args.method, tau=args.tau,
                                 rank=args.rank, delta=args.delta, dtype=getattr(torch, args.dtype),
                                 compute_dtype=getattr(torch, args.compute_dtype), uniform_rank=args.uniform_rank,
                                 overwrite=args.overwrite, report=bool(args.report or args.json))
    except (ValueError, TypeError) as e:
        return fail(e, 2)
    except OSError as e:  # a failure while writing (disk full, permissions changed): the old output is intact
        return fail(e, 1)
    if args.report:
        print(agg.table())
    if args.json is not None:
        if to_file:
            try:
                write_json(args.json, agg.to_json(), args.overwrite, paths)
            except (ValueError, OSError) as e:
                return fail(e, 1)
        else:
            print(json.dumps(agg.to_json(), indent=2))
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
    if args.dir.exists() and (not args.dir.is_dir() or any(args.dir.iterdir())):
        parser.error(f"{args.dir} exists and is not an empty directory")
    from fraq.peft import example_clients

    paths = example_clients(args.dir, clients=args.clients, seed=args.seed)
    print(f"wrote {args.dir / 'base'} and {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
