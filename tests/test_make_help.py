"""``make help``, the Makefile's first target: every target, what it writes, and its current
time from docs/performance.md's "Command times" (read there, written nowhere else)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def _help(*args: str) -> str:
    return subprocess.run(["make", "-s", *args], cwd=ROOT, capture_output=True, text=True, check=True,
                          timeout=60).stdout


def test_a_bare_make_prints_the_help_naming_every_target():
    out = _help()
    assert out == _help("help")
    makefile = (ROOT / "Makefile").read_text()
    names = re.findall(r"^([A-Za-z][\w-]*):(?![=:])", makefile, re.M)
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert names and names[0] == "help" and list(lines) == names
    assert all(re.search(r"\S\s{2,}\S.*; ", line) for line in lines.values()), out  # what it writes; its time


def test_the_help_times_are_the_current_rows_of_the_command_times():
    page = (ROOT / "docs" / "performance.md").read_text()
    section = page.split("## Command times", 1)[1].split("\n## ", 1)[0]
    current, history = section.split("### History", 1)
    lines = {line.split()[0]: line for line in _help("help").splitlines()[1:]}
    checked = 0
    for row in current.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if not row.startswith("| `make"):
            continue
        names = re.findall(r"`make ([\w-]+)", cells[0])
        walls = re.sub(r"\*\*", "", cells[1]).split(" (")[0].split(" / ")
        for name, wall in zip(names, walls if len(walls) == len(names) else walls * len(names)):
            assert lines[name].endswith(f"; {wall} ({cells[4]})" if cells[4] else f"; {wall}"), (name, lines[name])
            checked += 1
    assert checked >= 20
    # one current row per command: a command named in two current rows would have two times
    commands = [r.split("|")[1].strip() for r in current.splitlines() if r.startswith("| ") and "command" not in r]
    assert len(commands) == len(set(commands)) and not any(c.startswith("same") for c in commands)
    assert not any(r.startswith("| same") for r in history.splitlines())  # each history row names its command
