"""Every code block of README.md and docs/*.md runs as written (numpy's doc tests, for
markdown).

python blocks run in the default test run, each in a fresh interpreter from the
repository root. bash blocks run in ``make test-slow`` (``bash -e``, from the root, with
``.venv/bin`` first on PATH). A block preceded by ``<!-- docs-test: skip (reason) -->``
is not run; the reason is required, and only a shell block may be skipped: a python
block must run. Blocks in any other language (text, toml, json) are not code to run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*(\((?P<reason>[^)]*)\))?\s*-->\s*$")
RUN = ("python", "bash", "sh", "shell", "console")


def blocks():
    """(page, line, language, code, skip marker or None) for every fenced block."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = SKIP.search(before)
            out.append((page.relative_to(ROOT).as_posix(), line, m.group(1).lower(), m.group(2), skip))
    return out


BLOCKS = blocks()


def _ids(kind):
    return [pytest.param(code, id=f"{page}:{line}") for page, line, lang, code, skip in BLOCKS
            if lang in kind and skip is None]


def test_every_block_is_run_or_skipped_with_a_reason():
    assert BLOCKS, "no code blocks found"
    for page, line, lang, _, skip in BLOCKS:
        if skip is not None:
            assert (skip.group("reason") or "").strip(), f"{page}:{line}: a docs-test skip needs a reason"
            assert lang != "python", f"{page}:{line}: python blocks must run, not be skipped"
        assert lang in (*RUN, "text", "toml", "json", "ini", "yaml", ""), f"{page}:{line}: language {lang!r}"
        assert lang != "", f"{page}:{line}: a code block names its language (text for output)"


def test_readme_is_a_doorway():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), link


def test_every_readme_command_has_a_row_in_the_one_table_of_times():
    """How long each command takes is kept in one dated table (docs/performance.md, "Command
    times"); every ``make`` target of the README's table has a row there, measured or marked
    as not yet measured on an idle machine."""
    commands = (ROOT / "README.md").read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]
    targets = set(re.findall(r"`make ([\w-]+)", commands))
    page = (ROOT / "docs" / "performance.md").read_text()
    table = page.split("## Command times", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows[0] == "| command | measured wall time | machine | load | date |"
    have = {t for line in rows for t in re.findall(r"`make ([\w-]+)", line.split(" | ")[0])}
    assert targets and not targets - have, sorted(targets - have)
    assert not re.search(r"\b\d{4} tests\b", page + (ROOT / "README.md").read_text())  # counted, not typed


@pytest.mark.integration
@pytest.mark.parametrize("code", _ids(("python",)))
def test_python_block_runs(code):
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("code", _ids(("bash", "sh", "shell", "console")))
def test_shell_block_runs(code):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-e", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
