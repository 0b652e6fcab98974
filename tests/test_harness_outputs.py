"""The harness command line writes only its own files: ``--overwrite`` replaces the files this
run writes and nothing else; ``--resume`` with nothing to resume says so and stops."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

from fraq.federated.cli import main  # noqa: E402
from fraq.federated.experiment import run_experiment  # noqa: E402
from fraq.federated.config import load_config  # noqa: E402
from fraq.federated.model import TINY_MODEL  # noqa: E402

FEDIT = "results/federated/homogeneous-fedit-seed0.json"
FRAQ_CKPT = "checkpoints/homogeneous-fraq-seed0.pt"


class Stop(Exception):
    pass


class NoTask:
    """Stands in for the model and data: derives itself; the first method stops the run."""

    def __init__(self, *a, **k):
        pass

    def derive(self, *a, **k):
        return self


def _no_loading(*args, **kwargs):
    raise AssertionError("the model and the data were loaded before the input was checked")


def config(methods=("fedit", "fraq"), **over) -> dict:
    return load_config("quick", {"methods": list(methods), "federated.clients": 2, "model.name": TINY_MODEL,
                                 "seeds": [0], "variants": {"homogeneous": {}}, **over})


def earlier_run(out) -> dict[str, str]:
    """An output directory holding an earlier run of fedit and fraq (round-1 adapters saved) and
    another run's flora and seed, with the user's notes beside them; returns path -> content."""
    files = {
        FEDIT: "old result",
        FRAQ_CKPT: "old checkpoint",
        "adapters/homogeneous-fedit-seed0_round1.safetensors": "old adapters",
        "results/federated/homogeneous-flora-seed0.json": "another run's result",
        "results/federated/homogeneous-fedit-seed1.json": "another seed's result",
        "checkpoints/homogeneous-flora-seed0.pt": "another run's checkpoint",
        "adapters/homogeneous-flora-seed0_round1.safetensors": "another run's adapters",
        "adapters/homogeneous-fedit-seed0_round2.safetensors": "another round's adapters",
        "report.md": "the analysis' report",
        "notes/todo.md": "mine",
    }
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    return files


def test_overwrite_replaces_only_the_files_this_run_writes(tmp_path, monkeypatch):
    out = tmp_path / "run"
    files = earlier_run(out)
    monkeypatch.setattr("fraq.federated.task.Task", NoTask)

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr("fraq.federated.round_loop.run_method", stop)
    with pytest.raises(Stop):  # stopped at the first point: the earlier files of this run are gone by then
        run_experiment(config(**{"federated.save_adapters_round": 1}), out, overwrite=True, progress=False,
                       log=lambda *a: None)
    left = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    ours = {FEDIT, FRAQ_CKPT, "adapters/homogeneous-fedit-seed0_round1.safetensors"}
    assert left == set(files) - ours
    for name in left:
        assert (out / name).read_text() == files[name], name


def test_without_adapters_saved_overwrite_keeps_every_adapter_file(tmp_path, monkeypatch):
    out = tmp_path / "run"
    earlier_run(out)
    monkeypatch.setattr("fraq.federated.task.Task", NoTask)
    monkeypatch.setattr("fraq.federated.round_loop.run_method", lambda *a, **k: (_ for _ in ()).throw(Stop))
    with pytest.raises(Stop):
        run_experiment(config(), out, overwrite=True, progress=False, log=lambda *a: None)
    assert sorted(p.name for p in (out / "adapters").iterdir()) == [
        "homogeneous-fedit-seed0_round1.safetensors", "homogeneous-fedit-seed0_round2.safetensors",
        "homogeneous-flora-seed0_round1.safetensors"]


def test_only_other_points_results_need_no_overwrite(tmp_path, monkeypatch):
    out = tmp_path / "run"
    other = out / "results" / "federated" / "homogeneous-fedit-seed1.json"
    other.parent.mkdir(parents=True)
    other.write_text("another seed's result")
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    with pytest.raises(AssertionError, match="loaded"):  # not refused: nothing this run writes is there
        run_experiment(config(), out, progress=False, log=lambda *a: None)
    assert other.read_text() == "another seed's result"


@pytest.mark.parametrize("state", ["missing", "empty", "other points only"])
def test_resume_with_nothing_to_resume_says_so_and_stops(tmp_path, monkeypatch, capsys, state):
    out = tmp_path / "run"
    if state != "missing":
        out.mkdir()
    if state == "other points only":
        (out / "results" / "federated").mkdir(parents=True)
        (out / "results" / "federated" / "homogeneous-flora-seed0.json").write_text("{}")
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    with pytest.raises(ValueError, match=r"--resume: .* holds no earlier run of these points to continue"):
        run_experiment(config(), out, resume=True, progress=False, log=lambda *a: None)
    assert main(["--methods", "fedit", "fraq", "--clients", "2", "--seeds", "0", "--variants", "homogeneous",
                 "--set", "model.name=" + TINY_MODEL, "--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err and "without --resume" in err and "Traceback" not in err
    assert (not out.exists()) if state == "missing" else sorted(p.name for p in out.iterdir()) == (
        ["results"] if state == "other points only" else [])


def test_unknown_variant_is_refused_naming_the_known_ones(capsys):
    assert main(["--variants", "hetero", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--variants: 'hetero'" in err and "'heterogeneous'" in err and "Traceback" not in err


@pytest.mark.parametrize("name", [FEDIT, FRAQ_CKPT])
def test_a_fifo_under_a_name_this_run_writes_is_refused_before_any_work(tmp_path, monkeypatch, name):
    import os
    import stat

    out = tmp_path / "run"
    (out / name).parent.mkdir(parents=True)
    os.mkfifo(out / name)
    monkeypatch.setattr("fraq.federated.task.Task", _no_loading)
    with pytest.raises(ValueError, match=rf"output\(='{out / name}'\) is a FIFO .* not a regular file"):
        run_experiment(config(), out, overwrite=True, progress=False, log=lambda *a: None)
    assert stat.S_ISFIFO(os.lstat(out / name).st_mode)
