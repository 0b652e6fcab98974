"""``python -m benchmarks.thread_scaling``: its command runs and reports each case (no timing is asserted)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import thread_scaling


def test_quick_run_reports_every_call_and_restores_the_threads(capsys):
    before = torch.get_num_threads()
    thread_scaling.main(["--quick", "--blocks", "1", "--calls", "recompress,stack,probe", "--team-work", "0"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("2 threads / 1 thread") and "at TEAM_WORK 0 (other)" in out[0]
    assert all(" other " in line for line in out[1:])
    assert [line.split()[0] for line in out[1:]] == ["recompress", "stack", "probe"]
    assert all(" ratio " in line for line in out[1:])
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("argv,match", [(["--calls", "svd"], "--calls"), (["--threads", "1"], "at least 2"),
                                        (["--blocks", "0"], "at least 1")])
def test_bad_options_are_refused_with_their_value(argv, match, capsys):
    with pytest.raises(SystemExit):
        thread_scaling.main(argv)
    assert match in capsys.readouterr().err
