"""The paper's intent data sets as their publishers distribute them, read from a local folder and checked.

``load_dataset({"name": "banking77", "data_dir": DIR})`` reads ``DIR/banking77/``;
``"clinc150"`` reads ``DIR/clinc150/``. ``DIR`` is a folder holding one sub-folder per data
set, laid out as the publisher ships it (:data:`PUBLISHED`). Without ``data_dir`` the
short names load from the Hugging Face hub (:mod:`fraq.federated.dataset`).

Every file is checked against the publisher's sha256 before anything is read, and the
parsed splits against the published counts, so a partial, damaged or other-version copy
is refused with one line naming the folder and what is missing or wrong
(:func:`check_folder`, called by the configuration's validation before any model loads).

- **BANKING77** (Casanueva et al., 2020, arXiv:2003.04807; CC BY 4.0):
  ``train.csv`` / ``test.csv`` with columns ``text,category`` and ``categories.json``,
  the 77 intent names in the publisher's order (the label indices).
- **CLINC150** (Larson et al., EMNLP 2019, doi:10.18653/v1/D19-1131; CC BY 3.0):
  ``data_full.json`` with ``train`` / ``val`` / ``test`` lists of ``[text, intent]`` and
  the out-of-scope ``oos_*`` lists. The harness trains on ``train`` and evaluates on
  ``test``, in-scope only (150 intents, label indices in sorted name order); ``val`` and
  the out-of-scope examples are not used.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fraq.federated.text_data import TextData

__all__ = ["PUBLISHED", "Published", "check_folder", "load_published"]


@dataclass(frozen=True)
class Published:
    """One data set in its publisher's layout: its files and their sha256, the examples per split.

    ``counts``: split -> number of examples as published (``train`` and ``test`` are
    the two the harness reads; others are checked only through the file's sha256).
    """

    name: str
    files: dict[str, str]
    counts: dict[str, int]
    labels: int
    citation: str
    licence: str
    source: str


PUBLISHED = {
    "banking77": Published(
        "banking77",
        {"train.csv": "b06e26ac675513959a63135f11b94ea7786ed02da65db93a5650d8838cbc664b",
         "test.csv": "d12d6e3bc4c3103966ae786dc435913c0c563dfa328f5a3646d0e62cfeeb474d",
         "categories.json": "53261da888122daf2d120d925458631d9619e15d82e56052e7a42e535ce32b63"},
        {"train": 10003, "test": 3080}, 77,
        "Casanueva et al., Efficient Intent Detection with Dual Sentence Encoders, NLP4ConvAI 2020, "
        "arXiv:2003.04807", "CC BY 4.0",
        "github.com/PolyAI-LDN/task-specific-datasets, banking_data/, commit 57ec275"),
    "clinc150": Published(
        "clinc150",
        {"data_full.json": "36923c3705a59e08fe9c3883d8bc2dd966ef93e22cb78ac41171782a698d56e0"},
        {"train": 15000, "val": 3000, "test": 4500}, 150,
        "Larson et al., An Evaluation Dataset for Intent Classification and Out-of-Scope Prediction, "
        "EMNLP-IJCNLP 2019, doi:10.18653/v1/D19-1131", "CC BY 3.0",
        "github.com/clinc/oos-eval, data/data_full.json, commit 828f809"),
}
"""The data sets readable from a local folder: name -> files, sha256, counts, citation and licence."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_folder(name: str, data_dir: str | os.PathLike) -> Path:
    """``data_dir/name``, checked: every published file there with the publisher's sha256.

    Raises ValueError, one line naming the folder and what is missing or wrong (a file
    absent, or its content not the published one, with the counts found where it parses).
    The check is cached per folder and file state, so validating a setting's variants
    reads each file once.
    """
    if name not in PUBLISHED:
        raise ValueError(f"dataset.name(={name!r}) has no local layout; local folders hold {sorted(PUBLISHED)}")
    root = Path(data_dir)
    folder = root / name
    files = PUBLISHED[name].files
    try:  # a folder that cannot be searched (no permission) raises here, from is_dir / is_file / stat
        if not root.is_dir():
            raise ValueError(f"dataset.data_dir(={str(root)!r}) is not a directory (it should hold "
                             f"{', '.join(f'{n}/' for n in PUBLISHED)} as their publishers distribute them)")
        missing = [f for f in files if not (folder / f).is_file()]
        if missing:
            raise ValueError(f"dataset folder {str(folder)!r} is missing {', '.join(missing)} (the publisher's "
                             f"layout: {', '.join(files)}; source {PUBLISHED[name].source})")
        stamp = tuple((f, (folder / f).stat().st_size, (folder / f).stat().st_mtime_ns) for f in files)
    except OSError as e:
        where = e.filename if e.filename is not None else folder
        raise ValueError(f"dataset folder {str(folder)!r} cannot be read: {where} ({e.strerror})") from None
    _check_files(name, str(folder.resolve()), stamp)
    return folder


@functools.lru_cache(maxsize=16)
def _check_files(name: str, folder: str, stamp: tuple) -> None:
    spec = PUBLISHED[name]
    for file, want in spec.files.items():
        path = Path(folder) / file
        try:
            got = _sha256(path)
        except OSError as e:
            raise ValueError(f"dataset folder {folder!r}: {file} cannot be read ({e.strerror})") from None
        if got != want:
            raise ValueError(f"dataset folder {folder!r}: {file} is not the published file "
                             f"({_what_differs(name, Path(folder))}sha256 {got[:12]}..., published {want[:12]}...): "
                             f"a damaged or partial copy, or another version; get it from {spec.source}")


def _what_differs(name: str, folder: Path) -> str:
    """The split counts that differ from the published ones, where the files parse: ``"train has
    10001 examples, not 10003; "``; empty when they cannot be read or all match."""
    try:
        splits, names = _read(name, folder)
    except (OSError, ValueError, KeyError, TypeError, IndexError, csv.Error, RecursionError):
        return ""  # a field over csv's limit, JSON nested too deeply: not the published file either
    spec = PUBLISHED[name]
    out = [f"{s} has {len(splits[s][0])} examples, not {n}" for s, n in spec.counts.items()
           if s in splits and len(splits[s][0]) != n]
    if len(names) != spec.labels:
        out.append(f"{len(names)} intents, not {spec.labels}")
    return "; ".join(out) + "; " if out else ""


def _read(name: str, folder: Path) -> tuple[dict[str, tuple[list[str], list[str]]], list[str]]:
    """split -> (texts, intent names), and the intent names in label order."""
    if name == "banking77":
        splits = {}
        for split in ("train", "test"):
            with open(folder / f"{split}.csv", newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            splits[split] = ([r["text"] for r in rows], [r["category"] for r in rows])
        with open(folder / "categories.json", encoding="utf-8") as f:
            names = json.load(f)
        return splits, list(names)
    with open(folder / "data_full.json", encoding="utf-8") as f:
        raw = json.load(f)
    splits = {s: ([t for t, _ in raw[s]], [y for _, y in raw[s]]) for s in ("train", "val", "test")}
    return splits, sorted(set(splits["train"][1]))


def load_published(name: str, data_dir: str | os.PathLike) -> TextData:
    """The train and test splits of ``data_dir/name`` (checked by :func:`check_folder`) as
    :class:`~fraq.federated.text_data.TextData`: BANKING77's train / test; CLINC150's train /
    test, in-scope only. ValueError, naming the folder, when a split does not have the
    published count or holds an intent outside the label list."""
    folder = check_folder(name, data_dir)
    spec = PUBLISHED[name]
    splits, names = _read(name, folder)
    index = {n: i for i, n in enumerate(names)}
    out = {}
    for split in ("train", "test"):
        texts, intents = splits[split]
        if len(texts) != spec.counts[split]:
            raise ValueError(f"dataset folder {str(folder)!r}: {split} has {len(texts)} examples, not the "
                             f"published {spec.counts[split]}")
        unknown = sorted(set(intents) - set(index))
        if unknown:
            raise ValueError(f"dataset folder {str(folder)!r}: {split} has intents outside the "
                             f"{len(names)} known ones, e.g. {unknown[0]!r}")
        out[split] = (texts, np.array([index[y] for y in intents], dtype=np.int64))
    if len(names) != spec.labels:
        raise ValueError(f"dataset folder {str(folder)!r}: {len(names)} intents, not the published {spec.labels}")
    return TextData(out["train"][0], out["train"][1], out["test"][0], out["test"][1], names)
