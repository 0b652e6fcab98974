"""Record the last N commits of a branch with asv and compare the last two with asv's statistics.

    python -m benchmarks.regress                        # last 2 commits of main, factor 1.5
    python -m benchmarks.regress --commits 5 --factor 1.3 --bench "RankSweep|Table4" --quick

For each commit (oldest first) the committed tree is exported with ``git archive`` to a
temporary directory (the working tree, index and branches are never touched) and
recorded with ``asv run --python=<asv_python()> --set-commit-hash <sha>`` with ``ASV_PYTHONPATH``
pointing at it, so ``import fraq`` is that commit's code and nothing else of it. The
instrument is held fixed: the suite and its measurement helpers are the current
``benchmarks/`` (asv's own model), which reach the old ``fraq`` only through its public
API; nothing is copied into the old tree. A commit without a feature the suite needs is
recorded as skipped, not failed. Commits already recorded for this machine are not
re-run (``--rerun`` forces it).

Results go under asv's own machine name for this host (``asv machine --yes``, the one
``make bench`` and ``asv compare`` use) and one asv environment, :func:`asv_python`'s:
asv names an ``existing`` environment after the interpreter's path, so ``.venv/bin/python``
and ``.venv/bin/python3`` (``.venv/bin/asv``'s shebang) would be two histories, each
missing the other's commits. Every Makefile target passes the same ``--python``, so
``make bench-quick``, ``make bench``, ``make regress``, ``asv compare HEAD~1 HEAD`` and
``asv publish`` see one history, and a commit counts as recorded only when this machine
has it for that environment. The suite's thread count (``FRAQ_BENCH_THREADS``, default 1)
and device (``FRAQ_BENCH_DEVICE``) are fixed per machine by convention: record a
different setting under ``--machine NAME``.

The comparison is asv's own (:func:`asv.commands.compare.Compare.print_table` for the
table, with ``--factor`` and ``--split``; the same test, ratio beyond the factor *and*
statistically different samples, for the verdict). A timing whose two sides do not both
have several samples (``--quick`` records one) gets no verdict: it is reported as "not
enough samples", never as a regression. ``track_`` values are deterministic (FLOPs,
bytes) and compared by the factor alone; rounding-level error tracks (``--ignore``) are
shown but never fail the run. Exit status 1 on a regression, 2 when asv itself failed.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, ".asv", "results")
DEFAULT_IGNORE = r"track_excess|track_relative_error|track_orthogonality|track_optimal_error|track_gap_to_svd"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def _asv(*args: str, env: dict | None = None, capture: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "asv", *args]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=capture)


def export_commit(sha: str, dest: str) -> None:
    """The committed tree of ``sha`` into ``dest``, as it is (nothing added)."""
    archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def machine_name() -> str:
    """asv's machine name for this host (``~/.asv-machine.json``), creating it with asv's defaults."""
    from asv.machine import Machine

    _asv("machine", "--yes", capture=True)
    return Machine.get_unique_machine_name()


def asv_python() -> str:
    """The interpreter every asv recording names: this environment's ``bin/python``
    (what the Makefile's ``$(abspath .venv/bin/python)`` is), whichever of its aliases
    (``python3``, ``python3.11``) runs this process; ``sys.executable`` outside a
    virtual environment that has one."""
    candidate = os.path.join(sys.prefix, "bin", "python")
    try:
        if os.path.samefile(candidate, sys.executable):
            return candidate
    except OSError:
        pass
    return sys.executable


def env_name(python: str | None = None) -> str:
    """asv's name for the ``existing`` environment of ``python`` (default :func:`asv_python`),
    as asv itself computes it: ``existing-py`` and the path with ``/`` as ``_``."""
    from asv.environment import ExistingEnvironment

    conf = _conf()
    return ExistingEnvironment(conf, python or asv_python(), {}, {}).name


def _conf():
    from asv.config import Config

    conf = Config.load(os.path.join(ROOT, "asv.conf.json"))
    conf.results_dir = RESULTS
    return conf


def recorded(machine: str, sha: str, env: str, results: str | None = None) -> bool:
    """Whether ``machine`` has results of ``sha`` in environment ``env`` (asv's own file name)
    under ``results`` (default :data:`RESULTS`)."""
    from asv.results import get_filename

    return os.path.isfile(os.path.join(results or RESULTS, get_filename(machine, sha, env)))


def _results(conf, machine: str, sha: str, env: str) -> dict:
    """name(params) -> (value, stats, samples) of one recorded commit in environment ``env``,
    as asv stores them."""
    from asv.commands.compare import unroll_result
    from asv.results import iter_results_for_machine_and_hash

    out = {}
    for result in iter_results_for_machine_and_hash(conf.results_dir, machine, sha):
        if result.env_name != env:
            continue
        for key in result.get_all_result_keys():
            params = result.get_result_params(key)
            for name, value, stats, samples in unroll_result(key, params, result.get_result_value(key, params),
                                                             result.get_result_stats(key, params),
                                                             result.get_result_samples(key, params)):
                out[name] = (value, stats, samples)
    return out


def _enough(stats, samples) -> bool:
    """Several samples on this side (asv records one with ``--quick``)."""
    return bool(stats) and stats.get("repeat", 0) > 1 and samples is not None and len(samples) > 1


def verdicts(before: dict, after: dict, factor: float) -> list[tuple[str, str, float | None]]:
    """(verdict, benchmark, ratio) for every benchmark of ``after``: ``regression``,
    ``improvement``, ``now failing``, ``not enough samples`` (a timing beyond the factor
    without several samples on both sides) or ``same``. The test is asv's own
    (:func:`asv.commands.compare._is_result_better`: ratio beyond ``factor`` and, for
    samples, statistically different)."""
    from asv.commands.compare import _is_result_better

    out = []
    for name, (v2, s2, x2) in sorted(after.items()):
        v1, s1, x1 = before.get(name, (float("nan"), None, None))
        if v1 is not None and v2 is None:
            out.append(("now failing", name, None))
            continue
        if v1 is None or v2 is None or v1 != v1 or v2 != v2 or v1 == 0:
            continue
        ratio = v2 / v1
        timing = ".time_" in name or ".peakmem_" in name or ".mem_" in name
        worse = _is_result_better(v1, v2, (s1, x1), (s2, x2), factor)
        better = _is_result_better(v2, v1, (s2, x2), (s1, x1), factor)
        if timing and (worse or better) and not (_enough(s1, x1) and _enough(s2, x2)):
            out.append(("not enough samples", name, ratio))
        elif worse:
            out.append(("regression", name, ratio))
        elif better:
            out.append(("improvement", name, ratio))
        else:
            out.append(("same", name, ratio))
    return out


def main(argv=None) -> int:
    from benchmarks.cases import env_threads

    env_threads()  # a bad FRAQ_BENCH_THREADS stops here, in one line, before any recording
    ap = argparse.ArgumentParser(prog="python -m benchmarks.regress", description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=2, help="how many of the branch's last commits (>= 2)")
    ap.add_argument("--branch", default="main")
    ap.add_argument("--factor", type=float, default=1.5, help="regression threshold on the after/before ratio")
    ap.add_argument("--bench", "-b", default=None, help="asv benchmark regex (default: the whole suite)")
    ap.add_argument("--quick", action="store_true", help="asv --quick: one sample each (a smoke test; no verdicts)")
    ap.add_argument("--machine", default=None, help="asv machine name (default: asv's for this host)")
    ap.add_argument("--ignore", default=DEFAULT_IGNORE, help="regex of benchmarks that never fail the run")
    ap.add_argument("--rerun", action="store_true", help="re-record commits that already have results")
    args = ap.parse_args(argv)
    if args.commits < 2:
        ap.error(f"--commits(={args.commits}) must be >= 2 to compare")
    if args.factor <= 1:
        ap.error(f"--factor(={args.factor}) must be > 1")

    shas = _git("rev-list", "--first-parent", "-n", str(args.commits), args.branch).split()[::-1]
    if len(shas) < 2:
        print(f"{args.branch} has fewer than 2 commits", file=sys.stderr)
        return 2
    machine = args.machine or machine_name()
    python, env = asv_python(), env_name()
    for sha in shas:
        if recorded(machine, sha, env) and not args.rerun:
            print(f"{sha[:8]}: already recorded on {machine} in {env}")
            continue
        with tempfile.TemporaryDirectory(prefix=f"fraq-{sha[:8]}-") as tree:
            export_commit(sha, tree)
            run_env = dict(os.environ, ASV_PYTHONPATH=tree)
            run = ["run", f"--python={python}", "--set-commit-hash", sha, "--machine", machine, "--show-stderr"]
            run += ["--quick"] if args.quick else []
            run += ["-b", args.bench] if args.bench else []
            rc = _asv(*run, env=run_env).returncode
            # asv exits 2 when some benchmark failed: recorded as failed, which the comparison reports.
            if rc not in (0, 2):
                return 2

    old, new = shas[-2], shas[-1]
    from asv.commands.compare import Compare

    conf = _conf()
    try:
        before, after = _results(conf, machine, old, env), _results(conf, machine, new, env)
        if not before or not after:
            print(f"no asv results for {old[:8] if not before else new[:8]} on {machine} in {env}", file=sys.stderr)
            return 2
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            Compare.print_table(conf, old, new, factor=args.factor, split=True, machine=machine, env_names=[env])
        finally:
            os.chdir(cwd)
    except Exception as exc:  # asv's UserError and friends: asv could not compare
        print(f"asv compare failed: {exc}", file=sys.stderr)
        return 2
    ignore = re.compile(args.ignore) if args.ignore else None
    found = verdicts(before, after, args.factor)
    failing = 0
    for verdict, name, ratio in found:
        if verdict in ("same", "improvement"):
            continue
        ignored = ignore is not None and ignore.search(name) is not None
        label = "ignored " + verdict if ignored and verdict != "not enough samples" else verdict
        failing += verdict in ("regression", "now failing") and not ignored
        print(f"{label}: {name}" + ("" if ratio is None else f" ratio {ratio:.2f}"))
    unsure = sum(v == "not enough samples" for v, _, _ in found)
    print(f"{old[:8]} -> {new[:8]} on {machine} in {env}: {failing} regression(s) beyond {args.factor}x"
          + (f", {unsure} change(s) with not enough samples to judge (record without --quick)" if unsure else ""))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
