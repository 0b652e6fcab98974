"""Text-classification data for the federated harness (the clients' partitions: :mod:`~fraq.federated.partition`).

Sources (``load_dataset``; each returns a :class:`~fraq.federated.text_data.TextData`):

- ``"intents"``: the generated corpus of :mod:`fraq.federated.intents` (offline default);
- a local directory with ``train`` and ``test`` files in CSV, JSON Lines or JSON (a list
  of records), or a directory written by ``datasets.Dataset.save_to_disk``; a file that
  cannot be read (not UTF-8, a line that does not parse, a row without its text or label,
  an empty label) is refused with one line naming the file and the line;
- ``banking77`` or ``clinc150`` with ``data_dir``: the publisher's files in
  ``data_dir/<name>/``, checked against their sha256 and counts
  (:mod:`fraq.federated.published`; CLINC150 in-scope only);
- a Hugging Face data set by name (``banking77``, ``clinc150``, ``hwu64``,
  ``20newsgroups`` or any hub id), through the ``datasets`` package, when the user has
  network access or a local cache (CLINC150's out-of-scope class is left out here too).
"""

from __future__ import annotations

import csv
import io
import json
import numbers
from pathlib import Path

import numpy as np

from fraq.federated.text_data import TextData

__all__ = ["HUB_DATASETS", "check_dataset_spec", "load_dataset"]

HUB_DATASETS = {
    "banking77": {"hub_id": "PolyAI/banking77", "text_column": "text", "label_column": "label"},
    "clinc150": {"hub_id": "clinc/clinc_oos", "subset": "plus", "text_column": "text", "label_column": "intent",
                 "out_of_scope": "oos"},
    "hwu64": {"hub_id": "DeepPavlov/hwu64", "text_column": "utterance", "label_column": "label"},
    "20newsgroups": {"hub_id": "SetFit/20_newsgroups", "text_column": "text", "label_column": "label"},
}
"""Short names of the paper's data sets -> hub id, subset and columns (override any in the config);
``out_of_scope``: a class left out of both splits (CLINC150's, as in the paper's in-scope accuracy)."""


_INTS = ("max_train", "max_test", "train_per_intent", "test_per_intent")
_STRS = ("text_column", "label_column", "task_column", "subset", "hub_id", "data_dir")


def check_dataset_spec(spec: object) -> None:
    """Check a config's ``dataset`` section; ValueError names the key and value.

    Nothing is loaded, except that a ``data_dir`` folder's files are checked against the
    publisher's sha256 (:func:`fraq.federated.published.check_folder`, once per folder).
    ``name`` must be ``"intents"``, a short name of :data:`HUB_DATASETS`, or a hub id
    ``owner/name`` (a legacy id without owner needs ``hub_id`` set as well); ``path`` a
    directory path (:func:`load_dataset` raises FileNotFoundError naming it when it is none).
    """
    if not isinstance(spec, dict):
        raise ValueError(f"dataset(={spec!r}) must be an object with name or path")
    known = {"name", "path", "seed", *_INTS, *_STRS}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"dataset has unknown keys {unknown}; known: {sorted(known)}")
    name, path = spec.get("name"), spec.get("path")
    if (name is None) == (path is None):
        raise ValueError(f"dataset needs exactly one of name and path, got name={name!r}, path={path!r}")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise ValueError(f"dataset.path(={path!r}) must be a directory path")
    elif not isinstance(name, str) or not name.strip():
        raise ValueError(f"dataset.name(={name!r}) must be a non-empty string")
    elif name != "intents" and name not in HUB_DATASETS and spec.get("hub_id") is None and \
            (name.count("/") != 1 or "" in name.split("/") or Path(name).is_absolute()):
        raise ValueError(f"dataset.name(={name!r}) is not 'intents', one of {sorted(HUB_DATASETS)}, a hub id "
                         f"'owner/name' (e.g. 'PolyAI/banking77') or a directory (dataset.path)")
    for key in _INTS:
        v = spec.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"dataset.{key}(={v!r}) must be a positive int or null")
    seed = spec.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"dataset.seed(={seed!r}) must be an int >= 0 or null")
    for key in _STRS:
        v = spec.get(key)
        if v is not None and (not isinstance(v, str) or not v):
            raise ValueError(f"dataset.{key}(={v!r}) must be a non-empty string or null")
    if spec.get("data_dir") is not None:
        from fraq.federated.published import PUBLISHED, check_folder

        if name not in PUBLISHED:
            raise ValueError(f"dataset.data_dir(={spec['data_dir']!r}) is for the published data sets "
                             f"{sorted(PUBLISHED)}, not dataset.name(={name!r})")
        check_folder(name, spec["data_dir"])


def load_dataset(spec: dict) -> TextData:
    """Load the data set a config's ``dataset`` section names (see the module docstring).

    ``spec`` keys: ``name`` ("intents", a short name of :data:`HUB_DATASETS`, a hub id)
    or ``path`` (a local directory); ``data_dir``, a folder holding ``banking77/`` and
    ``clinc150/`` as published (read instead of the hub); ``text_column``, ``label_column``, ``task_column``,
    ``subset``, ``hub_id`` override the defaults; ``max_train`` / ``max_test`` cap the
    split sizes (first examples after a seeded shuffle); ``seed``; for the generated
    corpus ``train_per_intent`` and ``test_per_intent``.
    """
    check_dataset_spec(spec)
    name, path = spec.get("name"), spec.get("path")
    seed = spec.get("seed")
    seed = 42 if seed is None else seed
    if name == "intents":
        from fraq.federated.intents import generate_intents

        tr, te, names = generate_intents(seed, spec.get("train_per_intent", 100), spec.get("test_per_intent", 30))
        data = TextData([t for t, _, _ in tr], np.array([y for _, y, _ in tr], dtype=np.int64),
                        [t for t, _, _ in te], np.array([y for _, y, _ in te], dtype=np.int64), names,
                        [d for _, _, d in tr])
    elif spec.get("data_dir") is not None:
        from fraq.federated.published import load_published

        data = load_published(name, spec["data_dir"])
    elif path is not None:
        data = _load_local(Path(path), spec)
    else:
        data = _load_hub(name, spec)
    return _cap(data, spec.get("max_train"), spec.get("max_test"), seed)


def _cap(data: TextData, max_train, max_test, seed: int) -> TextData:
    for key, v in (("max_train", max_train), ("max_test", max_test)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"dataset.{key}(={v!r}) must be a positive int or null")
    if max_train is None and max_test is None:
        return data
    rng = np.random.default_rng(seed)
    tr = rng.permutation(len(data.train_texts))[:max_train]
    te = rng.permutation(len(data.test_texts))[:max_test]
    return TextData([data.train_texts[i] for i in tr], data.train_labels[tr],
                    [data.test_texts[i] for i in te], data.test_labels[te], data.label_names,
                    None if data.train_tasks is None else [data.train_tasks[i] for i in tr])


def _records_from_file(path: Path, columns: tuple[str, ...] = ()) -> list[dict]:
    """The records of one local split file (CSV with a header, JSON Lines, or a JSON list of
    objects), each with ``where`` it came from checked.

    Raises ValueError, one line naming the file and the line (or record): bytes that are
    not UTF-8, a JSON line that does not parse, a CSV field over csv's limit, JSON nested
    too deeply to parse, a record that is not an object, and a record that lacks one of
    ``columns`` (the text and label columns) the first record has or leaves the label
    (``columns[-1]``) empty: a missing label would become a class ``'None'`` and an empty
    one a class ``''``, silently.
    """
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path} cannot be read ({e.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 ({e.reason} at byte {e.start}); save the file as "
                         f"UTF-8") from None
    rows: list[tuple[str, object]] = []
    if path.suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            for row in reader:
                rows.append((f"line {reader.line_num}", row))
        except csv.Error as e:  # a field over csv.field_size_limit(); the failing line is not yet counted
            raise ValueError(f"{path}, line {reader.line_num + 1}: not readable as CSV ({e})") from None
    elif path.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                rows.append((f"line {n}", _json(line, f"{path}, line {n}")))
    else:
        out = _json(text, str(path))
        if not isinstance(out, list):
            raise ValueError(f"{path}: a .json split must be a list of records, got {type(out).__name__}")
        rows = [(f"record {i}", r) for i, r in enumerate(out)]
    for where, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{path}, {where}: a record must be an object with the columns, got "
                             f"{type(row).__name__} {row!r:.60}")
    first = rows[0][1] if rows else {}
    for where, row in rows:
        for col in columns:
            if col in first and row.get(col) is None:
                raise ValueError(f"{path}, {where}: no value in column {col!r} (a missing "
                                 f"{'label' if col == columns[-1] else 'value'} is refused, not read as 'None')")
        if columns and columns[-1] in first and isinstance(row[columns[-1]], str) and not row[columns[-1]].strip():
            raise ValueError(f"{path}, {where}: the label column {columns[-1]!r} is empty (a blank label is "
                             f"refused, not read as a class '')")
    return [row for _, row in rows]


def _json(text: str, where: str):
    """``text`` parsed as JSON; ValueError naming ``where`` (and the line in it) otherwise."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to read (a record is an object of columns)") from None


def _load_local(root: Path, spec: dict) -> TextData:
    try:
        if not root.is_dir():
            raise FileNotFoundError(f"dataset.path(={str(root)!r}) is not a directory")
        saved = (root / "dataset_dict.json").exists()
    except PermissionError as e:
        raise ValueError(f"dataset.path(={str(root)!r}) cannot be read: {e.filename} ({e.strerror})") from None
    if saved:
        try:
            import datasets
        except ImportError as e:
            raise ImportError(f"{root} was written by datasets.save_to_disk; install `datasets` to read it") from e
        dd = datasets.load_from_disk(str(root))
        return _from_columns({s: dd[s].to_list() for s in ("train", "test")}, spec, _class_names(dd["train"], spec))
    splits = {}
    for split in ("train", "test"):
        try:  # a folder that cannot be searched raises PermissionError here
            found = [root / f"{split}{ext}" for ext in (".csv", ".jsonl", ".json") if (root / f"{split}{ext}").exists()]
        except OSError as e:
            raise ValueError(f"dataset.path(={str(root)!r}) cannot be read: {e.filename} ({e.strerror})") from None
        if not found:
            raise FileNotFoundError(f"dataset.path(={str(root)!r}) has no {split}.csv, {split}.jsonl or {split}.json")
        splits[split] = _records_from_file(found[0], (spec.get("text_column", "text"),
                                                      spec.get("label_column", "label")))
    return _from_columns(splits, spec, None)


def _class_names(ds, spec: dict) -> list[str] | None:
    col = spec.get("label_column", "label")
    feat = getattr(ds, "features", {}).get(col)
    return list(feat.names) if hasattr(feat, "names") else None


def _load_hub(name: str, spec: dict) -> TextData:
    defaults = HUB_DATASETS.get(name, {"hub_id": name})
    spec = {**defaults, **{k: v for k, v in spec.items() if v is not None}}
    try:
        import datasets
    except ImportError as e:
        raise ImportError(f"dataset.name(={name!r}) loads through the `datasets` package: pip install datasets") from e
    try:
        dd = datasets.load_dataset(spec["hub_id"], spec.get("subset"))
    except (OSError, ValueError) as e:  # ConnectionError offline, DatasetNotFoundError, a bad subset
        raise ValueError(f"dataset.name(={name!r}): the Hugging Face hub data set {spec['hub_id']!r} could not be "
                         f"loaded ({type(e).__name__}: {e}); check the name and the network, or point dataset.path "
                         f"at a local copy") from None
    if "test" not in dd:
        raise ValueError(f"hub dataset {spec['hub_id']!r} has no test split (splits: {list(dd)})")
    names = _class_names(dd["train"], spec)
    splits = {s: dd[s].to_list() for s in ("train", "test")}
    oos = spec.get("out_of_scope")
    if oos is not None and names is not None and oos in names:  # the class left out, the others renumbered
        col, drop = spec.get("label_column", "label"), names.index(oos)
        splits = {s: [{**r, col: r[col] - (r[col] > drop)} for r in rows if r[col] != drop]
                  for s, rows in splits.items()}
        names = [n for n in names if n != oos]
    return _from_columns(splits, spec, names)


def _from_columns(splits: dict[str, list[dict]], spec: dict, names: list[str] | None) -> TextData:
    tcol, lcol, kcol = spec.get("text_column", "text"), spec.get("label_column", "label"), spec.get("task_column", "task")
    for split, rows in splits.items():
        if not rows:
            raise ValueError(f"the {split} split is empty")
        for col in (tcol, lcol):
            if col not in rows[0]:
                raise ValueError(f"the {split} split has no column {col!r} (columns: {sorted(rows[0])}); "
                                 f"set dataset.text_column / dataset.label_column")
    raw = [r[lcol] for r in splits["train"]] + [r[lcol] for r in splits["test"]]
    if names is None:
        if all(isinstance(v, numbers.Integral) or (isinstance(v, str) and v.strip().lstrip("-").isdigit()) for v in raw):
            ints = sorted({int(v) for v in raw})
            if ints[0] < 0:
                raise ValueError(f"labels must be >= 0, got {ints[0]}")
            names = [str(i) for i in range(ints[-1] + 1)]
            index = {str(i): i for i in ints}
        else:
            names = sorted({str(v).strip() for v in raw})
            index = {v: i for i, v in enumerate(names)}
    else:
        index = {**{str(i): i for i in range(len(names))}, **{n: i for i, n in enumerate(names)}}

    def labels(rows):
        return np.array([index[str(int(r[lcol])) if isinstance(r[lcol], numbers.Integral) else str(r[lcol]).strip()]
                         for r in rows], dtype=np.int64)

    tasks = [str(r[kcol]) for r in splits["train"]] if kcol in splits["train"][0] else None
    return TextData([str(r[tcol]) for r in splits["train"]], labels(splits["train"]),
                    [str(r[tcol]) for r in splits["test"]], labels(splits["test"]), names, tasks)
