"""The published data sets read from a local folder: the real files load with the published
counts; a partial, damaged or other-version copy is refused with one line before any model loads.

The real files come from ``$FRAQ_DATA`` (a folder holding ``banking77/`` and ``clinc150/``;
CI sets it when the files are there); the tests that need them skip without it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fraq.federated import cli
from fraq.federated.dataset import load_dataset
from fraq.federated.published import PUBLISHED, check_folder

DATA = os.environ.get("FRAQ_DATA")
needs_data = pytest.mark.skipif(not DATA, reason="FRAQ_DATA is unset: no local copy of banking77/ and clinc150/")


@needs_data
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_real_files_load_with_the_published_counts(name):
    spec = PUBLISHED[name]
    data = load_dataset({"name": name, "data_dir": DATA})
    assert len(data.train_texts) == len(data.train_labels) == spec.counts["train"]
    assert len(data.test_texts) == len(data.test_labels) == spec.counts["test"]
    assert data.num_labels == spec.labels
    # every label index is a class, and every class occurs in training (a partition needs them)
    assert data.train_labels.min() == 0 and data.train_labels.max() == spec.labels - 1
    assert set(data.test_labels.tolist()) <= set(data.train_labels.tolist())
    assert all(isinstance(t, str) and t.strip() for t in data.train_texts + data.test_texts)


@needs_data
def test_clinc150_is_in_scope_only():
    data = load_dataset({"name": "clinc150", "data_dir": DATA})
    assert "oos" not in data.label_names
    assert len(set(data.label_names)) == 150


def _copy(tmp_path: Path, name: str) -> Path:
    root = tmp_path / "data"
    shutil.copytree(Path(DATA) / name, root / name)
    for f in (root / name).iterdir():
        f.chmod(0o644)
    return root


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@needs_data
def test_a_missing_file_is_named_with_the_folder(tmp_path):
    root = _copy(tmp_path, "banking77")
    (root / "banking77" / "test.csv").unlink()
    with pytest.raises(ValueError) as exc:
        load_dataset({"name": "banking77", "data_dir": str(root)})
    msg = _one_line(exc)
    assert str(root / "banking77") in msg and "missing test.csv" in msg


@needs_data
def test_a_truncated_file_is_refused_with_its_count(tmp_path):
    root = _copy(tmp_path, "banking77")
    train = root / "banking77" / "train.csv"
    lines = train.read_text(encoding="utf-8").splitlines(keepends=True)
    train.write_text("".join(lines[:-2]), encoding="utf-8")  # two examples lost
    with pytest.raises(ValueError) as exc:
        check_folder("banking77", root)
    msg = _one_line(exc)
    assert "train.csv" in msg and "train has 10001 examples, not 10003" in msg


@needs_data
def test_a_damaged_file_is_refused(tmp_path):
    root = _copy(tmp_path, "clinc150")
    data = root / "clinc150" / "data_full.json"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x20  # one byte flipped: same size, other content
    data.write_bytes(bytes(raw))
    with pytest.raises(ValueError) as exc:
        check_folder("clinc150", root)
    msg = _one_line(exc)
    assert str(root / "clinc150") in msg and "data_full.json is not the published file" in msg


def test_a_folder_without_the_data_set_is_named(tmp_path):
    (tmp_path / "clinc150").mkdir()
    with pytest.raises(ValueError, match="missing train.csv, test.csv, categories.json"):
        check_folder("banking77", tmp_path)
    with pytest.raises(ValueError, match=r"data_dir\(=.*nowhere.*\) is not a directory"):
        check_folder("clinc150", tmp_path / "nowhere")


def test_data_dir_is_only_for_the_published_sets(tmp_path):
    with pytest.raises(ValueError, match=r"dataset.data_dir.*not dataset.name\(='intents'\)"):
        load_dataset({"name": "intents", "data_dir": str(tmp_path)})


def _no_model(monkeypatch):
    """Any model or data loading fails the test: the folder must be refused before."""
    import fraq.federated.task as task

    def boom(*a, **k):
        raise AssertionError("the model loaded before the data folder was checked")

    monkeypatch.setattr(task, "Task", boom)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_cli_refuses_a_bad_folder_in_one_line_before_any_model(tmp_path, monkeypatch, capsys, how):
    _no_model(monkeypatch)
    (tmp_path / "banking77").mkdir()
    (tmp_path / "banking77" / "train.csv").write_text("text,category\nhi,card_arrival\n")
    argv = ["--config", "banking77", "--out", str(tmp_path / "out"), "--no-progress"]
    if how == "flag":
        monkeypatch.delenv("FRAQ_DATA", raising=False)
        argv += ["--data-dir", str(tmp_path)]
    else:
        monkeypatch.setenv("FRAQ_DATA", str(tmp_path))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert str(tmp_path / "banking77") in err[0] and "missing test.csv, categories.json" in err[0]


@needs_data
def test_the_cli_parses_each_method_once_with_the_data_folder(tmp_path, monkeypatch, method_parses):
    """The data folder is an override of the loaded configuration; the methods parsed when it
    was loaded are carried into it, not read from their text again."""
    seen = {}
    monkeypatch.setattr(cli, "run_experiment", lambda cfg, out, **k: seen.setdefault("cfg", cfg))
    argv = ["--config", "banking77", "--methods", "fedit", "fraq:tau=0.9", "--out", str(tmp_path), "--no-progress"]
    assert cli.main(argv) == 0
    assert method_parses == ["fedit", "fraq:tau=0.9"]
    assert seen["cfg"].dataset["data_dir"] == str(Path(DATA).absolute())
    assert [str(m) for m in seen["cfg"].methods] == ["fedit", "fraq:tau=0.9"]


def test_fraq_data_is_ignored_for_other_data_sets(tmp_path, monkeypatch):
    """The environment variable points at the published sets; the generated corpus does not use it."""
    monkeypatch.setenv("FRAQ_DATA", str(tmp_path / "nowhere"))
    from fraq.federated.config import load_config

    cfg = load_config("smoke")
    assert cli._data_dir(None, cfg) is None
    assert cli._data_dir(None, load_config("banking77")) == str((tmp_path / "nowhere").absolute())


# ------------------------------------------------------------------------------ files that cannot be read
def _fake_banking(tmp_path: Path, train: str) -> Path:
    """A banking77 folder whose train.csv is ``train`` (so not the published file)."""
    folder = tmp_path / "data" / "banking77"
    folder.mkdir(parents=True)
    (folder / "train.csv").write_text(train, encoding="utf-8")
    (folder / "test.csv").write_text("text,category\nhi,card\n", encoding="utf-8")
    (folder / "categories.json").write_text('["card"]', encoding="utf-8")
    return folder.parent


def test_a_published_file_csv_cannot_parse_is_named_not_a_traceback(tmp_path):
    root = _fake_banking(tmp_path, "text,category\n" + "x" * 131_073 + ",card\n")  # over csv's limit: _csv.Error
    with pytest.raises(ValueError) as exc:
        check_folder("banking77", root)
    msg = _one_line(exc)
    assert "train.csv is not the published file" in msg and str(root / "banking77") in msg


def test_deeply_nested_published_json_is_named_not_a_traceback(tmp_path):
    folder = tmp_path / "data" / "clinc150"
    folder.mkdir(parents=True)
    (folder / "data_full.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError) as exc:
        check_folder("clinc150", folder.parent)
    assert "data_full.json is not the published file" in _one_line(exc)


def test_a_data_folder_that_cannot_be_searched_is_one_line_naming_it(tmp_path, monkeypatch):
    root = _fake_banking(tmp_path, "text,category\nhi,card\n")
    real = Path.is_file

    def is_file(self):
        if self.parent.name == "banking77":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    with pytest.raises(ValueError) as exc:
        check_folder("banking77", root)
    assert _one_line(exc) == (f"dataset folder {str(root / 'banking77')!r} cannot be read: "
                              f"{root / 'banking77' / 'train.csv'} (Permission denied)")


def _local(tmp_path: Path, train: str | bytes, name: str = "train.csv", test: str = "text,label\nhi,a\n") -> Path:
    root = tmp_path / "ds"
    root.mkdir()
    (root / name).write_bytes(train if isinstance(train, bytes) else train.encode())
    (root / "test.csv").write_text(test)
    return root


@pytest.mark.parametrize("name, train, named", [
    ("train.csv", "text,label\nhi,a\nbye\n", "train.csv, line 3: no value in column 'label'"),
    ("train.csv", "text,label\nhi,a\nbye,\n", "train.csv, line 3: the label column 'label' is empty"),
    ("train.csv", "text,label\nhi,a\nbye,  \n", "train.csv, line 3: the label column 'label' is empty"),
    ("train.csv", "text,label\nhi,a\n\"a\nb\",c\nx\n", "train.csv, line 5: no value in column 'label'"),
    ("train.csv", b"text,label\nhi,a\ncaf\xe9,b\n", "train.csv, line 3: not UTF-8"),
    ("train.csv", "text,label\n" + "x" * 131_073 + ",a\n", "train.csv, line 2: not readable as CSV (field larger"),
    ("train.jsonl", '{"text": "hi", "label": "a"}\n{"text": "bye", "label": "a"\n',
     "train.jsonl, line 2: not JSON (Expecting ',' delimiter"),
    ("train.jsonl", '{"text": "hi", "label": "a"}\n\n{"text": "bye"}\n', "train.jsonl, line 3: no value in column 'label'"),
    ("train.jsonl", '{"text": "hi", "label": "a"}\n{"text": "bye", "label": null}\n',
     "train.jsonl, line 2: no value in column 'label'"),
    ("train.jsonl", '{"text": "hi", "label": "a"}\n["bye", "a"]\n', "train.jsonl, line 2: a record must be an object"),
    ("train.jsonl", '{"text": "hi", "label": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n",
     "train.jsonl, line 2: JSON nested too deeply"),
    ("train.json", '[{"text": "hi", "label": "a"}, {"label": "b"}]', "train.json, record 1: no value in column 'text'"),
    ("train.json", "[" * 100_000 + "]" * 100_000, "train.json: JSON nested too deeply"),
    ("train.json", '[{"text": "hi", "label": "a"},\n {"text": "x", "label": "b"}', "train.json: not JSON ("),
])
def test_a_bad_local_file_is_one_line_naming_the_file_and_line(tmp_path, name, train, named):
    root = _local(tmp_path, train, name)
    with pytest.raises(ValueError) as exc:
        load_dataset({"path": str(root)})
    msg = _one_line(exc)
    assert msg.startswith(str(root / name.split(",")[0])) and named in msg, msg


def test_a_good_local_file_still_loads_with_its_classes(tmp_path):
    data = load_dataset({"path": str(_local(tmp_path, "text,label\nhi,a\n\"multi\nline\",b\n", test="text,label\nx,b\n"))})
    assert data.label_names == ["a", "b"] and data.train_texts == ["hi", "multi\nline"] and list(data.test_labels) == [1]


def test_a_local_folder_that_cannot_be_searched_is_one_line(tmp_path, monkeypatch):
    root = _local(tmp_path, "text,label\nhi,a\n")
    real = Path.exists

    def exists(self, *a, **k):
        if self.parent == root:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "exists", exists)
    with pytest.raises(ValueError) as exc:
        load_dataset({"path": str(root)})
    assert _one_line(exc) == f"dataset.path(={str(root)!r}) cannot be read: {root / 'dataset_dict.json'} (Permission denied)"
