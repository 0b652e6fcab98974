"""Writing peft adapters, delta files and JSON reports: checked before any work, swapped in whole.

The one writer of peft adapter directories, used by ``fraq aggregate``
(:func:`fraq.peft.aggregate_adapters`) and by :func:`fraq.federated.export.export_peft`.
Each output goes through :mod:`fraq._files`: a directory is built beside its target and
exchanged with it in one ``renameat2(RENAME_EXCHANGE)``, a file is written beside its
target and renamed over it. So at every moment, whatever fails or is killed, the target
holds the complete old adapter or the complete new one, each loadable by peft.

The ``check_*`` functions run before any work (again just before the swap, in case the
path changed meanwhile). The rules:

- An existing output is replaced only with ``overwrite``; inputs are never written: an
  output equal to, inside, or containing an input directory is refused even with it.
- An adapter directory with other plain files beside the two adapter files keeps them (they
  are hard-linked, or copied, into the new directory before the swap); subdirectories or
  other entries there are refused, since the whole directory is replaced.
- A file output must not be an existing directory, and its directory must be writable.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from fraq._files import check_file_target, check_parent, default_mode, replacing_dir, replacing_file
from fraq.peft.config import CONFIG, WEIGHTS

__all__ = ["check_adapter_out", "check_file_out", "check_outside_inputs", "save_adapter", "write_adapter",
           "write_delta", "write_json"]


def check_outside_inputs(path: Path, inputs: Iterable[Path], what: str) -> None:
    """Refuse an output ``path`` that is, lies inside, or contains one of the ``inputs``
    (resolved: symbolic links followed), whatever ``overwrite`` says."""
    target = path.resolve()
    for src in inputs:
        real = Path(src).resolve()
        if target == real or real in target.parents:
            raise ValueError(f"{what}(={str(path)!r}) is inside the input adapter directory {str(src)!r}; "
                             f"an input is never written: choose another output path")
        if target in real.parents:
            raise ValueError(f"{what}(={str(path)!r}) contains the input adapter directory {str(src)!r}, which "
                             f"replacing it would delete: choose another output path")


def check_adapter_out(out: Path, overwrite: bool, inputs: Iterable[Path] = ()) -> list[str]:
    """Check an adapter output directory; return the names of the other plain files in it
    that the new directory keeps."""
    check_outside_inputs(out, inputs, "out")
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise ValueError(f"out(={str(out)!r}) exists and is not a directory")
        entries = sorted(os.listdir(out))
        if entries and not overwrite:
            raise ValueError(f"out(={str(out)!r}) exists and is not empty ({', '.join(entries[:4])}); pass "
                             f"overwrite=True (--overwrite) to replace its {CONFIG} and {WEIGHTS}")
        others = [e for e in entries if e not in (CONFIG, WEIGHTS)]
        odd = [e for e in others if (out / e).is_symlink() or not (out / e).is_file()]
        if odd:
            raise ValueError(f"out(={str(out)!r}) holds {odd[:4]}, which are not plain files; --overwrite replaces "
                             f"the directory whole and carries only plain files over: choose another output path")
        check_parent(out.resolve(), "out")
        return others
    check_parent(out, "out")
    return []


def check_file_out(path: Path, overwrite: bool, inputs: Iterable[Path], what: str,
                   taken: Iterable[Path] = ()) -> None:
    """Check a file output (the delta file, the JSON report); ``taken``: paths the other
    outputs of the same run write, which it must not be."""
    check_outside_inputs(path, inputs, what)
    for other in taken:
        if path.resolve() == Path(other).resolve():
            raise ValueError(f"{what}(={str(path)!r}) is {str(other)!r}, which this run writes too")
    check_file_target(path, what)  # a regular file or none (links followed), in a writable directory
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise ValueError(f"{what}(={str(path)!r}) exists; pass overwrite=True (--overwrite) to replace it")


def save_adapter(directory: Path, config: Mapping, tensors: Mapping[str, torch.Tensor]) -> None:
    """Write ``adapter_model.safetensors`` and ``adapter_config.json`` into ``directory``
    (created), as peft's ``save_pretrained`` does: metadata ``{"format": "pt"}``, the
    config as sorted, indented JSON. Not atomic by itself: write into the directory of
    :func:`write_adapter` or of :func:`fraq._files.replacing_dir`."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file(dict(tensors), str(directory / WEIGHTS), metadata={"format": "pt"})
    default_mode(directory / WEIGHTS)
    text = json.dumps(config, indent=2, sort_keys=True, allow_nan=False)
    (directory / CONFIG).write_text(text + "\n", encoding="utf-8")


def write_adapter(out: Path, config: Mapping, tensors: Mapping[str, torch.Tensor], overwrite: bool,
                  inputs: Iterable[Path] = ()) -> None:
    """Write an adapter directory ``out``: built beside it, then swapped in whole."""
    inputs = list(inputs)
    others = check_adapter_out(out, overwrite, inputs)  # again: the directory may have changed meanwhile
    with replacing_dir(out) as tmp:
        for name in others:
            _carry(out / name, tmp / name)
        save_adapter(tmp, config, tensors)


def _carry(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def write_delta(out: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str], overwrite: bool,
                inputs: Iterable[Path] = ()) -> None:
    """Write a safetensors file of dense deltas: beside ``out``, then renamed over it."""
    from safetensors.torch import save_file

    check_file_out(out, overwrite, list(inputs), "out")
    with replacing_file(out) as tmp:
        save_file(dict(tensors), str(tmp), metadata=dict(metadata))


def write_json(path: Path, obj: object, overwrite: bool, inputs: Iterable[Path] = ()) -> None:
    """Write ``obj`` as indented JSON: beside ``path``, then renamed over it."""
    check_file_out(path, overwrite, list(inputs), "json")
    text = json.dumps(obj, indent=2, allow_nan=False) + "\n"
    with replacing_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
