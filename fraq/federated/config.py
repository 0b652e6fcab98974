"""A setting's configuration as one frozen, checked value: :class:`Config`, its variants and runs.

:func:`load_config` builds it from the configuration files and the command line's dotted
overrides (``--set train.lr=1e-3``), merged as one dictionary by
:mod:`fraq.federated.config_files` (the settings, :data:`SETTINGS`: ``quick``, ``smoke``,
``banking77``, ``clinc150``, ``roberta``, ``llama``, or a JSON file of the same shape), and
checks every key; every error names the key and the value. Nothing after :class:`Config`
reads the configuration as a dictionary: everything reads its attributes.

Methods are registry names of :mod:`fraq.aggregators` with optional keyword options, in
the grammar of :class:`fraq.methods.MethodSpec`: ``"fraq:tau=0.80"``, ``"florist:tau=0.85"``,
``"fraq:rank=8,tau=null"``, ``"fraq:backend=cholesky,tau=0.9"``. Each is parsed and checked
once, where the configuration is built (:class:`Config`, by
:func:`~fraq.federated.method_specs.method_aggregator`); ``Config.methods`` holds the
parsed :class:`~fraq.methods.MethodSpec` values, and everything after it (the variants,
the points, the runs, the Flower apps) carries those values and never reads the text a
second time.

A setting is run over ``seeds`` (null: the one ``seed``) and over its ``variants``:
named sets of dotted overrides of the same experiment, e.g. ``{"homogeneous": {},
"heterogeneous": {"federated.ranks": [4, 16, 32, 64]}}``. :func:`runs` lists the
:class:`Run` (variant, seed, configuration) of every run; each run's configuration is the
setting's with the variant's overrides applied and ``seed`` set (:meth:`Config.override`,
which checks again only the keys it changes). The command line's changes to the variants
(:meth:`Config.only_variants`, :meth:`Config.ranks_given`, :meth:`Config.clients_given`)
are here too, beside the checks they must pass.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from dataclasses import dataclass, fields

from fraq.federated.config_files import CONFIG_DIR, SETTINGS, apply_overrides, defaults_comments, merged
from fraq.federated.config_sections import Federated, Model, Partition, Train, check_index_list, check_int
from fraq.federated.method_specs import method_aggregator, method_label, parse_method
from fraq.methods import MethodSpec

__all__ = ["CONFIG_DIR", "SETTINGS", "Config", "Run", "load_config", "method_aggregator", "method_label",
           "parse_method", "runs"]
"""The configuration's names, the files' (:mod:`fraq.federated.config_files`) and the method
checks' (:mod:`fraq.federated.method_specs`) among them, as one front door."""


def load_config(setting: str = "quick", overrides: dict | None = None) -> Config:
    """The frozen, checked :class:`Config` of ``setting`` with ``overrides`` (dotted keys) applied.

    ``setting``: one of :data:`SETTINGS` or a path to a JSON file of overrides
    (:func:`fraq.federated.config_files.merged`). Raises ValueError naming the key and its
    value before anything is loaded.
    """
    return Config.of(merged(setting, overrides))


_SECTIONS = {"model": Model, "partition": Partition, "federated": Federated, "train": Train}

_SETTING_ONLY = ("seeds", "variants", "methods")
"""Keys of a setting that are no part of one run's record (a run has one seed, one variant
and one method, recorded beside its configuration)."""


@dataclass(frozen=True)
class Config:
    """A setting's configuration, checked: every key a run reads, each section a frozen value.

    Built by :func:`load_config` (from the merged dictionary, :meth:`of`); its defaults are
    ``configs/defaults.json`` alone, so a key has one default wherever it is read. The
    fields are in the order of that file, ``setting`` (the setting's name or file) last;
    checks run in that order, so the first bad key is the one reported, each ValueError
    naming the key and its value. A changed configuration is a new one
    (:meth:`override`); the result files record :meth:`to_record`.
    """

    seed: int
    seeds: list | None
    variants: dict
    threads: int | None
    model: Model
    dataset: dict
    partition: Partition
    federated: Federated
    train: Train
    methods: tuple[MethodSpec, ...]
    setting: str

    @classmethod
    def of(cls, cfg: dict) -> Config:
        """The checked configuration of a merged dictionary (sections as dictionaries);
        ValueError naming the key and its value."""
        missing = [f.name for f in fields(cls) if f.name not in cfg]
        if missing:
            raise ValueError(f"configuration lacks {missing}")
        return cls(**{f.name: cfg[f.name] for f in fields(cls)})

    def __post_init__(self):
        self._check([f.name for f in fields(self)])

    def _check(self, keys: list[str]) -> None:
        """Check ``keys`` (in the order of the fields); a section or the methods given as
        plain values are turned into their frozen forms here."""
        for key in keys:
            getattr(self, f"_check_{key}")()
        if "model" in keys or "federated" in keys:
            self._check_ranks_fit()

    def _check_ranks_fit(self):
        limits = self.model.limits()
        if limits is not None and max(self.federated.ranks) > limits.max_rank:
            raise ValueError(f"federated.ranks(={self.federated.ranks}) has {max(self.federated.ranks)}, above "
                             f"{limits.max_rank}, the {limits.max_rank_why}: a LoRA update B @ A of an (m, n) "
                             f"weight has rank at most min(m, n)")

    def _check_seed(self):
        check_int("seed", self.seed, 0)

    def _check_seeds(self):
        seeds = self.seeds
        if seeds is not None and (not check_index_list(seeds, 0) or len(set(seeds)) != len(seeds)):
            raise ValueError(f"seeds(={seeds!r}) must be null (the one seed) or a non-empty list of distinct "
                             f"ints >= 0")

    def _check_variants(self):
        variants = self.variants
        if not isinstance(variants, dict) or not variants or \
                not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", k) for k in variants):
            raise ValueError(f"variants(={variants!r}) must be a non-empty object of named overrides, names of "
                             f"letters, digits, '.', '_' and '-', e.g. {{\"homogeneous\": {{}}}}")
        for name, over in variants.items():
            if not isinstance(over, dict) or any(k.split(".")[0] in ("seed", "seeds", "variants", "methods", "setting")
                                                 for k in over):
                raise ValueError(f"variants.{name}(={over!r}) must be an object of dotted config keys (not seed, "
                                 f"seeds, variants, methods or setting), e.g. {{\"federated.ranks\": [4, 16, 32, 64]}}")

    def _check_threads(self):
        check_int("threads", self.threads, 1, allow_none=True)
        cores = os.cpu_count() or 1
        if self.threads is not None and self.threads > cores:
            raise ValueError(f"threads(={self.threads}) exceeds {cores}, this machine's CPU count (os.cpu_count()): "
                             f"torch's threads beyond its cores only wait on one another")

    def _section(self, key: str):
        value, section = getattr(self, key), _SECTIONS[key]
        if isinstance(value, dict):
            object.__setattr__(self, key, section(**value))
        elif not isinstance(value, section):
            raise ValueError(f"{key}(={value!r}) must be an object of {key} keys")

    def _check_model(self):
        self._section("model")

    def _check_dataset(self):
        from fraq.federated.dataset import check_dataset_spec

        check_dataset_spec(self.dataset)

    def _check_partition(self):
        self._section("partition")

    def _check_federated(self):
        self._section("federated")

    def _check_train(self):
        self._section("train")

    def _check_methods(self):
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

    def _check_setting(self):
        if not isinstance(self.setting, str) or not self.setting:
            raise ValueError(f"setting(={self.setting!r}) must be one of {list(SETTINGS)} or a JSON file path")

    def _as_dict(self) -> dict:
        """The configuration as the merged dictionary it was built from: sections as
        dictionaries, the methods as their specs (a copy: nothing of it is shared)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = (dataclasses.asdict(value) if dataclasses.is_dataclass(value) and f.name in _SECTIONS
                           else list(value) if f.name == "methods" else copy.deepcopy(value))
        return out

    def override(self, overrides: dict) -> Config:
        """A new configuration: this one with dotted ``overrides`` applied (``{"train.lr": 1e-3}``;
        ``dataset`` or ``variants`` given as an object replace the section whole). Only the
        keys that change are checked again (a variant's overrides do not check the methods a
        second time); this configuration is left as it is. ValueError naming the key and its
        value."""
        before = self._as_dict()
        after = copy.deepcopy(before)
        apply_overrides(after, overrides)
        changed = [f.name for f in fields(self) if _text(after[f.name]) != _text(before[f.name])]
        new = copy.copy(self)
        for key in changed:
            object.__setattr__(new, key, after[key])
        new._check(changed)
        return new

    def run_seeds(self) -> list[int]:
        """The seeds a setting runs: ``seeds``, or ``[seed]`` when that is null."""
        return list(self.seeds) if self.seeds is not None else [self.seed]

    def to_record(self, *, run: bool = False) -> dict:
        """The configuration as a result file records it: JSON types, keys in the order of
        ``configs/defaults.json`` (its comments, the ``_`` keys, first) then ``setting``, the
        methods as their text. ``run``:
        one run's keys only, without the setting's ``seeds``, ``variants`` and ``methods``
        (a run records its own seed, variant and method)."""
        record = json.loads(json.dumps(self._as_dict(), default=str, allow_nan=False))  # a method spec as its text
        return {**defaults_comments(), **{k: v for k, v in record.items() if not (run and k in _SETTING_ONLY)}}

    def only_variants(self, names: list[str]) -> Config:
        """This configuration with only the variants ``names`` (``--variants``), in that order."""
        unknown = [v for v in names if v not in self.variants]
        if unknown:
            raise ValueError(f"--variants: {unknown[0]!r} is not one of the setting's variants {list(self.variants)}")
        return self.override({"variants": {v: self.variants[v] for v in dict.fromkeys(names)}})

    def ranks_given(self, flag: str, chosen: bool) -> tuple[Config, list[str]]:
        """Apply the user's ranks (``flag``: ``--ranks`` or ``--set federated.ranks``) to every
        variant: a variant's own ``federated.ranks`` (and ``federated.alphas``) gives way to
        them. A variant that then runs as another one does is left out, unless the user named
        it with ``--variants`` (``chosen``). Returns the new configuration and one line per
        variant changed, saying so."""
        notes, seen, variants = [], [], {}
        for name, over in self.variants.items():
            own = over.get("federated.ranks")
            if own is None:
                seen.append(over)
                variants[name] = over
                continue
            rest = {k: v for k, v in over.items() if k not in ("federated.ranks", "federated.alphas")}
            if not chosen and rest in seen:
                notes.append(f"variants.{name}: left out, as {flag} gives every client's rank (its own ranks {own}: "
                             f"--variants {name} without {flag})")
                continue
            variants[name] = rest
            seen.append(rest)
            notes.append(f"variants.{name}: federated.ranks {own} replaced by {flag}(={self.federated.ranks})")
        return self.override({"variants": variants}), notes

    def clients_given(self, flag: str) -> tuple[Config, list[str]]:
        """The variants whose ``federated.ranks`` list more clients than ``flag`` (the user's
        ``--clients``) gives, cut to K ranks spread from the smallest to the largest (their
        ``federated.alphas`` alike). Returns the new configuration and one line per variant
        cut, saying so."""
        K = self.federated.clients
        notes, variants = [], copy.deepcopy(self.variants)
        for name, over in variants.items():
            ranks = over.get("federated.ranks")
            if isinstance(ranks, list) and len(ranks) > K:
                over["federated.ranks"] = _spread(ranks, K)
                if isinstance(over.get("federated.alphas"), list) and len(over["federated.alphas"]) == len(ranks):
                    over["federated.alphas"] = _spread(over["federated.alphas"], K)
                notes.append(f"variants.{name}: federated.ranks {ranks} cut to {over['federated.ranks']} for "
                             f"{flag}(={K}) (--variants leaves a variant out)")
        return self.override({"variants": variants}), notes


def _text(value) -> str:
    """``value`` as JSON text: two values are the same override only when their texts are
    (``True`` is not ``1``, nor ``1`` ``1.0``: each is checked and recorded as given)."""
    return json.dumps(value, default=str, allow_nan=False)


def _spread(values: list, k: int) -> list:
    """``k`` of ``values``, evenly spaced from the first to the last (both kept when k >= 2)."""
    if k == 1:
        return values[:1]
    return [values[round(i * (len(values) - 1) / (k - 1))] for i in range(k)]


@dataclass(frozen=True)
class Run:
    """One run of a setting: ``variant`` under ``seed``; ``config`` is its configuration (the
    setting's with the variant's overrides and ``seed`` set), checked."""

    variant: str
    seed: int
    config: Config


def runs(config: Config) -> list[Run]:
    """Every :class:`Run` of the setting ``config``, variants in their order, seeds in theirs.
    What a variant overrides is checked (a bad override raises ValueError naming the variant
    and, where fewer clients than ranks is the trouble, the flags that fix it)."""
    out = []
    for name, over in config.variants.items():
        try:
            base = config.override(over)
        except ValueError as e:
            hint = ""
            if "federated.ranks" in over and "entries for federated.clients" in str(e):
                hint = (f"; give more clients (--clients {len(over['federated.ranks'])}) or leave the variant out "
                        f"(--variants {' '.join(v for v in config.variants if v != name) or 'NAME'})")
            raise ValueError(f"variants.{name}: {e}{hint}") from None
        for seed in config.run_seeds():
            out.append(Run(name, seed, base.override({"seed": seed})))
    return out
