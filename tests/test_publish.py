"""``make bench-publish`` (:mod:`benchmarks.publish`): the dashboard is published beside
``html_dir`` and swapped in whole only when complete, into the same directory, so a running
``asv preview`` (which serves from ``html_dir`` as its working directory) keeps serving.
``asv publish`` itself is replaced by a stand-in here; tests/bench/test_dashboard.py runs
the real one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from benchmarks import publish

TEMPLATE = ('<html><head><script src="https://code.jquery.com/jquery-3.3.1.min.js" '
            'integrity="sha256-x" crossorigin="anonymous"></script></head></html>')


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def served(tmp_path, monkeypatch):
    """An old dashboard in ``html/`` with a server's working directory in it, as asv preview's."""
    html = tmp_path / "html"
    (html / "graphs").mkdir(parents=True)
    (html / "index.html").write_text("old")
    (html / "graphs" / "gone.json").write_text("{}")
    (tmp_path / "asv.conf.json").write_text("{}")
    (tmp_path / "results").mkdir()  # asv's default results_dir, with a recorded benchmark list
    (tmp_path / "results" / "benchmarks.json").write_text("{}")
    monkeypatch.chdir(html)
    return html


def test_nothing_recorded_is_one_line_naming_the_command_that_records(served, monkeypatch, capsys):
    (served.parent / "results" / "benchmarks.json").unlink()
    seen = _fake_asv(monkeypatch)
    before = _tree(served)
    assert publish.main(_argv(served)) == 2
    err = capsys.readouterr().err
    assert "nothing to publish" in err and "make bench-quick" in err and len(err.strip().splitlines()) == 1
    assert not seen and _tree(served) == before  # asv never ran; the old dashboard is as it was


def _fake_asv(monkeypatch, rc: int = 0, index: str = TEMPLATE):
    """``asv publish`` that writes a new dashboard into its ``--html-dir`` (also when it fails
    midway) and exits with ``rc``."""
    seen = []

    def run(cmd, **kw):
        out = Path(cmd[cmd.index("--html-dir") + 1])
        seen.append(out)
        (out / "graphs").mkdir(parents=True, exist_ok=True)
        (out / "graphs" / "a.json").write_text("{}")
        if rc == 0:
            (out / "index.html").write_text(index)
        return subprocess.CompletedProcess(cmd, rc)

    monkeypatch.setattr(publish.subprocess, "run", run)
    return seen


def _argv(html: Path) -> list[str]:
    return ["--config", str(html.parent / "asv.conf.json"), "--html-dir", str(html)]


def test_a_publish_replaces_the_dashboard_whole_in_the_served_directory(served, monkeypatch, capsys):
    inode = served.stat().st_ino
    seen = _fake_asv(monkeypatch)
    assert publish.main(_argv(served)) == 0
    assert seen[0].parent == served.parent and seen[0] != served  # published beside it
    files = _tree(served)
    assert "graphs/gone.json" not in files and "graphs/a.json" in files  # nothing of the old left
    assert 'src="vendor/jquery-3.3.1/jquery.min.js"' in files["index.html"] and "integrity" not in files["index.html"]
    assert "vendor/jquery-3.3.1/jquery.min.js" in files
    assert os.getcwd() == str(served) and served.stat().st_ino == inode  # the server's directory is the same
    assert sorted(p.name for p in served.parent.iterdir()) == ["asv.conf.json", "html", "results"]  # no fresh or trash left
    assert "local server" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["asv fails", "template unknown"])
def test_a_failed_publish_leaves_the_old_dashboard_as_it_was(served, monkeypatch, capsys, how):
    before = _tree(served)
    if how == "asv fails":
        _fake_asv(monkeypatch, rc=1)
    else:
        _fake_asv(monkeypatch, index='<script src="https://example.org/new.js"></script>')
    assert publish.main(_argv(served)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert ("status 1" in err) if how == "asv fails" else ("https://example.org/new.js" in err)
    assert _tree(served) == before and os.getcwd() == str(served)
    assert sorted(p.name for p in served.parent.iterdir()) == ["asv.conf.json", "html", "results"]


def test_swap_in_keeps_the_served_directory(served, tmp_path):
    new = tmp_path / "new"
    (new / "graphs").mkdir(parents=True)
    (new / "index.html").write_text("new")
    (new / "graphs" / "a.json").write_text("{}")
    inode = served.stat().st_ino
    publish.swap_in(str(new), str(served))
    assert os.getcwd() == str(served) and served.stat().st_ino == inode
    assert _tree(served) == {"graphs/a.json": "{}", "index.html": "new"} and not new.exists()
