"""The federated harness's configuration object: frozen, changed only into a new one, checked
before any work, written to the result files in the files' layout, and planned once per command.

No model or data is loaded: the model device is checked, as every configuration is, and
the model's limits are read from its configuration file (a model of no memory, on ``meta``).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from fraq.federated.config import CONFIG_DIR, SETTINGS, Config, Run, load_config, runs


def test_a_config_is_frozen():
    config = load_config("quick")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.train.lr = 1.0


def test_an_override_returns_a_new_config_and_leaves_the_old_one_unchanged():
    old = load_config("quick")
    before = json.dumps(old.to_record())
    new = old.override({"train.lr": 1e-3, "federated.ranks": [2, 4], "partition": {"scheme": "iid"},
                        "dataset.train_per_intent": 7, "variants": {"only": {"train.steps": 1}}})
    assert new is not old and isinstance(new, Config)
    assert (new.train.lr, new.federated.ranks, new.partition.scheme, new.dataset["train_per_intent"]) == \
        (1e-3, [2, 4], "iid", 7)
    assert new.partition.alpha == old.partition.alpha  # a section given as an object is merged key by key
    assert list(new.variants) == ["only"]
    assert json.dumps(old.to_record()) == before  # nothing of the old one changed, nor shared and mutated
    new.federated.ranks.append(99)  # the new one's lists are its own
    new.variants["only"]["train.steps"] = 2
    assert json.dumps(old.to_record()) == before
    assert old.methods is new.methods or old.methods == new.methods  # carried as they are


@pytest.mark.parametrize("over, match", [
    ({"train.lr": -1}, r"train\.lr\(=-1\) must be a finite positive number"),
    ({"federated.rounds": 0}, r"federated\.rounds\(=0\) must be an int >= 1"),
    ({"partition.scheme": "random"}, r"partition\.scheme\(='random'\)"),
    ({"seed": "x"}, r"seed\(='x'\)"),
    ({"methods": ["fraq:tau=2"]}, r"fraq:tau=2"),
    ({"train.nope": 1}, r"unknown config key 'train\.nope'"),
    ({"variants": {"v": {"seeds": [1]}}}, r"variants\.v\(="),
])
def test_a_bad_value_is_refused_naming_the_key_and_the_value(over, match):
    """The same check whether the value comes with the setting or as an override of a
    loaded configuration; the loaded one stays as it was."""
    with pytest.raises(ValueError, match=match):
        load_config("quick", over)
    config = load_config("quick")
    with pytest.raises(ValueError, match=match):
        config.override(over)
    assert config.to_record() == load_config("quick").to_record()


def test_a_bad_variant_is_refused_naming_the_variant_key_and_value():
    config = load_config("quick", {"variants": {"ok": {}, "bad": {"train.lr": 0}}})
    with pytest.raises(ValueError, match=r"variants\.bad: train\.lr\(=0\) must be a finite positive number"):
        runs(config)


def test_runs_are_variant_seed_config_with_the_variant_applied():
    config = load_config("quick", {"seeds": [3, 1], "federated.clients": 4,
                                   "variants": {"a": {}, "b": {"federated.ranks": [2, 4]}}})
    got = runs(config)
    assert [(r.variant, r.seed) for r in got] == [("a", 3), ("a", 1), ("b", 3), ("b", 1)]
    assert all(isinstance(r, Run) and r.config.seed == r.seed for r in got)
    assert [r.config.federated.ranks for r in got] == [config.federated.ranks] * 2 + [[2, 4]] * 2
    assert config.federated.ranks != [2, 4] and config.seed not in (3, 1)  # the setting is unchanged


def test_the_record_has_the_config_files_keys_in_their_order():
    """Read independently of :class:`Config`: the keys of ``configs/defaults.json`` (comments
    first) then ``setting``, each section's keys in the file's order; a run's record drops
    the setting's ``seeds``, ``variants`` and ``methods``; the methods are their text."""
    with open(CONFIG_DIR / "defaults.json", encoding="utf-8") as f:
        defaults = json.load(f)
    for setting in SETTINGS:
        record = load_config(setting).to_record()
        assert list(record) == [*defaults, "setting"] and record["setting"] == setting
        for key, value in defaults.items():
            if isinstance(value, dict) and key not in ("dataset", "variants"):
                assert list(record[key]) == list(value), (setting, key)
        assert all(isinstance(m, str) for m in record["methods"])
        assert json.loads(json.dumps(record)) == record
    run = load_config("quick").to_record(run=True)
    assert list(run) == [k for k in [*defaults, "setting"] if k not in ("seeds", "variants", "methods")]


def test_the_cli_computes_the_run_plan_once(tmp_path, monkeypatch, capsys):
    """One command draws its runs once: the output checks, the run and the Ctrl-C line read
    that plan (here the model load is stopped with Ctrl-C, which reads it once more)."""
    pytest.importorskip("transformers")
    import fraq.federated.config as config_module
    from fraq.federated.cli import main

    calls, real = [], config_module.runs
    monkeypatch.setattr(config_module, "runs", lambda config: calls.append(config) or real(config))

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("fraq.federated.task.Task", ctrl_c)
    argv = ["--methods", "fedit", "fraq", "--clients", "4", "--rounds", "1", "--out", str(tmp_path / "out"),
            "--no-progress"]
    assert main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    assert len(calls) == 1


@pytest.mark.parametrize("key, value", [("train.use_rslora", 0), ("model.cache_prefix", 0)])
def test_an_override_equal_in_value_but_not_in_type_is_checked(key, value):
    """``0 == False`` in Python; the override is still checked (and refused), not taken for no change."""
    with pytest.raises(ValueError, match=key.replace(".", r"\.") + r"\(=0\) must be true or false"):
        load_config("quick").override({key: value})


def test_an_override_keeps_the_type_it_was_given():
    config = load_config("quick", {"partition.alpha": 1})
    assert json.dumps(config.override({"partition.alpha": 1.0}).to_record()["partition"]["alpha"]) == "1.0"


@pytest.mark.parametrize("over, match", [
    ({"model.max_length": 1_000_000_000},
     r"model\.max_length\(=1000000000\) exceeds 512, embedded:all-MiniLM-L6-v2's max_position_embeddings"),
    ({"federated.ranks": [1_000_000]}, r"federated\.ranks\(=\[1000000\]\) has 1000000, above 384, the min\(m, n\)"),
    ({"federated.ranks": [8, 385]}, r"federated\.ranks\(=\[8, 385\]\) has 385, above 384"),
])
def test_what_the_model_cannot_hold_is_refused_naming_the_key_value_and_limit(over, match, monkeypatch):
    """Refused while the configuration is built: no model weights or data are read."""
    import fraq.federated.dataset as dataset
    import fraq.federated.model as model

    def loaded(*a, **k):
        raise AssertionError("a model or data set was loaded")

    monkeypatch.setattr(model, "_load_hf", loaded)
    monkeypatch.setattr(dataset, "load_dataset", loaded)
    with pytest.raises(ValueError, match=match):
        load_config("quick", over)
    with pytest.raises(ValueError, match=match):
        load_config("quick").override(over)


def test_the_model_limits_are_the_models_own():
    """The limits at the edge are accepted: the embedded model's 512 positions and the
    384 x 384 of its q/k/v; the tiny BERT's 64 positions and 32 x 32."""
    from fraq.federated.model import TINY_MODEL

    assert load_config("quick", {"model.max_length": 512, "federated.ranks": [384]}).federated.ranks == [384]
    tiny = {"model.name": TINY_MODEL, "model.layers_to_transform": [1], "variants": {"homogeneous": {}}}
    assert load_config("quick", {**tiny, "model.max_length": 64, "federated.ranks": [32]}).model.max_length == 64
    with pytest.raises(ValueError, match=r"model\.max_length\(=65\) exceeds 64"):
        load_config("quick", {**tiny, "model.max_length": 65})
    with pytest.raises(ValueError, match=r"federated\.ranks\(=\[33\]\) has 33, above 32"):
        load_config("quick", {**tiny, "federated.ranks": [33]})


def test_a_variant_rank_the_model_cannot_hold_names_the_variant():
    config = load_config("quick", {"variants": {"ok": {}, "big": {"federated.ranks": [4, 4096]}}})
    with pytest.raises(ValueError, match=r"variants\.big: federated\.ranks\(=\[4, 4096\]\) has 4096, above 384"):
        runs(config)


def test_threads_beyond_the_machines_cpus_are_refused(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert load_config("quick", {"threads": 4}).threads == 4
    with pytest.raises(ValueError, match=r"threads\(=1000000\) exceeds 4, this machine's CPU count"):
        load_config("quick", {"threads": 1_000_000})


def test_the_cli_refuses_what_the_model_cannot_hold_in_one_line(capsys, monkeypatch):
    from fraq.federated.cli import main

    def work(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr("fraq.federated.cli.run_experiment", work)
    for flag, says in (("model.max_length=1000000000", "model.max_length(=1000000000) exceeds 512"),
                       ("federated.ranks=[1000000]", "federated.ranks(=[1000000]) has 1000000, above 384"),
                       ("threads=1000000", "threads(=1000000) exceeds")):
        assert main(["--set", flag, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {says}") and err.count("\n") == 1, err


DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "1" + "0" * 4999


@pytest.mark.parametrize("text, says", [
    (DEEP, "is nested deeper than 16 levels"),
    (HUGE, "holds an integer of 5000 digits, beyond 2**63 - 1"),
    ("9223372036854775808", "holds an integer of 19 digits"),
])
def test_a_deep_or_huge_set_value_is_one_line_naming_the_key(text, says, capsys, monkeypatch):
    from fraq.federated.cli import main

    def work(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr("fraq.federated.cli.run_experiment", work)
    assert main(["--set", f"seed={text}", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config key 'seed'") and says.split("(")[0] in err and err.count("\n") == 1, \
        err[:300]


@pytest.mark.parametrize("text, says", [
    ('{"seed": ' + DEEP + "}", r"is nested deeper than 16 levels"),
    ('{"seed": ' + HUGE + "}", r"holds an integer of 5000 digits"),
    ('{"variants": {"v": {"federated.ranks": ' + "[" * 17 + "]" * 17 + "}}}",
     r"at 'variants\.v\.federated\.ranks\[0\]"),
])
def test_a_deep_or_huge_config_file_value_is_one_line_naming_the_file(text, says, tmp_path):
    path = tmp_path / "setting.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"config file '.*setting\.json'.* " + says) as e:
        load_config(str(path))
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


def test_an_override_too_deep_for_a_copy_is_refused_naming_the_key():
    value: list = []
    for _ in range(100_000):
        value = [value]
    for load in (lambda: load_config("quick", {"dataset": {"name": value}}),
                 lambda: load_config("quick").override({"federated.ranks": value})):
        with pytest.raises(ValueError, match=r"config key '(dataset|federated\.ranks)' at .* deeper than 16"):
            load()


def test_the_flower_overrides_refuse_deep_or_huge_values_naming_the_key():
    from fraq.federated.flower.run_config import parse_overrides

    assert parse_overrides("train.lr=1e-3 seed=7 dataset.name=intents") == \
        {"train.lr": 1e-3, "seed": 7, "dataset.name": "intents"}
    for text, says in ((DEEP, "nested deeper"), (HUGE, "5000 digits")):
        with pytest.raises(ValueError, match=f"run config 'overrides': config key 'seed' .*{says}"):
            parse_overrides(f"seed={text}")
