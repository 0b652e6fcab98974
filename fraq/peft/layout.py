"""Each adapted module's weight layout, read from the base model's module itself.

peft's LoRA update of a module is :math:`s B A`, (out, in), whatever the module. The base
weight a dense delta is added to is stored (out, in) by ``nn.Linear``, (in, out) by
transformers' ``Conv1D`` (GPT-2) and (num_embeddings, dim) by ``nn.Embedding`` (peft's
embedding update is :math:`(B A)^T`). peft decides ``fan_in_fan_out`` per layer from the
layer's type (``Conv1D``: True, ``Linear``: False, whatever the config says) and saves one
value in ``adapter_config.json``, the last one set: GPT-2 with its ``Conv1D`` layers and
its ``Linear`` ``score`` head saves False. So the saved flag cannot give the layout of a
module; :func:`module_layouts` reads each module's type from the base model instead.

The base model's classes are built on the meta device from its ``config.json`` (no weight
is read, nothing is downloaded: ``local_files_only``), trying the class peft's
``task_type`` implies, then the config's ``architectures``, then ``AutoModel``, and taking
the first in which every adapted module exists. A module of another type, a module the
base does not have, or a weight whose shape is not the update's in its layout is refused,
naming the module: a layout that is not known is never guessed. Only a delta file needs
this; an adapter keeps lora_A / lora_B as they are and peft applies the layout at load.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CONV1D", "EMBEDDING", "LINEAR", "module_layouts"]

LINEAR, CONV1D, EMBEDDING = "linear", "conv1d", "embedding"
"""The layouts: (out, in), (in, out) and (num_embeddings, dim) = (in, out)."""

_TASK_CLASSES = {"SEQ_CLS": "AutoModelForSequenceClassification", "CAUSAL_LM": "AutoModelForCausalLM",
                 "TOKEN_CLS": "AutoModelForTokenClassification", "QUESTION_ANS": "AutoModelForQuestionAnswering",
                 "SEQ_2_SEQ_LM": "AutoModelForSeq2SeqLM", "FEATURE_EXTRACTION": "AutoModel"}
"""peft's ``task_type`` -> the transformers class ``AutoPeftModel`` loads the base with."""


def module_layouts(base: str | os.PathLike | None, config: Mapping, shapes: Mapping[str, tuple[int, int]],
                   kinds: Mapping[str, str], where: Path) -> dict[str, str]:
    """module -> :data:`LINEAR`, :data:`CONV1D` or :data:`EMBEDDING`, from the base model's modules.

    Args:
        base: the base model's directory (or a name in the local Hugging Face cache); None:
            the adapter config's ``base_model_name_or_path``.
        config: the first client's adapter config (``task_type``, ``base_model_name_or_path``).
        shapes: module -> (m, n), the LoRA view (out, in) of its update.
        kinds: module -> ``"linear"`` or ``"embedding"`` (which factors peft saved).
        where: the adapter config file, for messages.

    Raises:
        ValueError: the base model cannot be read, lacks a module, has it of another type
            than ``nn.Linear``, ``Conv1D`` or ``nn.Embedding``, or of another shape.
    """
    model = _meta_model(base if base is not None else config.get("base_model_name_or_path"), config, shapes, where)
    import torch
    from transformers.pytorch_utils import Conv1D

    out = {}
    for name, (m, n) in shapes.items():
        mod = model.get_submodule(name)
        if isinstance(mod, Conv1D):
            layout, stored = CONV1D, (n, m)
        elif isinstance(mod, torch.nn.Embedding):
            layout, stored = EMBEDDING, (n, m)
        elif isinstance(mod, torch.nn.Linear):
            layout, stored = LINEAR, (m, n)
        else:
            raise ValueError(f"{where}: module {name!r} is a {type(mod).__name__} in the base model; a delta is "
                             f"written only for nn.Linear, Conv1D and nn.Embedding, whose layouts are known")
        if (layout == EMBEDDING) != (kinds[name] == "embedding"):
            raise ValueError(f"{where}: module {name!r} has {kinds[name]} LoRA factors but is a "
                             f"{type(mod).__name__} in the base model: the adapter is not of this base")
        if tuple(mod.weight.shape) != stored:
            raise ValueError(f"{where}: module {name!r}'s update is (out, in)=({m}, {n}), so its "
                             f"{type(mod).__name__} weight would be {stored}, but the base model's is "
                             f"{tuple(mod.weight.shape)}: the adapter is not of this base")
        out[name] = layout
    return out


def _meta_model(base: object, config: Mapping, shapes: Mapping, where: Path):
    """The base model built on the meta device, of the first candidate class that has every module."""
    hint = ("; pass the base model's directory (base=..., --base DIR): a delta is written in each module's "
            "base weight layout, which only the base model's module types give")
    if not isinstance(base, (str, os.PathLike)) or not str(base):
        raise ValueError(f"{where}: base_model_name_or_path(={base!r}) names no base model{hint}")
    try:
        import torch
        import transformers
        from transformers import AutoConfig
    except ImportError as e:
        raise ValueError(f"{where}: reading the base model's module types needs transformers ({e}){hint}") from None
    try:
        hf_config = AutoConfig.from_pretrained(str(base), local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{where}: the base model {str(base)!r} cannot be read ({first[:200]}){hint}") from None
    names = [_TASK_CLASSES.get(str(config.get("task_type"))), *(getattr(hf_config, "architectures", None) or []),
             "AutoModel"]
    tried = []
    for cls_name in dict.fromkeys(n for n in names if n):
        cls = getattr(transformers, cls_name, None)
        if cls is None:
            continue
        try:
            with warnings.catch_warnings(), torch.device("meta"):
                warnings.simplefilter("ignore")
                model = cls.from_config(hf_config) if cls_name.startswith("AutoModel") else cls(hf_config)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            tried.append(f"{cls_name} ({type(e).__name__})")
            continue
        missing = [m for m in shapes if not _has(model, m)]
        if not missing:
            return model
        tried.append(f"{cls_name} (no {missing[0]!r})")
    raise ValueError(f"{where}: no class of the base model {str(base)!r} has every adapted module; tried "
                     f"{', '.join(tried) or 'none'}{hint}")


def _has(model, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True
