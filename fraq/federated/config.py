"""Configuration as data: ``configs/defaults.json`` plus one small override file per setting.

A setting is ``quick`` (the embedded default), ``smoke`` (it shrunk to under a minute),
``banking77`` or ``clinc150`` (the published data sets, scaled to this CPU),
``roberta`` or ``llama`` (the paper's), or
the path of a JSON file with the same shape; command-line flags override single keys
(``--set train.lr=1e-3`` for any of them). :func:`load_config` merges and validates;
every error names the key and the value.

Methods are registry names of :mod:`fraq.aggregators` with optional keyword options:
``"fraq:tau=0.80"``, ``"florist:tau=0.85"``, ``"fraq:rank=8,tau=null"``.

A setting is run over ``seeds`` (null: the one ``seed``) and over its ``variants``:
named sets of dotted overrides of the same experiment, e.g. ``{"homogeneous": {},
"heterogeneous": {"federated.ranks": [4, 16, 32, 64]}}``. :func:`runs` lists the
(variant, seed, configuration) of every run; each run's configuration has ``seed`` set
and is validated like the setting.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import re
from pathlib import Path

__all__ = ["CONFIG_DIR", "SETTINGS", "client_ranks", "load_config", "method_aggregator", "method_label", "parse_method",
           "runs", "seeds_of", "set_key", "validate"]

CONFIG_DIR = Path(__file__).with_name("configs")
SETTINGS = ("quick", "smoke", "banking77", "clinc150", "roberta", "llama")


_WHOLE = ("dataset", "variants")
"""Sections an override replaces whole instead of key by key."""


def _merge(base: dict, over: dict, where: str = "") -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if k.startswith("_"):
            continue
        if k not in out:
            raise ValueError(f"unknown config key {where + k!r}; known: {sorted(x for x in out if not x.startswith('_'))}")
        if isinstance(out[k], dict):
            if not isinstance(v, dict):
                raise ValueError(f"config key {where + k!r}(={v!r}) is a section: give an object, or set one of "
                                 f"its keys, e.g. {where + k}.{next(iter(out[k]), 'key')}=...")
            out[k] = _merge(out[k], v, f"{where}{k}.")
        else:
            out[k] = copy.deepcopy(v)
    return out


def _read(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"config file {str(path)!r} is not valid JSON: {e}") from None
    except OSError as e:
        raise ValueError(f"config file {str(path)!r} cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(path)!r} must hold a JSON object, got {type(data).__name__}")
    return data


def set_key(cfg: dict, dotted: str, value) -> None:
    """Set ``cfg["a"]["b"] = value`` for ``dotted = "a.b"``; the key must exist (``dataset.*`` may be new)."""
    parts = dotted.split(".")
    node = cfg
    for i, p in enumerate(parts[:-1]):
        if not isinstance(node.get(p), dict):
            raise ValueError(f"config key {'.'.join(parts[:i + 1])!r} (from {dotted!r}) is not a section")
        node = node[p]
    if parts[-1] not in node and parts[0] != "dataset":
        raise ValueError(f"unknown config key {dotted!r}")
    prefix = "".join(p + "." for p in parts[:-1])
    if isinstance(node.get(parts[-1]), dict) and dotted not in _WHOLE:  # a section: merged key by key
        node[parts[-1]] = _merge({parts[-1]: node[parts[-1]]}, {parts[-1]: value}, prefix)[parts[-1]]
    else:
        node[parts[-1]] = value


def load_config(setting: str = "quick", overrides: dict | None = None) -> dict:
    """The merged, validated configuration of ``setting`` with ``overrides`` (dotted keys) applied.

    ``setting``: one of :data:`SETTINGS` or a path to a JSON file of overrides.
    """
    if not isinstance(setting, str) or not setting:
        raise ValueError(f"config(={setting!r}) must be one of {list(SETTINGS)} or a JSON file path")
    base = _read(CONFIG_DIR / "defaults.json")
    path = CONFIG_DIR / f"{setting}.json" if setting in SETTINGS else Path(setting)
    if not path.is_file():
        raise ValueError(f"config(={setting!r}) is neither one of {list(SETTINGS)} nor an existing JSON file")
    over = _read(path)
    cfg = _merge(base, {k: v for k, v in over.items() if k not in _WHOLE})
    for key in _WHOLE:  # a data set or the variants replace the default ones whole
        if key in over:
            if not isinstance(over[key], dict):
                raise ValueError(f"config key {key!r} must be an object, got {over[key]!r}")
            cfg[key] = copy.deepcopy(over[key])
    cfg["setting"] = setting
    for key, value in (overrides or {}).items():
        if key in _WHOLE and isinstance(value, dict):
            cfg[key] = value
        else:
            set_key(cfg, key, value)
    validate(cfg)
    return cfg


def parse_method(spec: str) -> tuple[str, dict]:
    """``"fraq:tau=0.80,backend=householder"`` -> ``("fraq", {"tau": 0.8, "backend": "householder"})``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"method(={spec!r}) must be a non-empty string like 'fraq' or 'fraq:tau=0.80'")
    name, _, rest = spec.strip().partition(":")
    options = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, raw = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_]\w*", key.strip()):
            raise ValueError(f"method(={spec!r}): option {item!r} must be key=value")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw.strip()
        options[key.strip()] = value
    return name, options


def method_aggregator(spec: str, where: str = "method"):
    """The :class:`~fraq.aggregators.Aggregator` a method spec names, built with its options.

    The one check of a method spec, shared by the harness's :func:`validate`, its
    :class:`~fraq.federated.server.Method` and the Flower run config: an unknown name, an
    unknown option or a bad option value raises ValueError naming ``where``, the spec and
    the option, e.g. ``method(='fraq:tau=abc'): tau(='abc') must be a real number in (0, 1]``.
    Building an aggregator does no work (it only stores its checked options).
    """
    from fraq.aggregators import AGGREGATORS, get_aggregator

    try:
        name, options = parse_method(spec)  # its errors read "method(=...): ..."
    except ValueError as e:
        if where == "method":
            raise
        raise ValueError(f"{where}: {e}") from None
    if name not in AGGREGATORS:
        raise ValueError(f"{where}(={spec!r}): {name!r} is not one of {sorted(AGGREGATORS)}")
    try:
        return get_aggregator(name, **options)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}(={spec!r}): {e}") from None


def method_label(spec: str) -> str:
    """A file-name-safe label of a method spec: ``fraq:tau=0.80`` -> ``fraq-tau0.80``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", spec.strip().replace("=", "")).strip("-")


def _pos_int(cfg: dict, key: str, minimum: int = 1, allow_none: bool = False) -> None:
    sec, _, name = key.partition(".")
    v = cfg[sec][name] if name else cfg[sec]
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{key}(={v!r}) must be an int >= {minimum}" + (" or null" if allow_none else ""))


def _pos_real(cfg: dict, key: str, zero_ok: bool = False) -> None:
    sec, _, name = key.partition(".")
    v = cfg[sec][name]
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or \
            not (v >= 0 if zero_ok else v > 0):
        raise ValueError(f"{key}(={v!r}) must be a finite {'non-negative' if zero_ok else 'positive'} number")


def validate(cfg: dict) -> None:
    """Check every key a run reads; raise ValueError naming the key and its value.

    Runs before any model or data is loaded: every method is built with its options
    (:func:`method_aggregator`), numbers must be finite and in range, ``model.device``
    must exist on this machine and the ``dataset`` section must name a loadable source.
    """
    from fraq.federated.dataset import check_dataset_spec
    from fraq.federated.model import resolve_device

    _pos_int(cfg, "seed", 0)
    seeds = cfg["seeds"]
    if seeds is not None and (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds) or
                              not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
        raise ValueError(f"seeds(={seeds!r}) must be null (the one seed) or a non-empty list of distinct ints >= 0")
    variants = cfg["variants"]
    if not isinstance(variants, dict) or not variants or \
            not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", k) for k in variants):
        raise ValueError(f"variants(={variants!r}) must be a non-empty object of named overrides, names of letters, "
                         f"digits, '.', '_' and '-', e.g. {{\"homogeneous\": {{}}}}")
    for name, over in variants.items():
        if not isinstance(over, dict) or any(k.split(".")[0] in ("seed", "seeds", "variants", "methods")
                                             for k in over):
            raise ValueError(f"variants.{name}(={over!r}) must be an object of dotted config keys (not seed, seeds, "
                             f"variants or methods), e.g. {{\"federated.ranks\": [4, 16, 32, 64]}}")
    _pos_int(cfg, "threads", 1, allow_none=True)
    m = cfg["model"]
    if not isinstance(m["name"], str) or not m["name"]:
        raise ValueError(f"model.name(={m['name']!r}) must be a model name or path")
    if not isinstance(m["target_modules"], list) or not m["target_modules"] or \
            not all(isinstance(t, str) for t in m["target_modules"]):
        raise ValueError(f"model.target_modules(={m['target_modules']!r}) must be a non-empty list of names")
    lt = m["layers_to_transform"]
    if lt is not None and (not isinstance(lt, list) or not lt or
                           not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in lt)):
        raise ValueError(f"model.layers_to_transform(={lt!r}) must be null or a list of layer indices >= 0")
    if m["pooling"] not in ("mean", "first", "last"):
        raise ValueError(f"model.pooling(={m['pooling']!r}) must be 'mean', 'first' or 'last'")
    _pos_int(cfg, "model.max_length", 2)
    if m["dtype"] not in ("float32", "bfloat16", "float16", "float64"):
        raise ValueError(f"model.dtype(={m['dtype']!r}) must be float32, bfloat16, float16 or float64")
    if m["layers_pattern"] is not None and (not isinstance(m["layers_pattern"], str) or not m["layers_pattern"]):
        raise ValueError(f"model.layers_pattern(={m['layers_pattern']!r}) must be null or a module name, e.g. 'layer'")
    resolve_device(m["device"])
    if not isinstance(m["cache_prefix"], bool):
        raise ValueError(f"model.cache_prefix(={m['cache_prefix']!r}) must be true or false")
    if m["cache_prefix"] and lt is None:
        raise ValueError("model.cache_prefix needs model.layers_to_transform (the layers below the first one are cached)")
    p = cfg["partition"]
    if p["scheme"] not in ("dirichlet", "pathological", "iid"):
        raise ValueError(f"partition.scheme(={p['scheme']!r}) must be 'dirichlet', 'pathological' or 'iid'")
    _pos_real(cfg, "partition.alpha")
    if isinstance(p["min_size"], bool) or not isinstance(p["min_size"], int) or p["min_size"] < 1:
        raise ValueError(f"partition.min_size(={p['min_size']!r}) must be an int >= 1: every client trains on its "
                         f"own examples each round, so a client without any cannot take part (a Dirichlet draw "
                         f"with min_size 0 leaves some clients empty)")
    f = cfg["federated"]
    _pos_int(cfg, "federated.clients")
    _pos_int(cfg, "federated.rounds")
    _pos_int(cfg, "federated.head_rounds", 0)
    _pos_int(cfg, "federated.eval_every")
    _pos_int(cfg, "federated.save_adapters_round", 1, allow_none=True)
    if f["save_adapters_round"] is not None and f["save_adapters_round"] > f["rounds"]:
        raise ValueError(f"federated.save_adapters_round(={f['save_adapters_round']}) exceeds "
                         f"federated.rounds(={f['rounds']})")
    K = f["clients"]
    ranks = f["ranks"]
    if not isinstance(ranks, list) or not ranks or \
            not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in ranks):
        raise ValueError(f"federated.ranks(={ranks!r}) must be a non-empty list of ints >= 1")
    if len(ranks) > K:
        raise ValueError(f"federated.ranks has {len(ranks)} entries for federated.clients(={K}): give at most K "
                         f"(a shorter list repeats: clients 0, 1, ... take ranks[k % len(ranks)])")
    alphas = f["alphas"]
    if alphas is not None and (not isinstance(alphas, list) or len(alphas) != len(ranks) or
                               not all(isinstance(a, numbers.Real) and not isinstance(a, bool) and math.isfinite(a)
                                       and a > 0 for a in alphas)):
        raise ValueError(f"federated.alphas(={alphas!r}) must be null (alpha = 2 r) or one finite positive number per "
                         f"entry of federated.ranks(={ranks})")
    t = cfg["train"]
    _pos_int(cfg, "train.steps", 0)
    _pos_int(cfg, "train.batch_size")
    _pos_real(cfg, "train.lr")
    _pos_real(cfg, "train.head_lr")
    _pos_real(cfg, "train.weight_decay", zero_ok=True)
    if not isinstance(t["use_rslora"], bool):
        raise ValueError(f"train.use_rslora(={t['use_rslora']!r}) must be true or false")
    methods = cfg["methods"]
    if not isinstance(methods, list) or not methods:
        raise ValueError(f"methods(={methods!r}) must be a non-empty list")
    labels = set()
    for spec in methods:
        method_aggregator(spec)
        label = method_label(spec)
        if label in labels:
            raise ValueError(f"methods lists {spec!r} twice")
        labels.add(label)
    check_dataset_spec(cfg["dataset"])


def seeds_of(cfg: dict) -> list[int]:
    """The seeds a setting runs: ``seeds``, or ``[seed]`` when that is null."""
    return list(cfg["seeds"]) if cfg.get("seeds") is not None else [cfg["seed"]]


def runs(cfg: dict) -> list[tuple[str, int, dict]]:
    """(variant, seed, configuration) of every run of the validated setting ``cfg``, variants
    in their order, seeds in theirs. A run's configuration is ``cfg`` with the variant's
    overrides applied and ``seed`` set; it is validated (a bad override raises ValueError
    naming the variant)."""
    out = []
    for name, over in cfg["variants"].items():
        base = copy.deepcopy(cfg)
        try:
            for key, value in over.items():
                set_key(base, key, value)
            validate(base)
        except ValueError as e:
            hint = ""
            if "federated.ranks" in over and "entries for federated.clients" in str(e):
                hint = (f"; give more clients (--clients {len(over['federated.ranks'])}) or leave the variant out "
                        f"(--variants {' '.join(v for v in cfg['variants'] if v != name) or 'NAME'})")
            raise ValueError(f"variants.{name}: {e}{hint}") from None
        for seed in seeds_of(cfg):
            out.append((name, seed, {**copy.deepcopy(base), "seed": seed}))
    return out


def client_ranks(cfg: dict) -> tuple[list[int], list[float]]:
    """Per-client LoRA ranks and alphas: the ``federated.ranks`` pattern repeated to K clients, alpha = 2 r by default."""
    f = cfg["federated"]
    K, ranks = f["clients"], f["ranks"]
    alphas = f["alphas"] or [2 * r for r in ranks]
    reps = -(-K // len(ranks))
    return (ranks * reps)[:K], [float(a) for a in (alphas * reps)[:K]]
