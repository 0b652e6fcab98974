"""The GPU check's driver: every part in its own process, each inside its share of the budget.

Part i must end by ``start + (budget - RESERVE) x (shares of parts 0..i)``: a part that
ends early leaves its time to the next, one that overruns is stopped there, and the
parts after it keep their own shares. After every part the files in ``DIR`` are
rewritten whole (beside, then renamed): the packed results, the summary, the log, the
device record and the tests' report. A ``DIR`` that holds an earlier call's results keeps
them: this call's points are added, and a point measured again replaces its own file (on a
lent GPU, an earlier call is minutes of device time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from benchmarks.gpu_check import CUDA_TESTS, Part
from benchmarks.gpu_check.child import NOT_HERE
from benchmarks.measure.children import child_env, die_with_parent

__all__ = ["RESERVE_S", "check", "deadlines"]

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: every part runs there (pytest reads its configuration there)."""

WORK_PREFIX = "fraq-gpu-check-"
"""The work folder's name in the temporary directory, before its pid
(:func:`fraq._leftovers.own_folder`): a folder a killed call left is removed by the next."""

RESERVE_S = 5.0
"""Seconds of the budget kept for the last packing and the summary (at most a tenth of it)."""


def deadlines(parts: list[Part], start: float, budget_s: float) -> list[float]:
    """Each part's end, ``time.time()`` instants: its share of the budget less the reserve
    (the chosen parts' shares scaled to add up to 1), at least its ``min_s``, added up in
    order and never past the budget."""
    usable = budget_s - min(RESERVE_S, budget_s / 10)
    total = sum(p.share for p in parts)
    out, acc = [], 0.0
    for p in parts:
        acc += max(p.min_s, usable * p.share / total)
        out.append(start + min(acc, usable))
    return out


def _env(device: torch.device) -> dict:
    return child_env(PYTHONUNBUFFERED="1", FRAQ_BENCH_DEVICE=str(device))


def _command(part: Part, *, device: torch.device, size: str, work: Path, until: float) -> list[str]:
    if part.name == "tests":
        return [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                f"--junitxml={work / 'tests.xml'}", *CUDA_TESTS]
    if part.name == "asv-quick":
        return [sys.executable, "-m", "benchmarks.suite_once", "--out", str(work / "asv_quick.json"), "--device",
                str(device), "--size", QUICK_SIZE]
    if part.name == "pytest-benchmark-quick":
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--benchmark-only",
                f"--benchmark-json={work / 'pytest_benchmark.json'}", "tests/bench/test_quick.py"]
    return [sys.executable, "-m", "benchmarks.gpu_check", "--part", part.name, "--device", str(device),
            "--size", size, "--work", str(work), "--until", repr(until)]


QUICK_SIZE = "tiny"
"""The size of the two suites' quick parts: they check that each suite runs on the device and
what it tracks there (peak memory), not the paper's numbers (the other parts' sizes)."""


def _suite_status(part: Part, work: Path, returncode: int | None) -> dict:
    """A suite part's status from its JSON: ``asv_quick.json``'s records, or pytest-benchmark's
    ``--benchmark-json`` (its benchmarks, each one a check that ran; pytest's exit status
    says whether any failed)."""
    if returncode is None:
        return dict(state="cut", detail="stopped at the end of its time")
    name = "asv_quick.json" if part.name == "asv-quick" else "pytest_benchmark.json"
    try:
        doc = json.loads((work / name).read_text())
    except (OSError, ValueError):
        return dict(state="failed", measured=0, detail=f"the part's process exited {returncode} without {name}")
    if part.name == "asv-quick":
        states = [b["state"] for b in doc["benchmarks"]]
        n = {s: states.count(s) for s in ("measured", "skipped", "failed")}
        detail = f"{n['measured']} measured, {n['skipped']} skipped, {n['failed']} failed"
        state = "failed" if returncode != 0 or n["failed"] else \
            (NOT_HERE if n["skipped"] and not n["measured"] else "done")
        return dict(state=state, measured=n["measured"], points=len(states), detail=detail)
    ran = len(doc.get("benchmarks", []))
    state = "failed" if returncode not in (0, 5) else (NOT_HERE if not ran else "done")  # 5: every check skipped
    return dict(state=state, measured=ran, points=ran,
                detail=f"{ran} checks timed; pytest exited {returncode}")


def _tests_status(work: Path, returncode: int) -> dict:
    """The pytest part's status from its JUnit report."""
    try:
        suite = ET.parse(work / "tests.xml").getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    except (OSError, ET.ParseError, AttributeError):
        return dict(state="failed", detail=f"pytest exited {returncode} without a report")
    ran = n["tests"] - n["skipped"]
    bad = n["failures"] + n["errors"]
    state = "failed" if bad else (NOT_HERE if n["tests"] and not ran else "done")
    if not n["tests"]:
        state = "failed"
    return dict(state=state, measured=ran - bad, points=n["tests"], failed=[{"point": "pytest",
                "error": f"{n['failures']} failed, {n['errors']} errors"}] if bad else [],
                detail=f"{n['tests']} tests: {ran - bad} passed, {bad} failed or errors, {n['skipped']} skipped")


def _status(part: Part, work: Path, returncode: int | None, seconds: float, share_s: float) -> dict:
    """What a finished or stopped part did (``returncode`` None: stopped at the end of its time)."""
    if part.name == "tests":
        st = _tests_status(work, returncode) if returncode is not None else \
            dict(state="cut", detail="stopped at the end of its time")
    elif part.name in ("asv-quick", "pytest-benchmark-quick"):
        st = _suite_status(part, work, returncode)
    else:
        try:
            st = json.loads((work / "status" / f"{part.name}.json").read_text())
        except (OSError, ValueError):
            st = dict(state="failed", measured=0)
        if returncode is None:
            st.update(state="cut", detail="stopped at the end of its time, inside a point (not written)")
        elif returncode != 0 or st.get("state") == "running":
            st.update(state="failed", detail=f"the part's process exited {returncode} (see the log)")
    return dict(st, part=part.name, seconds=seconds, share_s=share_s)


def _result_member(m: tarfile.TarInfo) -> bool:
    """Whether ``m`` is a result file the check writes: ``results/<experiment>/<key>.json``."""
    parts = Path(m.name).parts
    return m.isfile() and len(parts) == 3 and parts[0] == "results" and ".." not in parts and m.name.endswith(".json")


def _keep(out: Path, work: Path) -> tuple[int, list]:
    """The result files of an earlier call's ``out/results.tar.gz`` copied into ``work``, so
    this call adds to them (a point measured again replaces its own file) instead of
    replacing the archive with its own points alone; returns how many were kept, and the
    archive's other members (a README, notes, the folders ``tar czf`` records) as
    ``(TarInfo, bytes or None)``, which :func:`_pack` puts back as they were (never
    unpacked here: a link or an odd name is carried, not followed). The archive is read
    whole first (:func:`fraq.internals.open_tar_gz`), so a damaged one is refused
    (ArchiveError, a ValueError naming it) before anything is copied or repacked over it."""
    from fraq.internals import open_tar_gz

    pack = out / "results.tar.gz"
    if not pack.is_file():
        return 0, []
    kept, others = 0, []
    with open_tar_gz(pack) as tar:
        for m in tar.getmembers():
            if _result_member(m):
                target = work / m.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(m).read())
                kept += 1
            else:
                others.append((m, tar.extractfile(m).read() if m.isfile() else None))
    return kept, others


def _replaced(target: Path, write) -> None:
    """``write(tmp)`` to ``.NAME.tmp`` beside ``target``, renamed over it; a write that fails
    (a full disk) removes the temporary file and raises."""
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _pack(work: Path, out: Path, others: list = ()) -> None:
    """``work/results`` as ``out/results.tar.gz`` (``results/<experiment>/<key>.json``), then
    the earlier archive's ``others`` (:func:`_keep`) whose names this call did not write,
    renamed into place."""
    import io

    def write(tmp: Path) -> None:
        with tarfile.open(tmp, "w:gz") as tar:
            written = set()
            for f in sorted((work / "results").rglob("*.json")):
                written.add(str(f.relative_to(work)))
                tar.add(f, arcname=str(f.relative_to(work)))
            for info, data in others:
                if info.name not in written:
                    tar.addfile(info, None if data is None else io.BytesIO(data))

    _replaced(out / "results.tar.gz", write)


def _publish(work: Path, out: Path, statuses: list[dict], meta: dict, others: list = ()) -> str:
    """Every file of ``out`` rewritten whole from ``work`` (``others``: :func:`_pack`'s);
    returns the summary's text."""
    from benchmarks.gpu_check.summary import summary

    _pack(work, out, others)
    for name in ("gpu_check.log", "device.json", "tests.xml", "asv_quick.json",
                 "pytest_benchmark.json"):
        if (work / name).exists():
            _replaced(out / name, lambda tmp, name=name: shutil.copyfile(work / name, tmp))
    text = summary(work, statuses, meta)
    _replaced(out / "summary.md", lambda tmp: tmp.write_text(text))
    return text


def _terminate_as_exit() -> None:
    """SIGTERM raises SystemExit here (as Ctrl-C raises KeyboardInterrupt), so the work folder
    is removed on the way out; the running part dies with this process
    (:func:`benchmarks.measure.children.die_with_parent`). Outside the main thread the
    default stays."""
    import signal

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:
        pass


def check(out: Path, parts: list[Part], *, device: torch.device, size: str, budget_s: float) -> int:
    """Run ``parts`` on ``device`` at ``size`` within ``budget_s`` seconds, writing ``out``;
    prints a line per part, then the summary. Returns 0, or 1 when a part failed."""
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    from fraq.internals import own_folder, remove_dead

    for gone in remove_dead(WORK_PREFIX):
        print(f"removed {gone}: the work folder of a GPU check that was killed", flush=True)
    work = own_folder(WORK_PREFIX)
    _terminate_as_exit()
    statuses: list[dict] = []
    meta = dict(device=str(device), size=size, budget_s=budget_s, start=start)
    try:
        meta["kept"], others = _keep(out, work)
        if (out / "gpu_check.log").is_file():  # the earlier calls' log goes on
            shutil.copyfile(out / "gpu_check.log", work / "gpu_check.log")
        log = (work / "gpu_check.log").open("a")
        ends = deadlines(parts, start, budget_s)
        for part, until in zip(parts, ends):
            t0 = time.time()
            share_s = max(0.0, until - t0)  # its share and what the parts before it left
            if until - t0 < 1:
                st = dict(state="cut", detail="no time left when its turn came", part=part.name, seconds=0.0,
                          share_s=share_s)
            else:
                log.write(f"\n== {part.name}: until +{until - start:.0f} s of {budget_s:g} s ==\n")
                log.flush()
                try:
                    rc = subprocess.run(_command(part, device=device, size=size, work=work, until=until), cwd=ROOT,
                                        env=_env(device), stdout=log, stderr=subprocess.STDOUT,
                                        timeout=max(1.0, until - t0), preexec_fn=die_with_parent()).returncode
                except subprocess.TimeoutExpired:
                    rc = None
                st = _status(part, work, rc, time.time() - t0, share_s)
            statuses.append(st)
            line = f"{part.name:<13} {st['state']:<18} {time.time() - t0:6.1f} s of {share_s:5.1f} s allowed"
            print(line + (f"  {st['detail']}" if st.get("detail") else ""), flush=True)
            log.write(line + "\n")
            log.flush()
            meta["elapsed_s"] = time.time() - start
            _publish(work, out, statuses, meta, others)
        log.close()
        meta["elapsed_s"] = time.time() - start
        text = _publish(work, out, statuses, meta, others)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(text, flush=True)
    return 1 if any(s["state"] == "failed" for s in statuses) else 0


def run_child(name: str, *, device: str, size: str, work: Path, until: float) -> int:
    """The ``--part`` side: the part's experiments (:func:`benchmarks.gpu_check.child.run_part`)."""
    from benchmarks.gpu_check import PARTS
    from benchmarks.gpu_check.child import run_part

    part = {p.name: p for p in PARTS}[name]
    margin = min(5.0, 0.1 * max(0.0, until - time.time()))
    return run_part(name, part.experiments, device=torch.device(device), size=size, work=work, until=until - margin)
