"""The steal share a result records reads at least ``STEAL_WINDOW_S`` of CPU time: results
written in quick succession do not each read a burst of a few jiffies alone."""

import pytest

from fraq import _machine


@pytest.fixture
def clock(monkeypatch, tmp_path):
    """A /proc/stat and a monotonic clock the test moves: ``advance(seconds, steal, busy)``
    adds jiffies (``steal`` stolen, ``busy`` other) and seconds."""
    stat = tmp_path / "stat"
    state = {"t": 1000.0, "steal": 0, "other": 0}

    def write():
        # user nice system idle iowait irq softirq steal guest guest_nice
        stat.write_text(f"cpu  {state['other']} 0 0 0 0 0 0 {state['steal']} 0 0\ncpu0 0 0 0 0 0 0 0 0\n")

    def advance(seconds, steal, other):
        state["t"] += seconds
        state["steal"] += steal
        state["other"] += other
        write()

    write()
    monkeypatch.setattr(_machine, "_PROC_STAT", str(stat))
    monkeypatch.setattr(_machine.time, "monotonic", lambda: state["t"])
    monkeypatch.setattr(_machine, "_times", [])
    _machine._snapshot()
    return advance


def test_calls_further_apart_than_the_window_read_since_the_previous_call(clock):
    clock(20.0, 40, 3960)
    assert _machine.steal_share() == pytest.approx(40 / 4000)
    clock(20.0, 0, 4000)
    assert _machine.steal_share() == 0.0  # the burst before the previous call is not read again


def test_a_burst_between_close_calls_is_read_over_the_window(clock):
    clock(30.0, 0, 6000)
    assert _machine.steal_share() == 0.0
    clock(0.5, 8, 92)  # 8 of 100 jiffies in half a second: 8% alone
    share = _machine.steal_share()
    # read back to the previous call at least 10 s before: 8 of 6100 jiffies, not 8 of 100
    assert share == pytest.approx(8 / 6100)
    assert share < 0.05


def test_within_the_first_window_the_span_starts_at_import(clock):
    clock(2.0, 4, 396)
    assert _machine.steal_share() == pytest.approx(4 / 400)
    clock(2.0, 0, 400)
    assert _machine.steal_share() == pytest.approx(4 / 800)  # both since import: less than 10 s lived


def test_unreadable_or_idle_stat_gives_none(clock, monkeypatch, tmp_path):
    clock(0.0, 0, 0)
    assert _machine.steal_share() is None  # no jiffy passed
    monkeypatch.setattr(_machine, "_PROC_STAT", str(tmp_path / "missing"))
    assert _machine.steal_share() is None
