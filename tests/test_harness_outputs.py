"""The harness command line writes only its own files: ``--overwrite`` replaces the files this
run writes and nothing else; ``--resume`` with nothing to resume says so and stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

from fraq.federated.cli import main, run_experiment  # noqa: E402
from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.model import TINY_MODEL  # noqa: E402
from fraq.federated.records import jsonable  # noqa: E402


class Stop(Exception):
    pass


def _no_loading(*args, **kwargs):
    raise AssertionError("the model and the data were loaded before the input was checked")


def config(methods=("fedit", "fraq"), **over) -> dict:
    return load_config("quick", {"methods": list(methods), "federated.clients": 2, "model.name": TINY_MODEL, **over})


def earlier_run(out: Path) -> dict[str, str]:
    """An output directory holding an earlier run of fedit and fraq (round-1 adapters saved) and
    another run's flora, with the user's notes beside them; returns path -> content."""
    cfg = jsonable(config(**{"federated.save_adapters_round": 1}))
    files = {
        "config.json": json.dumps({"config": cfg, "run": {}}),
        "table.md": "old table",
        "fedit/result.json": json.dumps({"method": "fedit", "rounds": [], "config": cfg}),
        "fraq/checkpoint.pt": "old checkpoint",
        "adapters/fedit_round1.safetensors": "old adapters",
        "flora/result.json": "another run's result",
        "flora/checkpoint.pt": "another run's checkpoint",
        "adapters/flora_round1.safetensors": "another run's adapters",
        "adapters/fedit_round2.safetensors": "another round's adapters",
        "notes/todo.md": "mine",
    }
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    return files


def test_overwrite_replaces_only_the_files_this_run_writes(tmp_path, monkeypatch):
    out = tmp_path / "run"
    files = earlier_run(out)
    monkeypatch.setattr("fraq.federated.server.Task", lambda *a, **k: object())

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr("fraq.federated.server.run_method", stop)
    with pytest.raises(Stop):  # stopped at the first method: the earlier files of this run are gone by then
        run_experiment(config(**{"federated.save_adapters_round": 1}), out, overwrite=True, progress=False,
                       log=lambda *a: None)
    left = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    ours = {"table.md", "fedit/result.json", "fraq/checkpoint.pt", "adapters/fedit_round1.safetensors"}
    assert left == (set(files) - ours) | {"config.json"}
    for name in set(files) - ours - {"config.json"}:
        assert (out / name).read_text() == files[name], name


def test_without_adapters_saved_overwrite_keeps_every_adapter_file(tmp_path, monkeypatch):
    out = tmp_path / "run"
    earlier_run(out)
    monkeypatch.setattr("fraq.federated.server.Task", lambda *a, **k: object())
    monkeypatch.setattr("fraq.federated.server.run_method", lambda *a, **k: (_ for _ in ()).throw(Stop))
    with pytest.raises(Stop):
        run_experiment(config(), out, overwrite=True, progress=False, log=lambda *a: None)
    assert sorted(p.name for p in (out / "adapters").iterdir()) == [
        "fedit_round1.safetensors", "fedit_round2.safetensors", "flora_round1.safetensors"]


def test_only_other_methods_results_need_no_overwrite(tmp_path, monkeypatch):
    out = tmp_path / "run"
    (out / "flora").mkdir(parents=True)
    (out / "flora" / "result.json").write_text("another run's result")
    monkeypatch.setattr("fraq.federated.server.Task", _no_loading)
    with pytest.raises(AssertionError, match="loaded"):  # not refused: nothing this run writes is there
        run_experiment(config(), out, progress=False, log=lambda *a: None)
    assert (out / "flora" / "result.json").read_text() == "another run's result"


@pytest.mark.parametrize("state", ["missing", "empty", "other methods only"])
def test_resume_with_nothing_to_resume_says_so_and_stops(tmp_path, monkeypatch, capsys, state):
    out = tmp_path / "run"
    if state != "missing":
        out.mkdir()
    if state == "other methods only":
        (out / "flora").mkdir()
        (out / "flora" / "result.json").write_text("{}")
    monkeypatch.setattr("fraq.federated.server.Task", _no_loading)
    with pytest.raises(ValueError, match=r"--resume: .* holds no earlier run of these methods to continue"):
        run_experiment(config(), out, resume=True, progress=False, log=lambda *a: None)
    assert main(["--methods", "fedit", "fraq", "--clients", "2", "--set", "model.name=" + TINY_MODEL,
                 "--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err and "without --resume" in err and "Traceback" not in err
    assert (not out.exists()) if state == "missing" else sorted(p.name for p in out.iterdir()) == (
        ["flora"] if state == "other methods only" else [])


def test_resume_of_a_run_that_wrote_only_its_config_goes_on(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"config": jsonable(config()), "run": {}}))
    monkeypatch.setattr("fraq.federated.server.Task", _no_loading)
    with pytest.raises(AssertionError, match="loaded"):
        run_experiment(config(), out, resume=True, progress=False, log=lambda *a: None)


@pytest.mark.parametrize("name", ["table.md", "fedit/result.json", "fraq/checkpoint.pt"])
def test_a_fifo_under_a_name_this_run_writes_is_refused_before_any_work(tmp_path, monkeypatch, name):
    import os
    import stat

    out = tmp_path / "run"
    (out / name).parent.mkdir(parents=True)
    os.mkfifo(out / name)
    monkeypatch.setattr("fraq.federated.server.Task", _no_loading)
    with pytest.raises(ValueError, match=rf"output\(='{out / name}'\) is a FIFO .* not a regular file"):
        run_experiment(config(), out, overwrite=True, progress=False, log=lambda *a: None)
    assert stat.S_ISFIFO(os.lstat(out / name).st_mode)
