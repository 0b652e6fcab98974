"""peft's LoRA adapter format: its file names, its ``adapter_config.json`` and how peft reads it.

A directory written by ``PeftModel.save_pretrained`` holds :data:`CONFIG` and
:data:`WEIGHTS`; every tensor key starts with :data:`PREFIX`. Module k's scale is
:math:`\\alpha / r` (:math:`\\alpha / \\sqrt{r}` with ``use_rslora``), where r and alpha
come from ``rank_pattern`` / ``alpha_pattern`` when a key matches the module
(:func:`pattern_key`, a copy of peft 0.21.2's ``peft.utils.other.get_pattern_key``),
else from ``r`` / ``lora_alpha``. :func:`check_config` validates a config once, with
errors that name the file and echo the value, so every later lookup can trust it; it
refuses any option it does not know to leave B @ A a plain low-rank update of the base.
BD-LoRA (``use_bdlora``) saves a block-diagonal factor in compact form;
:func:`bdlora_block` says which, and the reader expands it, so it is aggregated exactly.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["CONFIG", "PREFIX", "WEIGHTS", "bdlora_block", "check_config", "config_rank_alpha", "exact_key",
           "module_scale", "output_config", "pattern_key"]

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
_INITS = (True, False, "gaussian", "eva", "orthogonal", "mica")
"""``init_lora_weights`` values known to draw the factors only: the base weights stay as
they were, so the saved adapter is an update of the base model it names."""
_BASE_REWRITING_INITS = ("pissa", "olora", "corda", "loftq", "lora_ga")
"""Initializations known to rewrite the base weights (peft 0.21.2's ``pissa_init``,
``olora_init``, ``corda_init``, ``loftq_init``, ``lora_ga_init``)."""
_REFUSED = {
    "use_dora": "DoRA's magnitude normalization is not a sum of low-rank products",
    "lora_bias": "lora_B biases are not part of B @ A",
    "trainable_token_indices": "trainable tokens are not LoRA factors",
    "target_parameters": "LoRA on nn.Parameter (target_parameters) is not supported",
    "layer_replication": "replicated layers share weights across modules",
    "use_qalora": "QALoRA pools the input before lora_A, so its update is not B @ A on the input",
    "velora_config": "VeLoRA compresses the activations lora_A sees, which is not B @ A",
    "alora_invocation_tokens": "activated LoRA applies B @ A only after its invocation tokens",
    "monteclora_config": "MonteCLoRA samples perturbations of lora_A, which is not one B @ A",
    "arrow_config": "Arrow routes each token among several adapters",
    "kasa_config": "KaSA adds a singular-value component and rewrites the base weights",
    "megatron_config": "Megatron's parallel LoRA layers are sharded across ranks",
    "ensure_weight_tying": "tied adapters share factors across modules",
}
"""Options that change what an adapter's B @ A means: refused whenever they are on."""
_NEUTRAL = frozenset({
    "task_type", "peft_type", "auto_mapping", "peft_version", "base_model_name_or_path", "revision",
    "inference_mode", "target_modules", "exclude_modules", "lora_dropout", "modules_to_save",
    "layers_to_transform", "layers_pattern", "megatron_core", "runtime_config", "qalora_group_size",
    "loftq_config", "eva_config", "corda_config", "lora_ga_config",
})
"""Fields that do not change a saved adapter's update: which modules are adapted (the
saved tensors say that), training-time settings, and the settings of an initialization or
variant, which is refused (or known to leave B @ A alone) by its own switch."""
_HANDLED = frozenset({"r", "lora_alpha", "use_rslora", "rank_pattern", "alpha_pattern", "fan_in_fan_out", "bias",
                      "init_lora_weights", "use_bdlora"})
"""Fields read here: scales, layout, biases (``bias`` trains base biases, saved as full
tensors), the initialization and BD-LoRA's block-diagonal factors."""
_BDLORA_KEYS = frozenset({"target_modules_bd_a", "target_modules_bd_b", "nblocks", "match_strict"})
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
    valid regular expressions, non-boolean switches.

    The rule refuses what it does not know, since peft adds options every release: every
    field is either read here, known not to change the saved update (:data:`_NEUTRAL`), or
    refused when set (:data:`_REFUSED`); any other field that is set (not null, false or
    empty) is refused, and so is an ``init_lora_weights`` outside :data:`_INITS` (those
    known to rewrite the base, PiSSA, OLoRA, CorDA, LoftQ and LoRA-GA, with how to convert)."""
    if not isinstance(cfg, dict):
        text = json.dumps(cfg, allow_nan=False)
        raise ValueError(f"{where}: holds {text if len(text) <= 60 else text[:57] + '...'}, not a JSON object; a peft adapter config is "
                         f"a JSON object (LoraConfig's fields)")
    if cfg.get("peft_type") != "LORA":
        raise ValueError(f"{where}: peft_type(={_show(cfg.get('peft_type'))}) is not 'LORA'")
    for key, why in _REFUSED.items():
        if cfg.get(key):
            raise ValueError(f"{where}: {key}={_show(cfg[key])} is not supported: {why}")
    unknown = [k for k in cfg if k not in _REFUSED and k not in _NEUTRAL and k not in _HANDLED
               and cfg[k] not in (None, False, "") and cfg[k] != {} and cfg[k] != []]
    if unknown:
        k = unknown[0]
        raise ValueError(f"{where}: {k}={_show(cfg[k])} is a LoRA option fraq does not know; an option can change "
                         f"what B @ A means (a variant, a base-rewriting initialization), so unknown ones that are "
                         f"set are refused rather than merged as plain LoRA")
    init = cfg.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower().startswith(_BASE_REWRITING_INITS):
        raise ValueError(f"{where}: init_lora_weights={_show(init)} rewrites the base weights, "
                         f"so the adapter is relative to a modified base; save it converted "
                         f"(save_pretrained(..., path_initial_model_for_weight_conversion=...)) first")
    if not any(init is v for v in _INITS if isinstance(v, bool)) and not (isinstance(init, str) and init in _INITS):
        raise ValueError(f"{where}: init_lora_weights={_show(init)} is not an initialization fraq knows to "
                         f"leave the base weights alone ({', '.join(map(repr, _INITS))}); refused")
    if cfg.get("bias", "none") not in ("none", "all", "lora_only"):
        raise ValueError(f"{where}: bias(={_show(cfg.get('bias'))}) must be 'none', 'all' or 'lora_only'")
    _check_bdlora(where, cfg.get("use_bdlora"))
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


def _check_bdlora(where: Path, bd: object) -> None:
    """``use_bdlora``: None, or BdLoraConfig's fields with an int ``nblocks`` >= 1."""
    if bd is None:
        return
    if not isinstance(bd, dict) or not set(bd) <= _BDLORA_KEYS:
        extra = sorted(set(bd) - _BDLORA_KEYS) if isinstance(bd, dict) else bd
        raise ValueError(f"{where}: use_bdlora(={_show(bd)}) is not a BD-LoRA config fraq knows ({_show(extra)}); "
                         f"refused")
    nb = bd.get("nblocks", 1)
    if isinstance(nb, bool) or not isinstance(nb, int) or nb < 1:
        raise ValueError(f"{where}: use_bdlora.nblocks(={_show(nb)}) must be a positive integer")
    for key in ("target_modules_bd_a", "target_modules_bd_b"):
        pats = bd.get(key)
        if pats is not None and (not isinstance(pats, list) or not all(isinstance(x, str) for x in pats)):
            raise ValueError(f"{where}: use_bdlora.{key}(={_show(pats)}) must be a list of module-name parts")


def bdlora_block(cfg: Mapping, module: str) -> tuple[str, int] | None:
    """("A" or "B", nblocks) when BD-LoRA saved ``module``'s lora_A (or lora_B) block-diagonal in
    compact form, else None. peft 0.21.2 (``BdLoraLinearVariant.init``) makes a factor
    block-diagonal when one of its patterns is a substring of the module name."""
    bd = cfg.get("use_bdlora")
    if not bd:
        return None
    for side, key in (("A", "target_modules_bd_a"), ("B", "target_modules_bd_b")):
        if any(p in module for p in bd.get(key) or ()):
            return side, bd.get("nblocks", 1)
    return None


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
    if "use_bdlora" in cfg:  # the factors written are dense: a sum of block-diagonal A's is not block-diagonal
        cfg["use_bdlora"] = None
    return cfg
