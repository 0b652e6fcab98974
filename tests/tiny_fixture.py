"""The recorded tiny run (``tests/data/tiny-results.tar.gz``): what the analysis and figure
tests draw, the same numbers on every machine.

A test of what the analysis draws must not depend on what this machine measured (a figure
laid out for one CPU's numbers can fail on another's), so those tests read a run recorded
once. ``make tiny-fixture`` (this module run as a script) measures the tiny run again and
rewrites the archive: do it when an experiment's points or result fields change.
``tests/test_tiny_fixture.py`` (integration tier) checks that the recording still has a
fresh run's files, configs and result fields.
"""

from __future__ import annotations

import io
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "tests" / "data" / "tiny-results.tar.gz"
EXPERIMENTS = ("table4", "table4_steps", "florist_steps", "pipeline", "fig4_cond", "flexlora_precision", "fig4_rank", "fig1",
               "trained", "fig3", "clients", "peft")
"""The experiments a tiny run measures (peft where peft and transformers import)."""


def unpack(dest: Path) -> Path:
    """The recording unpacked under ``dest``; returns ``dest/results``."""
    from fraq.internals import open_tar_gz

    with open_tar_gz(ARCHIVE) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith("results/") and ".." not in m.name:
                target = dest / m.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(m).read())
    return dest / "results"


def record() -> Path:
    """Measure the tiny run and write :data:`ARCHIVE` (beside, then renamed): members sorted,
    times zeroed, so only the numbers differ between two recordings."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import run

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results"
        run.run(out, EXPERIMENTS, size="tiny", progress=True)
        part = ARCHIVE.with_name(f".{ARCHIVE.name}.tmp")
        ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(part, "w:gz") as tar:
            for f in sorted(out.rglob("*.json")):
                data = f.read_bytes()
                info = tarfile.TarInfo(str(f.relative_to(out.parent)))
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
        part.replace(ARCHIVE)
    return ARCHIVE


if __name__ == "__main__":
    print(f"recorded {record()}")
