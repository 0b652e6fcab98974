"""What the GPU calls have measured: per device kind and code fingerprint, each point and its seconds.

A lent GPU gives minutes, so a call should measure only what no earlier call on the same
kind of device measured with the same code. The ledger answers that, from two sources:

- the committed archives ``docs/results/gpu/<folder>/results.tar.gz`` (read through
  :func:`fraq.internals.open_tar_gz`): one entry per result file
  (``results/<experiment>/<key>.json``), its device kind the record's
  ``machine["gpu"]``, its fingerprint that of the record's ``git_sha`` (:func:`fingerprint_at`);
- the ledger files ``docs/results/gpu/ledger.json`` and ``docs/results/gpu/<folder>/ledger.json``
  (strict JSON, :func:`write`): a campaign (:mod:`benchmarks.gpu_check.campaign`) appends
  each point it tries to its ``DIR/ledger.json`` (:func:`append`: read, add, written whole
  beside and renamed), and its ``DIR`` is committed as a folder here.

**Fingerprint** (:func:`fingerprint`). Not the commit's sha: most commits touch docs, tests
or the GPU check's driver, none of which changes a number the points measure, and a sha
would send every point back to be measured after each of them. It is the SHA-256 of the
sorted ``path blob-id`` lines of every file under :data:`MEASURED`: ``fraq/`` (the code
timed), ``benchmarks/experiments/`` (what each point runs), ``benchmarks/measure/`` (how
it is timed: the paired rounds, the events, the warm-up) and ``benchmarks/sizes.py`` (each
point's configuration). The blob id is git's (SHA-1 of ``blob <len>\\0`` and the bytes), so
the same fingerprint comes from a working tree (a bare GPU image, no git) and from a commit
(``git ls-tree``: the committed archives, which record only their sha).

**A point's seconds** (:meth:`Ledger.seconds`). A result file the campaign writes
(:mod:`benchmarks.gpu_check.campaign`) records them (``seconds``, the sum of its ``steps``),
and so does its ledger entry. An older file records only when it was written
(``created``, to the second), not how long it took. In a call the points of one part run
one after another, so a point took the time from the previous file of its experiment
group in the same call to its own (:func:`_durations`); the first point of a part, whose
start is not recorded, has none. Nor does a gap over :data:`MAX_POINT_S` (two calls'
points in one archive). ``prepare_points`` times a group's methods before its first
point, so that point carries the group's time and the others seconds: the sum is right,
which is what a plan adds up.

**A point tried and not measured.** The campaign records a point that ran past its
watchdog (``timed out``), took its process down (``crashed``) or raised (``failed``) with
its seconds and :data:`STATES`' state: it is not tried again with the same code on the
same device kind (:meth:`Ledger.measured`), since the same code would spend the same
minutes on it; its seconds are a lower bound, never a cost (:meth:`Ledger.seconds`).

**A point's cost** (:meth:`Ledger.cost`): the newest measured seconds of that point, with
the same recorded config, on that device kind (any fingerprint: a new fingerprint changes
what is measured, rarely by much how long it takes), else its estimate (:func:`benchmarks.experiments.cost`, seconds
on one CPU core) times :meth:`Ledger.factor`: on that device kind, the measured seconds
over the estimates of their recorded configs of the points that have both, summed per experiment where the
experiment has such points, else over all of the kind's (a ratio of sums, so a few long
points set it, as they set a call's time).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

__all__ = ["GPU_RESULTS", "LEDGER", "MAX_POINT_S", "MEASURED", "STATES", "Entry", "Ledger", "append", "fingerprint",
           "fingerprint_at", "from_archives", "load", "read", "same_config", "write"]

ROOT = Path(__file__).resolve().parents[2]
GPU_RESULTS = ROOT / "docs" / "results" / "gpu"
LEDGER = GPU_RESULTS / "ledger.json"

MEASURED = ("fraq", "benchmarks/experiments", "benchmarks/measure", "benchmarks/sizes.py")
"""The paths whose files a point's numbers depend on (the fingerprint's)."""

RESOLUTION_S = 1.0
"""``created``'s resolution: a gap of 0 s is a point under a second, counted as half of one."""

MAX_POINT_S = 420.0
"""The longest gap between two files of a call read as one point's time: a call's whole
budget (``make gpu-check``); a longer gap is two calls' points kept in one archive."""


STATES = ("measured", "timed out", "crashed", "failed")
"""An entry's ``state``: its result written, or how a campaign's try of it ended."""


@dataclass(frozen=True)
class Entry:
    """One measured point: on ``device_kind`` (``torch.cuda.get_device_name``) with the code
    of ``fingerprint``, written at ``created`` (ISO, seconds), taking ``seconds`` (None where
    not known); ``source`` names the archive or call it came from, ``config`` is the point's
    configuration as its result file records it (None for a check that is not a point);
    ``state`` one of :data:`STATES`, ``detail`` what ended a try that did not measure it."""

    device_kind: str
    fingerprint: str
    experiment: str
    key: str
    created: str
    seconds: float | None = None
    source: str = ""
    config: dict | None = None
    state: str = "measured"
    detail: str = ""


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()[:16]


def fingerprint(root: Path = ROOT) -> str:
    """The fingerprint of the working tree at ``root`` (see the module's docstring)."""
    lines = []
    for top in MEASURED:
        path = root / top
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            rel = f.relative_to(root)
            if "__pycache__" in rel.parts or any(part.startswith(".") for part in rel.parts):
                continue
            lines.append(f"{rel.as_posix()} {_blob_id(f.read_bytes())}\n")
    return _digest(lines)


_AT: dict[str, str | None] = {}


def fingerprint_at(commit: str, root: Path = ROOT) -> str | None:
    """The fingerprint of ``commit``'s tree, from ``git ls-tree``; None where git or the
    commit is not there."""
    if commit not in _AT:
        try:
            out = subprocess.run(["git", "-C", str(root), "ls-tree", "-r", commit, "--", *MEASURED],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            out = None
        if out is None or out.returncode != 0 or not out.stdout.strip():
            _AT[commit] = None
        else:
            rows = [line.split(None, 3) for line in out.stdout.splitlines()]
            _AT[commit] = _digest([f"{path} {blob}\n" for _, kind, blob, path in rows if kind == "blob"])
    return _AT[commit]


def _group(experiment: str) -> str:
    """The GPU-check part an experiment runs in (its points run one after another)."""
    from benchmarks.gpu_check import PARTS

    return next((p.name for p in PARTS if experiment in p.experiments), experiment)


def _durations(records: list[dict]) -> list[float | None]:
    """Each record's seconds: its ``created`` less the previous one's of its part, in the
    same call (same ``git_sha``), where that gap is at most :data:`MAX_POINT_S`."""
    order = sorted(range(len(records)), key=lambda i: records[i]["created"])
    last: dict[tuple, datetime] = {}
    out: list[float | None] = [None] * len(records)
    for i in order:
        r = records[i]
        group = (r.get("git_sha"), _group(r["experiment"]))
        t = datetime.fromisoformat(r["created"])
        if group in last and 0 <= (t - last[group]).total_seconds() <= MAX_POINT_S:
            out[i] = max(RESOLUTION_S / 2, (t - last[group]).total_seconds())
        last[group] = t
    return out


def from_archives(folder: Path = GPU_RESULTS) -> list[Entry]:
    """An entry per result file of every ``results.tar.gz`` under ``folder`` measured on a
    CUDA device whose record names its kind."""
    from fraq.internals import open_tar_gz

    entries = []
    for pack in sorted(folder.glob("*/results.tar.gz")):
        records = []
        with open_tar_gz(pack) as tar:
            for m in tar.getmembers():
                parts = Path(m.name).parts
                if m.isfile() and len(parts) == 3 and parts[0] == "results" and m.name.endswith(".json"):
                    r = json.loads(tar.extractfile(m).read())
                    kind = (r.get("machine") or {}).get("gpu")
                    if str(r.get("device", "")).startswith("cuda") and kind and r.get("created"):
                        records.append(dict(r, device_kind=kind))
        for r, gap in zip(records, _durations(records)):
            own = r.get("seconds")
            seconds = float(own) if isinstance(own, (int, float)) and not isinstance(own, bool) else gap
            fp = fingerprint_at(r["git_sha"]) if r.get("git_sha") else None
            entries.append(Entry(r["device_kind"], fp or f"git:{r.get('git_sha')}", r["experiment"], r["key"],
                                 r["created"], seconds, source=pack.parent.name, config=r.get("config")))
    return entries


def read(path: Path = LEDGER) -> list[Entry]:
    """The entries of a ledger file (none where it is absent); ValueError naming a file that
    is not one."""
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
        entries = [Entry(**e) for e in data["entries"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"ledger(={str(path)!r}) is not a ledger file: {exc}") from None
    odd = next((e for e in entries if e.state not in STATES), None)
    if odd is not None:
        raise ValueError(f"ledger(={str(path)!r}) is not a ledger file: state(={odd.state!r}) of "
                         f"{odd.experiment}/{odd.key} is not one of {', '.join(STATES)}")
    return entries


def write(path: Path, entries: list[Entry]) -> None:
    """``entries`` as strict JSON at ``path``, written beside it and renamed into place."""
    text = json.dumps(dict(entries=[asdict(e) for e in entries]), indent=1, allow_nan=False) + "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append(path: Path, new: list[Entry]) -> None:
    """``new`` added to the ledger file at ``path`` (a point measured again replaces its
    entry of the same device kind and fingerprint)."""
    ids = {(e.device_kind, e.fingerprint, e.experiment, e.key) for e in new}
    kept = [e for e in read(path) if (e.device_kind, e.fingerprint, e.experiment, e.key) not in ids]
    write(path, kept + list(new))


class Ledger:
    """The entries of the archives and the ledger file, asked by device kind and fingerprint."""

    def __init__(self, entries: list[Entry]):
        self.entries = tuple(sorted(entries, key=lambda e: e.created))

    def newest_kind(self) -> str | None:
        """The device kind of the newest entry (None in an empty ledger)."""
        return self.entries[-1].device_kind if self.entries else None

    def measured(self, kind: str | None, fp: str) -> set[tuple[str, str]]:
        """The ``(experiment, key)`` points measured with ``fp`` on ``kind`` (None: any kind),
        and those tried there that did not finish (any state of :data:`STATES`)."""
        return {(e.experiment, e.key) for e in self.entries
                if e.fingerprint == fp and (kind is None or e.device_kind == kind)}

    def seconds(self, kind: str, experiment: str, key: str, config: dict | None = None) -> float | None:
        """The newest measured seconds of the point on ``kind``, any fingerprint, from an entry
        whose recorded config is ``config`` (any where None): a point whose config changed
        since (a row moved to a point of its own) is another measurement."""
        known = [e.seconds for e in self.entries
                 if e.device_kind == kind and e.experiment == experiment and e.key == key and e.seconds is not None
                 and e.state == "measured" and (config is None or same_config(e.config, config))]
        return known[-1] if known else None

    def factor(self, kind: str, experiment: str, estimate) -> float:
        """Measured seconds over estimated ones on ``kind`` (``estimate(experiment, config)``:
        a point's estimate on one CPU core), for ``experiment`` where it has points with
        both, else for all of the kind's; 1 where none have."""
        def ratio(entries) -> float | None:
            pairs = [(e.seconds, _safe(estimate, e)) for e in entries
                     if e.seconds is not None and e.config and e.state == "measured"]
            pairs = [(s, c) for s, c in pairs if c]
            return sum(s for s, _ in pairs) / sum(c for _, c in pairs) if pairs else None

        mine = [e for e in self.entries if e.device_kind == kind]
        own = ratio([e for e in mine if e.experiment == experiment])
        return own if own is not None else (ratio(mine) or 1.0)

    def cost(self, kind: str, experiment: str, key: str, config: dict, estimate) -> tuple[float, str]:
        """The point's expected seconds on ``kind`` and where they come from (``measured``
        or ``estimated``); ``estimate`` as for :meth:`factor`."""
        s = self.seconds(kind, experiment, key, config)
        if s is not None:
            return s, "measured"
        return estimate(experiment, config) * self.factor(kind, experiment, estimate), "estimated"


def _safe(estimate, entry: Entry) -> float | None:
    """``estimate`` of an entry's recorded config; None where today's code cannot read it."""
    try:
        return float(estimate(entry.experiment, entry.config))
    except Exception:  # noqa: BLE001 - an old point's config may lack a field today's cost reads
        return None


def same_config(recorded: dict | None, config: dict) -> bool:
    """Whether a result file's ``recorded`` config is ``config`` (its size aside)."""
    def norm(c: dict) -> str:
        return json.dumps({k: v for k, v in c.items() if k != "size"}, sort_keys=True, default=str, allow_nan=False)

    return recorded is not None and norm(recorded) == norm(json.loads(json.dumps(config, default=str,
                                                                                   allow_nan=False)))


def load(folder: Path = GPU_RESULTS, path: Path | None = None) -> Ledger:
    """The ledger of the archives under ``folder``, the ledger file ``path`` (default
    ``folder/ledger.json``) and the ledger files of the campaigns committed in ``folder``'s
    subfolders (``folder/*/ledger.json``: they alone hold the points a campaign tried and did
    not measure). A point in both an archive and a ledger file is one point twice: every
    question :class:`Ledger` answers reads it the same."""
    files = [path if path is not None else folder / "ledger.json", *sorted(folder.glob("*/ledger.json"))]
    return Ledger(from_archives(folder) + [e for f in files for e in read(f)])
