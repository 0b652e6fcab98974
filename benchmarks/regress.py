"""Record the last N commits of a branch with asv and fail on a regression.

    python -m benchmarks.regress                        # last 2 commits of main, factor 1.5
    python -m benchmarks.regress --commits 5 --factor 1.3 --bench "Sweep|Table4" --quick

For each commit (oldest first) the committed tree is exported with ``git archive`` to a
temporary directory (the working tree, index and branches are never touched) and
recorded with ``asv run --python=same --set-commit-hash <sha>`` with ``ASV_PYTHONPATH``
pointing at it, so ``import fraq`` is that commit's code and nothing else of it. The
instrument is held fixed: the suite and its measurement helpers are the current
``benchmarks/`` (asv's own model), which reach the old ``fraq`` only through its public
API (``fraq.stack``, ``fraq.recompress``, ``fraq.BACKENDS``, ``get_aggregator``); nothing
is copied into the old tree. A commit without a feature the suite needs (a backend, an
aggregator) is recorded as skipped, not failed. Commits already recorded for this
machine are not re-run (``--rerun`` forces it). ``FRAQ_BENCH_DEVICE`` is passed through,
and the device is part of the asv machine name.

Then ``asv compare`` of the last two commits is printed, and the exit status is 1 if any
benchmark got worse by more than ``--factor`` (asv's test: the ratio exceeds the factor
and, for timings with samples, the difference is statistically significant), or started
failing. Benchmarks matching ``--ignore`` (by default the rounding-level error tracks,
whose ratios are not meaningful) are shown but do not fail the run. Exit status 2: asv
itself failed.

Results go under the asv machine ``<hostname>-<threads>thr[-<device>]``: the thread
count (``FRAQ_BENCH_THREADS``) and the device are part of what a result means, so runs at
different settings are never compared with each other. Why not ``asv continuous``: it builds
virtualenvs, which would install torch from PyPI instead of the local torch==2.13.0
wheel; this script gives the same comparison in the existing environment.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_IGNORE = r"track_excess|track_orthogonality|ConditionFidelity"


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


def recorded(machine: str, sha: str) -> bool:
    results = os.path.join(ROOT, ".asv", "results", machine)
    return os.path.isdir(results) and any(f.startswith(sha[:8]) for f in os.listdir(results))


def parse_compare(text: str) -> list[tuple[str, str, str]]:
    """(mark, ratio, benchmark) for each row of ``asv compare``'s table."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in ("+", "-", "!", "*", "x", ""):
            if cells[4].startswith("Benchmark") or set(cells[4]) <= {"-"}:
                continue
            rows.append((cells[0], cells[3], cells[4]))
    return rows


def main(argv=None) -> int:
    from benchmarks.cases import env_threads

    ap = argparse.ArgumentParser(prog="python -m benchmarks.regress", description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=2, help="how many of the branch's last commits (>= 2)")
    ap.add_argument("--branch", default="main")
    ap.add_argument("--factor", type=float, default=1.5, help="regression threshold on the after/before ratio")
    ap.add_argument("--bench", "-b", default=None, help="asv benchmark regex (default: the whole suite)")
    ap.add_argument("--quick", action="store_true", help="asv --quick: one sample each (noisy; smoke test)")
    ap.add_argument("--threads", type=int, default=env_threads())
    ap.add_argument("--ignore", default=DEFAULT_IGNORE, help="regex of benchmarks that never fail the run")
    ap.add_argument("--rerun", action="store_true", help="re-record commits that already have results")
    args = ap.parse_args(argv)
    if args.commits < 2:
        ap.error(f"--commits(={args.commits}) must be >= 2 to compare")

    shas = _git("rev-list", "--first-parent", "-n", str(args.commits), args.branch).split()[::-1]
    if len(shas) < 2:
        print(f"{args.branch} has fewer than 2 commits", file=sys.stderr)
        return 2
    from benchmarks.device import bench_device

    device = bench_device()
    machine = f"{socket.gethostname()}-{args.threads}thr" + ("" if device.type == "cpu" else f"-{device}")
    if _asv("machine", "--machine", machine, "--yes", capture=True).returncode != 0:
        return 2

    for sha in shas:
        if recorded(machine, sha) and not args.rerun:
            print(f"{sha[:8]}: already recorded on {machine}")
            continue
        with tempfile.TemporaryDirectory(prefix=f"fraq-{sha[:8]}-") as tree:
            export_commit(sha, tree)
            env = dict(os.environ, ASV_PYTHONPATH=tree, FRAQ_BENCH_THREADS=str(args.threads))
            run = ["run", "--python=same", "--set-commit-hash", sha, "--machine", machine, "--show-stderr"]
            run += ["--quick"] if args.quick else []
            run += ["-b", args.bench] if args.bench else []
            rc = _asv(*run, env=env).returncode
            # asv exits 2 when some benchmark failed: recorded as failed, which compare reports.
            if rc not in (0, 2):
                return 2

    old, new = shas[-2], shas[-1]
    cmp = _asv("compare", old, new, "--machine", machine, "--factor", str(args.factor), "--split", capture=True)
    print(cmp.stdout)
    if "Did not find results" in cmp.stderr or not cmp.stdout.strip():
        print(cmp.stderr, file=sys.stderr)
        return 2
    ignore = re.compile(args.ignore) if args.ignore else None
    worse = [(mark, ratio, name) for mark, ratio, name in parse_compare(cmp.stdout) if mark in ("+", "!")]
    failing = [w for w in worse if not (ignore and ignore.search(w[2]))]
    for mark, ratio, name in worse:
        status = "REGRESSION" if (mark, ratio, name) in failing else "ignored"
        print(f"{status}: {name} ratio {ratio}{' (now failing)' if mark == '!' else ''}")
    print(f"{old[:8]} -> {new[:8]} on {machine}: {len(failing)} regression(s) beyond {args.factor}x")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
