"""peft's LoRA adapter format: its file names, its ``adapter_config.json`` and how peft reads it.

A directory written by ``PeftModel.save_pretrained`` holds :data:`CONFIG` and
:data:`WEIGHTS`; every tensor key starts with :data:`PREFIX`. Module k's scale is
:math:`\\alpha / r` (:math:`\\alpha / \\sqrt{r}` with ``use_rslora``), where r and alpha
come from ``rank_pattern`` / ``alpha_pattern`` when a key matches the module
(:func:`pattern_key`, a copy of peft 0.21.2's ``peft.utils.other.get_pattern_key``),
else from ``r`` / ``lora_alpha``. :func:`check_config` validates a config once, with
errors that name the file and echo the value, so every later lookup can trust it.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["CONFIG", "PREFIX", "WEIGHTS", "check_config", "config_rank_alpha", "exact_key", "module_scale",
           "output_config", "pattern_key"]

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
_BASE_REWRITING_INITS = ("pissa", "olora", "corda", "loftq")
_REFUSED = {
    "use_dora": "DoRA's magnitude normalization is not a sum of low-rank products",
    "lora_bias": "lora_B biases are not part of B @ A",
    "trainable_token_indices": "trainable tokens are not LoRA factors",
    "target_parameters": "LoRA on nn.Parameter (target_parameters) is not supported",
    "layer_replication": "replicated layers share weights across modules",
}
_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict = 60, 60, 6, 6
_show = _repr.repr


def pattern_key(patterns: Sequence[str], module: str) -> str | None:
    """The first key of ``patterns`` that peft's ``rank_pattern`` / ``alpha_pattern`` match
    applies to ``module``, or None.

    peft 0.21.2 (``peft.utils.other.get_pattern_key``) takes a key as a regular expression
    that must match a dotted suffix of the full module name: ``re.match(rf"(.*\\.)?({key})$",
    module)``. So ``"query"`` matches every ``*.query``, and ``"layer.1.query"`` matches
    ``encoder.layer.1.query`` but not ``encoder.layer.11.query``.
    """
    for key in patterns:
        if re.match(rf"(.*\.)?({key})$", module):
            return key
    return None


def exact_key(module: str) -> str:
    """A ``rank_pattern`` key that :func:`pattern_key` matches to ``module`` and nothing else.

    ``^`` after peft's optional ``(.*\\.)?`` prefix only matches at the start of the name.
    """
    return "^" + re.escape(module)


def config_rank_alpha(cfg: Mapping, module: str) -> tuple[object, object]:
    """(r, lora_alpha) that peft's config ``cfg`` gives ``module``: a matching ``rank_pattern`` /
    ``alpha_pattern`` key (:func:`pattern_key`) first, else ``r`` / ``lora_alpha``.
    Unchecked: pass a config :func:`check_config` accepted."""
    rank_pattern, alpha_pattern = cfg.get("rank_pattern") or {}, cfg.get("alpha_pattern") or {}
    rk, ak = pattern_key(rank_pattern, module), pattern_key(alpha_pattern, module)
    r = rank_pattern[rk] if rk is not None else cfg.get("r", 8)
    alpha = alpha_pattern[ak] if ak is not None else cfg.get("lora_alpha", 8)
    return r, alpha


def check_config(where: Path, cfg: object) -> None:
    """Refuse, naming ``where`` and echoing the value, a config peft's LoRA would not load
    or fraq cannot aggregate: not a JSON object, another peft type or a LoRA variant that
    is not a sum of B @ A products, r or a ``rank_pattern`` value that is not a positive
    int, alpha that is not a positive finite number, a pattern that is not an object of
    valid regular expressions, non-boolean switches."""
    if not isinstance(cfg, dict):
        text = json.dumps(cfg)
        raise ValueError(f"{where}: holds {text if len(text) <= 60 else text[:57] + '...'}, not a JSON object; a peft adapter config is "
                         f"a JSON object (LoraConfig's fields)")
    if cfg.get("peft_type") != "LORA":
        raise ValueError(f"{where}: peft_type(={_show(cfg.get('peft_type'))}) is not 'LORA'")
    for key, why in _REFUSED.items():
        if cfg.get(key):
            raise ValueError(f"{where}: {key}={_show(cfg[key])} is not supported: {why}")
    init = cfg.get("init_lora_weights", True)
    if str(init).lower().startswith(_BASE_REWRITING_INITS):
        raise ValueError(f"{where}: init_lora_weights={_show(init)} rewrites the base weights, "
                         f"so the adapter is relative to a modified base; save it converted "
                         f"(save_pretrained(..., path_initial_model_for_weight_conversion=...)) first")
    for key in ("use_rslora", "fan_in_fan_out"):
        if key in cfg and not isinstance(cfg[key], bool) and cfg[key] is not None:
            raise ValueError(f"{where}: {key}(={_show(cfg[key])}) must be true or false")
    _check_rank(where, "r", cfg.get("r", 8))
    _check_alpha(where, "lora_alpha", cfg.get("lora_alpha", 8))
    for name, check in (("rank_pattern", _check_rank), ("alpha_pattern", _check_alpha)):
        pattern = cfg.get(name)
        if pattern is None:
            continue
        if not isinstance(pattern, dict):
            raise ValueError(f"{where}: {name}(={_show(pattern)}) must be a JSON object mapping module-name "
                             f"patterns to values, got {type(pattern).__name__}")
        for key, value in pattern.items():
            try:
                re.compile(rf"(.*\.)?({key})$")
            except re.error as e:
                raise ValueError(f"{where}: {name} key {key!r} is not a valid regular expression ({e})") from None
            check(where, f"{name}[{key!r}]", value)


def _check_rank(where: Path, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {name}(={_show(value)}) has type {type(value).__name__}; "
                         f"a LoRA rank must be a positive integer")
    if value < 1:
        raise ValueError(f"{where}: {name}(={value}) must be a positive integer (peft refuses rank {value})")


def _check_alpha(where: Path, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {name}(={_show(value)}) has type {type(value).__name__}; "
                         f"lora_alpha must be a positive number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: {name}(={value}) must be a positive finite number")


def module_scale(where: Path, cfg: Mapping, module: str, rank: int) -> float:
    """The scale peft applies to ``module`` of a checked config, after checking that the
    config's r for it is the ``rank`` of its saved factors."""
    r, alpha = config_rank_alpha(cfg, module)
    if r != rank:
        raise ValueError(f"{where}: module {module!r} has rank {rank} in {WEIGHTS} but the config gives r={r}")
    return alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r


def output_config(first: Mapping, ranks: Mapping[str, int]) -> dict:
    """The config of an adapter with these per-module ranks and scale 1 everywhere: ``r``
    the most common rank, an exact ``rank_pattern`` key per other module, alpha = rank,
    no rsLoRA; the other fields are ``first``'s."""
    counts = Counter(ranks.values())
    r = max(counts, key=lambda p: (counts[p], p))
    cfg = dict(first)
    pattern = {exact_key(m): p for m, p in ranks.items() if p != r}
    cfg.update(r=r, lora_alpha=r, use_rslora=False, rank_pattern=pattern, alpha_pattern=dict(pattern),
               inference_mode=True)
    return cfg
