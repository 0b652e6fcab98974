"""Every committed report regenerates byte for byte from its committed results.

A folder under docs/results that holds ``results.tar.gz`` is one run's results with the
report and figures the analysis drew from them. A change to the analysis that changes
what it writes must rebuild those reports in the same change (``python -m
analysis.reproduce --out DIR --no-pdf``, then ``rm -rf DIR/results``), so that a reader's
report is the one the code in the repository writes. The folder is copied and rebuilt
elsewhere; the only difference allowed is the folder's own path, which the report names.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p.parent for p in (ROOT / "docs" / "results").rglob("results.tar.gz"))


@pytest.mark.integration
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(ROOT / "docs" / "results")))
def test_the_report_regenerates_from_its_results(folder, tmp_path):
    from benchmarks.measure.children import child_env

    out = tmp_path / folder.name
    shutil.copytree(folder, out, ignore=shutil.ignore_patterns("results"))
    for f in out.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    subprocess.run([sys.executable, "-m", "analysis.reproduce", "--out", str(out), "--no-pdf"], cwd=ROOT,
                   env=child_env(), check=True, capture_output=True)
    rel = folder.relative_to(ROOT)
    written = (out / "report.md").read_text().replace(str(out), str(rel))
    assert written == (folder / "report.md").read_text(), f"{rel}/report.md: rebuild it (module docstring)"
