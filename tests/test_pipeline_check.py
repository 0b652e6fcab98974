"""benchmarks.pipeline_check on the CPU: the pipeline experiment's points of the asked presets and
methods, every method timed in the same paired rounds and described, each result file whole in
the runner's format; a name it does not know stops it before any work."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_one_layer_of_roberta_on_the_cpu(tmp_path, capsys):
    from benchmarks.pipeline_check import main

    assert main(["--out", str(tmp_path), "--device", "cpu", "--size", "tiny", "--presets", "roberta-base",
                 "--layers", "1", "--rounds", "2", "--methods", "stepwise,flora"]) == 0
    files = sorted((tmp_path / "results" / "pipeline").glob("*.json"))
    assert [f.name for f in files] == ["roberta-base-flora.json", "roberta-base-stepwise.json"]
    recs = {json.loads(f.read_text())["config"]["row"]: json.loads(f.read_text()) for f in files}
    groups = {rec["result"]["timing"]["group"] for rec in recs.values()}
    assert len(groups) == 1  # the two methods in the same paired rounds
    for rec in recs.values():
        r = rec["result"]
        assert rec["config"]["size"] == "tiny" and rec["config"]["layers"] == 1 and rec["device"] == "cpu"
        assert len(r["timing"]["samples"]) == 2 and r["timing"]["median"] > 0 and r["syncs"] is None
        top = r["top_kernels"]["rows"]
        assert 0 < len(top) <= 10 and all(t["name"].startswith("aten::") and t["calls"] >= 1 for t in top)
        assert [t["seconds"] for t in top] == sorted((t["seconds"] for t in top), reverse=True)
        assert sum(t["seconds"] for t in top) <= r["wall_s"]  # self times of one call: within its wall time
        assert len(r["ranks"]) == r["modules"] == 3
    assert any("eigh" in t["name"] for t in recs["stepwise"]["result"]["top_kernels"]["rows"])
    assert recs["flora"]["result"]["ranks"] == [80, 80, 80]  # FLoRA keeps the stacked rank
    assert "| fraq:tau=0.95,pipeline=stepwise |" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["results"]
    assert not (tmp_path / "results" / "cuda_graphs").exists()  # the probe runs on CUDA only


@pytest.mark.parametrize("args,named", [(["--methods", "stepwise,bogus"], "bogus"),
                                        (["--presets", "no-such-model"], "no-such-model"),
                                        (["--rounds", "0"], "rounds(=0)")])
def test_an_unknown_name_stops_it_before_any_work(tmp_path, capsys, args, named):
    from benchmarks.pipeline_check import main

    with pytest.raises(SystemExit) as stop:
        main(["--out", str(tmp_path / "out"), "--device", "cpu", "--size", "tiny", *args])
    assert stop.value.code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
