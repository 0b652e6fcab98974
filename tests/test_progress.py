"""Progress that reads in a file and estimates from steady units (fraq._progress), in the runner
and the federated harness: no carriage return and no ANSI code outside a terminal, a line even
in a zero-column terminal, the time left not doubled by one slow first unit."""

from __future__ import annotations

import io

import pytest

from fraq import _progress
from fraq._progress import Progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(_progress.time, "perf_counter", c)
    return c


def plain(text: str) -> None:
    assert "\r" not in text and "\x1b[" not in text, repr(text[:300])


def test_a_file_gets_one_plain_line_per_finished_unit(clock):
    out = io.StringIO()
    bar = Progress(4, desc="federated", unit="rounds", stream=out, every_s=0)
    assert not bar.tty
    for i in range(4):
        bar.label(f"point {i}")
        clock.t += 3
        bar.update()
    bar.write("a log line")
    bar.close()
    text = out.getvalue()
    plain(text)
    lines = text.splitlines()
    assert len(lines) == 5 and lines[-1] == "a log line"
    assert lines[0].startswith("federated:  25% 1/4 rounds") and "point 0" in lines[0]
    assert "4/4 rounds" in lines[3]


def test_a_file_gets_at_most_a_line_every_n_seconds_and_the_last_always(clock):
    out = io.StringIO()
    bar = Progress(10, stream=out, every_s=10)
    for _ in range(10):
        clock.t += 1
        bar.update()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "10/10" in lines[-1]


def test_time_left_comes_from_the_steady_units_not_the_slow_first(clock):
    bar = Progress(100, stream=io.StringIO(), every_s=1e9)
    clock.t = 108.8  # the first round carries the loading
    bar.update()
    assert bar.left_s() is None and "? left" in bar.line()
    for _ in range(9):
        clock.t += 3.1
        bar.update()
    assert bar.left_s() == pytest.approx(90 * 3.1)
    assert "4:39 left" in bar.line()


def test_weighted_units_and_earlier_work(clock):
    bar = Progress(10, done=4, stream=io.StringIO())
    clock.t = 50
    bar.update(2)
    clock.t = 52
    bar.update(2)  # 2 s for 2 units of weight, 2 left
    assert bar.left_s() == pytest.approx(2.0)


@pytest.mark.parametrize("columns", [0, 1, 120])
def test_a_terminal_of_any_width_shows_the_line(clock, monkeypatch, columns):
    import os

    monkeypatch.setattr(_progress.shutil, "get_terminal_size", lambda fallback=None: os.terminal_size((columns, 0)))
    out = io.StringIO()
    bar = Progress(3, desc="federated", unit="rounds", stream=out, tty=True)
    clock.t = 1
    bar.update()
    bar.write("round 1 done")
    bar.close()
    text = out.getvalue()
    assert "\x1b[" not in text and "1/3 rounds" in text and "round 1 done\n" in text
    assert max(len(seg) for seg in text.replace("\n", "\r").split("\r")) <= max(columns, 80)


# --- the runner ------------------------------------------------------------------------------------

def test_the_runner_writes_plain_lines_into_a_file(tmp_path, monkeypatch, capsys):
    from benchmarks import run
    from benchmarks.experiments import get

    monkeypatch.setattr(get("table4"), "measure", lambda config, device: {"seconds": 1.0})
    assert run.main(["table4", "--size", "tiny", "--out", str(tmp_path / "res")]) == 0
    err = capsys.readouterr().err
    plain(err)
    n = len(get("table4").points("tiny"))
    assert f"{n}/{n} points" in err.splitlines()[-1]


def test_ctrl_c_in_the_runner_is_one_line(tmp_path, monkeypatch, capsys):
    from benchmarks import run
    from benchmarks.experiments import get

    calls = []

    def measure(config, device):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"seconds": 1.0}

    monkeypatch.setattr(get("table4"), "measure", measure)
    out = tmp_path / "res"
    assert run.main(["table4", "--size", "tiny", "--out", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("interrupted:") and str(out) in err and "Traceback" not in err
    assert len(list(out.glob("table4/*.json"))) == 1
