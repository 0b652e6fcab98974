"""Figures written in forked children (analysis.forked): whole once the block ends, a write
that fails raises its OSError naming the file in the parent, other failures are notes, and
the children's warnings reach the parent."""

import errno
import os
import warnings
from pathlib import Path

import pytest

from analysis import forked
from analysis.atomic import write_together
from analysis.notes import NotDrawn

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here: figures are written in the caller")


def _writer(paths, text):
    return lambda: write_together(paths, lambda tmp, target: tmp.write_text(f"{text} {target.suffix}"))


def test_files_are_whole_once_the_block_ends_and_written_by_another_process(tmp_path):
    outs = []
    with forked.in_children(jobs=2):
        for i in range(5):
            paths = [tmp_path / f"f{i}.png", tmp_path / f"f{i}.pdf"]
            pid_file = tmp_path / f"pid{i}"
            outs.append(forked.write(paths, lambda p=paths, i=i, pf=pid_file: (
                pf.write_text(str(os.getpid())), _writer(p, f"figure {i}")())))
            assert outs[-1] == paths
    for i in range(5):
        assert (tmp_path / f"f{i}.png").read_text() == f"figure {i} .png"
        assert (tmp_path / f"f{i}.pdf").read_text() == f"figure {i} .pdf"
        assert int((tmp_path / f"pid{i}").read_text()) != os.getpid()
    assert not list(tmp_path.glob(".*tmp-*"))  # nothing half-written left beside


def test_outside_the_block_the_caller_writes(tmp_path):
    paths = [tmp_path / "a.png"]
    forked.write(paths, lambda: (tmp_path / "pid").write_text(str(os.getpid())) and _writer(paths, "a")())
    assert (tmp_path / "a.png").read_text() == "a .png"
    assert int((tmp_path / "pid").read_text()) == os.getpid()


def test_a_write_that_fails_raises_its_oserror_in_the_parent_after_every_child(tmp_path, monkeypatch):
    (tmp_path / "bad.png").write_text("the old figure")
    pids, fork = [], os.fork

    def recorded():
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(forked.os, "fork", recorded)

    def fails():
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "bad.png"))

    with pytest.raises(OSError) as exc:
        with forked.in_children(jobs=1):
            forked.write([tmp_path / "bad.png"], fails)
            forked.write([tmp_path / "good.png"], _writer([tmp_path / "good.png"], "good"))
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(tmp_path / "bad.png")
    assert (tmp_path / "bad.png").read_text() == "the old figure"
    assert (tmp_path / "good.png").read_text() == "good .png"  # the other child was still waited for
    assert len(pids) == 2
    for pid in pids:  # every child reaped: none left behind
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_another_failure_is_a_note_naming_the_figure_and_warnings_reach_the_parent(tmp_path):
    def warns():
        warnings.warn("tight layout not applied", UserWarning)
        warnings.warn("old API", DeprecationWarning)
        _writer([tmp_path / "w.png"], "w")()

    def breaks():
        raise ValueError("cannot draw this")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with forked.in_children(jobs=2):
            forked.write([tmp_path / "w.png"], warns)
            forked.write([tmp_path / "x.png"], breaks)
    got = [(w.category, str(w.message)) for w in caught]
    assert (UserWarning, "tight layout not applied") in got and (DeprecationWarning, "old API") in got
    notes = [w.message for w in caught if issubclass(w.category, NotDrawn)]
    assert len(notes) == 1 and str(tmp_path / "x.png") in str(notes[0])
    assert "ValueError: cannot draw this" in str(notes[0])
    assert (tmp_path / "w.png").read_text() == "w .png" and not (tmp_path / "x.png").exists()


def test_jobs_must_be_positive():
    with pytest.raises(ValueError, match="jobs"):
        with forked.in_children(jobs=0):
            pass


def test_a_figure_saved_by_the_report_style_is_a_real_png(tmp_path):
    """analysis.style.save inside the block: the child renders the parent's figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis import style

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 4, 9])
    with forked.in_children(jobs=1):
        paths = style.save(fig, tmp_path, "demo", "a caption", ("png",))
    assert paths == [tmp_path / "demo.png"]
    assert Path(paths[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
