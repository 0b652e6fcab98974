"""``python -m benchmarks.gpu_check``: see :mod:`benchmarks.gpu_check`.

``--plan`` prints what the next call would measure and measures nothing
(:mod:`benchmarks.gpu_check.plan`); ``--campaign`` measures it, point after point in one
process, into ``--out`` and its ledger (:mod:`benchmarks.gpu_check.campaign`). Every
argument is checked before any work; a bad one stops the command with one line naming it
and its value (exit status 2). So does a ``--out`` another call holds, or whose
earlier results were measured on another device, at another size or by another commit
(:mod:`benchmarks.gpu_check.folder`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from benchmarks.gpu_check import DEFAULT_PARTS, FILES, PARTS, part_names
from benchmarks.gpu_check.folder import temporary_names


def _parser() -> argparse.ArgumentParser:
    from benchmarks.sizes import SIZES

    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check",
                                 description="Everything the suite measures on a GPU, inside a time budget.")
    ap.add_argument("--out", type=Path, help=f"directory for its files ({', '.join(FILES)}); required")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="seconds for every part together (default 420)")
    ap.add_argument("--size", choices=list(SIZES), default="gpu", help="the experiments' size (default gpu)")
    ap.add_argument("--parts", help=f"comma-separated, of {','.join(part_names())} (default: every part but "
                                    f"{','.join(p.name for p in PARTS if not p.default)})")
    ap.add_argument("--plan", action="store_true",
                    help="print what the next call would measure (the points the ledger lacks, by priority, in "
                         "--budget-s) and measure nothing")
    ap.add_argument("--device-kind", help="with --plan: the GPU kind to plan for (default: the newest ledger "
                                          "entry's)")
    ap.add_argument("--campaign", action="store_true",
                    help="measure the plan's points (those the ledger lacks, by priority) in one long-lived process "
                         "inside --budget-s, each written and added to --out's ledger.json as it is measured; a "
                         "second call with the same --out goes on where the first stopped")
    ap.add_argument("--experiments", help="with --campaign: comma-separated experiments to measure (default: every "
                                          "prioritized one)")
    ap.add_argument("--checks", help="with --campaign: comma-separated whole checks to run (the GPU check's parts "
                                     "of the plan's checks; with neither this nor --experiments, every point and "
                                     "check; with either, only what they name)")
    ap.add_argument("--watchdog-floor-s", type=float, default=None,
                    help="with --campaign: the shortest time a point may run before it is killed (default 30)")
    # the campaign's measuring process
    ap.add_argument("--measurer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, help=argparse.SUPPRESS)
    # the parent's call of one part, in its own process
    ap.add_argument("--part", choices=part_names(), help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--until", type=float, help=argparse.SUPPRESS)
    return ap


def _checked(args) -> tuple[list, object]:
    """The parts and the device, or ValueError naming the bad argument."""
    from benchmarks.device import checked
    from fraq.internals import check_dir_out

    if not (math.isfinite(args.budget_s) and args.budget_s >= 10):
        raise ValueError(f"--budget-s(={args.budget_s:g}) must be a number of seconds >= 10")
    names = [p.name for p in DEFAULT_PARTS] if args.parts is None else [p.strip() for p in args.parts.split(",")]
    unknown = [p for p in names if p not in part_names()] or ([] if names else [""])
    if unknown:
        raise ValueError(f"--parts(={args.parts!r}): {unknown[0]!r} is not one of {', '.join(part_names())}")
    device = checked(args.device)
    check_dir_out(args.out, "--out")
    if args.out.is_dir():
        ours = set(FILES) | temporary_names()  # a file being written when a call was stopped, a call's lock
        foreign = sorted(p.name for p in args.out.iterdir() if p.name not in ours)
        if foreign:
            raise ValueError(f"--out(={str(args.out)!r}) holds files this command does not write "
                             f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}): give it an empty "
                             "or new directory")
        if (args.out / "results.tar.gz").is_file():  # an earlier call's results, added to: whole or refused
            from fraq.internals import ArchiveError, open_tar_gz

            try:
                open_tar_gz(args.out / "results.tar.gz").close()
            except ArchiveError as exc:
                raise ValueError(f"--out(={str(args.out)!r}): {exc}; it is left as it is (move it aside to start "
                                 "afresh)") from None
    return [p for p in PARTS if p.name in names], device


def _plan(args) -> int:
    """``--plan``: the next call's plan for ``--device-kind`` (:mod:`benchmarks.gpu_check.plan`)."""
    from benchmarks.gpu_check import ledger, plan

    if not (math.isfinite(args.budget_s) and args.budget_s >= 10):
        print(f"error: --budget-s(={args.budget_s:g}) must be a number of seconds >= 10", file=sys.stderr)
        return 2
    try:
        book = ledger.load()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kind = args.device_kind or book.newest_kind()
    if kind is None:
        print("error: the ledger is empty: give --device-kind NAME", file=sys.stderr)
        return 2
    fp = ledger.fingerprint()
    taken, left = plan.plan(book, kind, fp, args.budget_s, args.size)
    print(plan.render(taken, left, kind=kind, fp=fp, budget_s=args.budget_s))
    return 0


def _campaign_options(args):
    """The campaign's options, or ValueError naming the bad argument."""
    from benchmarks.device import checked
    from benchmarks.gpu_check import plan
    from benchmarks.gpu_check.campaign import WATCHDOG_FLOOR_S, Options
    from benchmarks.gpu_check.measurer import FAULT_ENV, faults
    from fraq.internals import check_dir_out

    if args.parts is not None:
        raise ValueError(f"--parts(={args.parts!r}) chooses the parts of the check; the campaign measures the "
                         "plan's points (--experiments chooses among them)")
    if not (math.isfinite(args.budget_s) and args.budget_s >= 10):
        raise ValueError(f"--budget-s(={args.budget_s:g}) must be a number of seconds >= 10")
    floor = WATCHDOG_FLOOR_S if args.watchdog_floor_s is None else args.watchdog_floor_s
    if not (math.isfinite(floor) and floor > 0):
        raise ValueError(f"--watchdog-floor-s(={floor:g}) must be a positive number of seconds")
    known = list(dict.fromkeys(exp for _, exp, _, _ in plan.PRIORITIES))
    names = None
    if args.experiments is not None:
        names = tuple(e.strip() for e in args.experiments.split(","))
        bad = [e for e in names if e not in known] or ([] if names else [""])
        if bad:
            raise ValueError(f"--experiments(={args.experiments!r}): {bad[0]!r} is not one of {', '.join(known)}")
    checks = None
    if args.checks is not None:
        checks = tuple(c.strip() for c in args.checks.split(","))
        known_checks = [name for _, name, _, _ in plan.CHECKS]
        bad = [c for c in checks if c not in known_checks] or ([] if checks else [""])
        if bad:
            raise ValueError(f"--checks(={args.checks!r}): {bad[0]!r} is not one of {', '.join(known_checks)}")
    faults(os.environ.get(FAULT_ENV))  # a test's planted fault, named before any work
    device = checked(args.device)
    check_dir_out(args.out, "--out")
    return Options(args.out, str(device), args.size, args.budget_s, names, floor, checks)


def _run_campaign(args) -> int:
    """``--campaign``: checked options, ``--out`` held and checked, then the call."""
    from benchmarks.gpu_check.campaign import campaign, refused
    from benchmarks.gpu_check.folder import held

    try:
        opts = _campaign_options(args)
        lock = held(args.out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with lock:
        import torch

        why = refused(opts.out, device=torch.device(opts.device), size=opts.size)
        if why is not None:
            print(f"error: {why}", file=sys.stderr)
            return 2
        try:
            return campaign(opts)
        except KeyboardInterrupt:
            print(f"interrupted: the results and the ledger in {args.out} hold every point measured before it",
                  file=sys.stderr)
            return 130


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    if argv is None:
        argv = sys.argv[1:]
    if any(a == "--part" or a.startswith("--part=") for a in argv):
        # one part, started by the parent: its arguments are the parent's, already checked
        args, _ = ap.parse_known_args(argv)
        if args.work is None or args.until is None:  # typed by hand: a typo for --parts
            print(f"error: --part(={args.part!r}) is the mode the check starts each part in (with --work and "
                  f"--until); for a subset of the parts give --parts {args.part}", file=sys.stderr)
            return 2
        from benchmarks.gpu_check.parent import run_child

        return run_child(args.part, device=args.device, size=args.size, work=args.work, until=args.until)
    args = ap.parse_args(argv)
    if args.measurer:  # started by the campaign, its arguments already checked
        from benchmarks.gpu_check.measurer import serve

        if args.out is None or args.start is None:  # typed by hand
            print("error: --measurer is the mode the campaign starts its measuring process in (with --out and "
                  "--start); to measure, give --campaign", file=sys.stderr)
            return 2
        return serve(device=args.device, size=args.size, out=args.out, start=args.start)
    if args.plan:
        return _plan(args)
    if args.campaign:
        if args.out is None:
            ap.error("--out DIR is required")
        return _run_campaign(args)
    for flag, value in (("--experiments", args.experiments), ("--checks", args.checks),
                        ("--watchdog-floor-s", args.watchdog_floor_s)):
        if value is not None:
            ap.error(f"{flag}(={value!r}) is an option of --campaign")
    if args.out is None:
        ap.error("--out DIR is required")
    try:
        parts, device = _checked(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from benchmarks.gpu_check.folder import held, refused, remove_own_tmp
    from benchmarks.gpu_check.parent import check
    from fraq.internals import machine_record

    try:
        lock = held(args.out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with lock:
        why = refused(args.out, device=str(device), size=args.size, git_sha=machine_record("cpu").get("git_sha"))
        if why is not None:
            print(f"error: {why}", file=sys.stderr)
            return 2
        remove_own_tmp(args.out)
        try:
            return check(args.out, parts, device=device, size=args.size, budget_s=args.budget_s)
        except KeyboardInterrupt:
            print(f"interrupted: the files in {args.out} are whole and hold the parts finished before it",
                  file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
