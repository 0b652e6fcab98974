"""``python -m benchmarks.tall_products``: its command runs and reports each case (no timing is asserted)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import tall_products


def test_quick_run_reports_the_case_and_restores_the_threads(capsys):
    before = torch.get_num_threads()
    tall_products.main(["--quick", "--blocks", "1"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("column-major / row-major") and len(out) == 1 + len(tall_products.QUICK)
    assert out[1].startswith("float32 2 x (64 x 8) @ (8 x 2)") and " ratio " in out[1]
    assert torch.get_num_threads() == before


def test_operands_are_held_as_the_methods_hold_them():
    M, N = tall_products.operands(torch.float64, 40, 6, 3)
    assert M.shape == (2, 40, 6) and M.mT.is_contiguous() and N.shape == (2, 6, 3) and N.is_contiguous()


@pytest.mark.parametrize("argv,match", [(["--blocks", "0"], "at least 1"), (["--threads", "0"], "at least 1")])
def test_bad_options_are_refused_with_their_value(argv, match, capsys):
    with pytest.raises(SystemExit):
        tall_products.main(argv)
    assert match in capsys.readouterr().err
