"""Configuration as data: ``configs/defaults.json`` plus one small override file per setting.

A setting is ``quick`` (the embedded default), ``smoke`` (it shrunk to under a minute),
``banking77`` or ``clinc150`` (the published data sets, scaled to this CPU),
``roberta`` or ``llama`` (the paper's), or
the path of a JSON file with the same shape; command-line flags override single keys
(``--set train.lr=1e-3`` for any of them). :func:`load_config` merges and validates;
every error names the key and the value.

Methods are registry names of :mod:`fraq.aggregators` with optional keyword options, in
the grammar of :class:`fraq.methods.MethodSpec`: ``"fraq:tau=0.80"``, ``"florist:tau=0.85"``,
``"fraq:rank=8,tau=null"``, ``"fraq:backend=cholesky,tau=0.9"``. Each is parsed once, where
the configuration is checked (:class:`Config`); the dictionary :func:`load_config` returns
holds the parsed :class:`~fraq.methods.MethodSpec` values under ``methods``, and everything
after it (the variants' and points' checks, the runs, the Flower apps) carries those values
and never reads the text a second time.

A setting is run over ``seeds`` (null: the one ``seed``) and over its ``variants``:
named sets of dotted overrides of the same experiment, e.g. ``{"homogeneous": {},
"heterogeneous": {"federated.ranks": [4, 16, 32, 64]}}``. :func:`runs` lists the
(variant, seed, configuration) of every run; each run's configuration has ``seed`` set
and is validated like the setting.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, fields
from pathlib import Path

from fraq.federated.sections import Federated, Model, Partition, Train, check_index_list, check_int
from fraq.methods import MethodSpec

__all__ = ["CONFIG_DIR", "SETTINGS", "Config", "client_ranks", "load_config", "method_aggregator", "method_label", "parse_method",
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
    cfg["methods"] = list(validate(cfg).methods)  # parsed once, here; carried from here on
    return cfg


def parse_method(spec: str | MethodSpec) -> tuple[str, dict]:
    """``"fraq:tau=0.80,backend=householder"`` -> ``("fraq", {"tau": 0.8, "backend": "householder"})``
    (:meth:`fraq.methods.MethodSpec.parse`, the one grammar)."""
    parsed = MethodSpec.parse(spec)
    return parsed.name, parsed.kwargs


def method_aggregator(spec: str | MethodSpec, where: str = "method"):
    """The :class:`~fraq.aggregators.Aggregator` a method spec names, built with its options.

    The one check of a method spec, shared by the harness's :func:`validate`, its
    :class:`~fraq.federated.server.MethodSetup` and the Flower run config: an unknown name,
    an unknown option or a bad option value raises ValueError naming ``where``, the spec and
    the option, e.g. ``method(='fraq:tau=abc'): tau(='abc') must be a real number in (0, 1]``.
    A :class:`~fraq.methods.MethodSpec` is used as it is; text is parsed first (a caller
    holding text is a front door). Building an aggregator does no work (it only stores its
    checked options).
    """
    from fraq.aggregators import AGGREGATORS, get_aggregator

    if not isinstance(spec, MethodSpec):
        try:
            spec = MethodSpec.parse(spec)  # its errors read "method(=...): ..."
        except ValueError as e:
            if where == "method":
                raise
            raise ValueError(f"{where}: {e}") from None
    text = str(spec)  # messages echo the spec as written
    if spec.name not in AGGREGATORS:
        raise ValueError(f"{where}(={text!r}): {spec.name!r} is not one of {sorted(AGGREGATORS)}")
    try:
        return get_aggregator(spec.name, **spec.kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}(={text!r}): {e}") from None


def method_label(spec: str | MethodSpec) -> str:
    """A file-name-safe label of a method spec: ``fraq:tau=0.80`` -> ``fraq-tau0.80``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(spec).strip().replace("=", "")).strip("-")


_SECTIONS = {"model": Model, "partition": Partition, "federated": Federated, "train": Train}


@dataclass(frozen=True)
class Config:
    """A setting's configuration, checked: every key a run reads, each section a frozen value.

    Built from the merged dictionary (:meth:`of`); its defaults are ``configs/defaults.json``
    alone, so a key has one default wherever it is read. Checks run in the order of the
    fields, so the first bad key is the one reported.
    """

    seed: int
    seeds: list | None
    variants: dict
    threads: int | None
    model: Model
    partition: Partition
    federated: Federated
    train: Train
    methods: tuple[MethodSpec, ...]
    dataset: dict

    @classmethod
    def of(cls, cfg: dict) -> Config:
        """The checked configuration of a merged dictionary (sections as dictionaries);
        ValueError naming the key and its value."""
        return cls(**{f.name: cfg[f.name] for f in fields(cls)})

    def __post_init__(self):
        from fraq.federated.dataset import check_dataset_spec

        check_int("seed", self.seed, 0)
        seeds = self.seeds
        if seeds is not None and (not check_index_list(seeds, 0) or len(set(seeds)) != len(seeds)):
            raise ValueError(f"seeds(={seeds!r}) must be null (the one seed) or a non-empty list of distinct "
                             f"ints >= 0")
        variants = self.variants
        if not isinstance(variants, dict) or not variants or \
                not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", k) for k in variants):
            raise ValueError(f"variants(={variants!r}) must be a non-empty object of named overrides, names of "
                             f"letters, digits, '.', '_' and '-', e.g. {{\"homogeneous\": {{}}}}")
        for name, over in variants.items():
            if not isinstance(over, dict) or any(k.split(".")[0] in ("seed", "seeds", "variants", "methods")
                                                 for k in over):
                raise ValueError(f"variants.{name}(={over!r}) must be an object of dotted config keys (not seed, "
                                 f"seeds, variants or methods), e.g. {{\"federated.ranks\": [4, 16, 32, 64]}}")
        check_int("threads", self.threads, 1, allow_none=True)
        for key, section in _SECTIONS.items():  # a section given as a dictionary is checked here, in order
            value = getattr(self, key)
            if isinstance(value, dict):
                object.__setattr__(self, key, section(**value))
        methods = self.methods
        if not isinstance(methods, (list, tuple)) or not methods:
            raise ValueError(f"methods(={methods!r}) must be a non-empty list")
        specs, labels = [], set()
        for given in methods:  # text is parsed here, once; a spec is carried as it is
            spec = given if isinstance(given, MethodSpec) else MethodSpec.parse(given)
            method_aggregator(spec)
            label = method_label(spec)
            if label in labels:
                raise ValueError(f"methods lists {str(spec)!r} twice")
            labels.add(label)
            specs.append(spec)
        object.__setattr__(self, "methods", tuple(specs))
        check_dataset_spec(self.dataset)


def validate(cfg: dict) -> Config:
    """Check every key a run reads (:class:`Config`); raise ValueError naming the key and its value.

    Runs before any model or data is loaded: every method is built with its options
    (:func:`method_aggregator`), numbers must be finite and in range, ``model.device``
    must exist on this machine and the ``dataset`` section must name a loadable source.
    """
    return Config.of(cfg)


def seeds_of(cfg: dict) -> list[int]:
    """The seeds a setting runs: ``seeds``, or ``[seed]`` when that is null."""
    return list(cfg["seeds"]) if cfg.get("seeds") is not None else [cfg["seed"]]


def _check_variant(cfg: dict) -> None:
    """The checks of :class:`Config` on every key a variant may override: all but ``seed``,
    ``seeds``, ``variants`` and ``methods``, which :class:`Config` refuses in a variant (the
    methods were checked with the setting, and are carried as they are)."""
    from fraq.federated.dataset import check_dataset_spec

    check_int("threads", cfg["threads"], 1, allow_none=True)
    for key, section in _SECTIONS.items():
        section(**cfg[key])
    check_dataset_spec(cfg["dataset"])


def runs(cfg: dict) -> list[tuple[str, int, dict]]:
    """(variant, seed, configuration) of every run of the validated setting ``cfg``, variants
    in their order, seeds in theirs. A run's configuration is ``cfg`` with the variant's
    overrides applied and ``seed`` set; what a variant overrides is validated (a bad override
    raises ValueError naming the variant)."""
    out = []
    for name, over in cfg["variants"].items():
        base = copy.deepcopy(cfg)
        try:
            for key, value in over.items():
                set_key(base, key, value)
            _check_variant(base)
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
