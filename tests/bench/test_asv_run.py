"""asv itself runs one benchmark of every suite file (``asv run --quick`` at the tiny size):
a benchmark's ``setup`` or ``setup_cache`` that fails where asv runs it (its own working
directory, its own processes) is caught here, not by the first user of ``make bench``.
Integration tier: about a minute of asv's processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.suite_once import ONE_OF_EACH

pytest.importorskip("asv")
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_every_suite_file_is_covered():
    assert set(ONE_OF_EACH) == {p.stem for p in (ROOT / "benchmarks").glob("bench_*.py")}


def test_asv_runs_one_benchmark_of_each_suite_file(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), FRAQ_ASV_SIZE="tiny", FRAQ_KERNEL_TABLE=str(tmp_path / "k.json"))
    asv = [sys.executable, "-m", "asv"]
    subprocess.run(asv + ["machine", "--yes"], cwd=ROOT, env=env, check=True, capture_output=True)
    regex = "|".join(re.escape(b) for b in ONE_OF_EACH.values())
    done = subprocess.run(asv + ["run", "--quick", "--dry-run", "--show-stderr", f"--python={sys.executable}",
                                 "--bench", regex], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Traceback" not in out and not re.search(r"\sfailed\s*$", out, re.M), out[-3000:]
    for bench in ONE_OF_EACH.values():
        assert re.search(rf"{re.escape(bench)}\s+ok\s*$", out, re.M), (bench, out[-3000:])
