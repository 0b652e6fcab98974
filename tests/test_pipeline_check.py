"""benchmarks.pipeline_check on the CPU: every method timed in interleaved rounds, described,
an unknown option named and skipped, the file whole."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_one_layer_of_roberta_on_the_cpu(tmp_path, capsys):
    from benchmarks.pipeline_check import main

    assert main(["--out", str(tmp_path), "--device", "cpu", "--presets", "roberta-base", "--layers", "1",
                 "--rounds", "2", "--methods", "fraq:tau=0.95|flora|fraq:no_such_option=1"]) == 0
    rec = json.loads((tmp_path / "pipeline.json").read_text())["presets"][0]
    assert set(rec["rows"]) == {"fraq:tau=0.95", "flora"} and "fraq:no_such_option=1" in rec["skipped"]
    for row in rec["rows"].values():
        assert len(row["samples"]) == 2 and row["median_s"] > 0 and row["syncs"] is None
        top = row["top_kernels"]["rows"]
        assert 0 < len(top) <= 10 and all(t["name"].startswith("aten::") and t["calls"] >= 1 for t in top)
        assert [t["seconds"] for t in top] == sorted((t["seconds"] for t in top), reverse=True)
        assert sum(t["seconds"] for t in top) <= row["wall_s"]  # self times of one call: within its wall time
    assert any("eigh" in t["name"] for t in rec["rows"]["fraq:tau=0.95"]["top_kernels"]["rows"])
    assert "| fraq:tau=0.95 |" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["pipeline.json"]
