"""The Flower App's run configuration (``[tool.flwr.app.config]``) mapped onto the harness's.

``flwr run`` hands the ``ServerApp`` and every ``ClientApp`` the same ``context.run_config``:
the kebab-case keys of ``apps/flower/pyproject.toml``, with ``--run-config`` overrides
applied. :func:`from_run_config` turns it into a :class:`~fraq.federated.config.Config`
(:func:`~fraq.federated.config.load_config`'s), a method spec and the results directory. Every key is checked once; errors
name the run-config key and its value.

Keys (:class:`RunConfig` holds them, with the App's defaults):

``setting``            ``quick``, ``roberta``, ``llama`` or a JSON file (harness settings)
``method``             one method spec, e.g. ``fraq:tau=0.95``, parsed once by :class:`RunConfig`
                       (its ``method`` is the :class:`~fraq.methods.MethodSpec`) and checked with its
                       options by :func:`~fraq.federated.method_specs.method_aggregator` (as the harness's
                       ``methods``)
``num-server-rounds``  ``federated.rounds``
``clients``            ``federated.clients`` (= the number of SuperNodes, ``num-partitions``)
``local-steps``        ``train.steps``
``batch-size``         ``train.batch_size``
``lora-rank``          ``federated.ranks = [r]`` (mixed ranks: ``overrides = "federated.ranks=[4,8]"``)
``seed``               ``seed``
``eval-every``         ``federated.eval_every``
``threads``            ``threads`` (torch threads per process)
``overrides``          space-separated ``dotted.key=value`` harness overrides, values parsed as JSON
                       (else kept as strings), e.g. ``"train.lr=1e-3 dataset.train_per_intent=20"``
``results-dir``        where the ``ServerApp`` writes ``<label>/result.json`` (relative paths
                       resolve against the ServerApp process's working directory)

An integer key set to ``-1`` keeps the setting's value.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields

from fraq.federated.config import Config, load_config
from fraq.federated.config_files import parse_value
from fraq.federated.method_specs import method_aggregator
from fraq.methods import MethodSpec

__all__ = ["DEFAULTS", "KEYS", "RunConfig", "from_run_config", "parse_overrides"]

# run-config key -> harness key, for the integer keys (-1 keeps the setting's value)
KEYS = {
    "num-server-rounds": "federated.rounds",
    "clients": "federated.clients",
    "local-steps": "train.steps",
    "batch-size": "train.batch_size",
    "lora-rank": "federated.ranks",
    "seed": "seed",
    "eval-every": "federated.eval_every",
    "threads": "threads",
}


@dataclass(frozen=True)
class RunConfig:
    """The App's run configuration, checked: its fields are the run-config keys in snake case,
    their defaults the App's (``apps/flower/pyproject.toml`` declares the same, as Flower
    requires; :data:`DEFAULTS` is this class's, in kebab case). ``__post_init__`` checks each
    key's type, naming the run-config key and its value, and parses ``method`` (given as text,
    held as its :class:`~fraq.methods.MethodSpec`)."""

    setting: str = "quick"
    method: MethodSpec | str = "fraq:tau=0.95"
    num_server_rounds: int = 2
    clients: int = 2
    local_steps: int = 5
    batch_size: int = -1
    lora_rank: int = -1
    seed: int = -1
    eval_every: int = 1
    threads: int = 1
    overrides: str = "dataset.train_per_intent=20 dataset.test_per_intent=5"
    results_dir: str = "results/flower"

    @classmethod
    def of(cls, run_config: dict) -> RunConfig:
        """The checked run configuration of a Flower ``run_config``: every key of :data:`DEFAULTS`
        must be present (Flower fuses the App's defaults with ``--run-config``); unknown keys are refused."""
        rc = dict(run_config)
        unknown = sorted(set(rc) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown run config key(s) {unknown}; known: {sorted(DEFAULTS)}")
        missing = sorted(set(DEFAULTS) - set(rc))
        if missing:
            raise ValueError(f"run config lacks {missing}; declare them under [tool.flwr.app.config]")
        return cls(**{_field(key): value for key, value in rc.items()})

    def __post_init__(self):
        for key in _STRINGS:
            if not isinstance(self[key], str) and not (key == "method" and isinstance(self[key], MethodSpec)):
                raise ValueError(f"run config {key!r}(={self[key]!r}) must be a string")
        for key in ("setting", "method", "results-dir"):
            if not str(self[key]).strip():
                raise ValueError(f"run config {key!r}(={self[key]!r}) must not be empty")
        try:
            object.__setattr__(self, "method", MethodSpec.parse(self.method))  # once: the value from here on
        except ValueError as e:
            raise ValueError(f"run config 'method': {e}") from None
        for key in KEYS:
            v = self[key]
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or (v < 0 and v != -1):
                raise ValueError(f"run config {key!r}(={v!r}) must be an int >= 0, or -1 for the setting's value")

    def __getitem__(self, key: str):
        """The value of a run-config key, in its kebab-case spelling."""
        return getattr(self, _field(key))


def _field(key: str) -> str:
    return key.replace("-", "_")


_STRINGS = ("setting", "method", "overrides", "results-dir")

DEFAULTS = {f.name.replace("_", "-"): f.default for f in fields(RunConfig)}
"""The App's run-config keys and defaults (:class:`RunConfig`'s, in kebab case)."""


def parse_overrides(text: str) -> dict:
    """``"train.lr=1e-3 dataset.name=intents"`` -> ``{"train.lr": 0.001, "dataset.name": "intents"}``.

    Values are JSON (numbers, ``true``, ``null``, ``[4,8]``); anything else stays a string.
    """
    out = {}
    for item in text.split():
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise ValueError(f"run config 'overrides'(={text!r}): item {item!r} must be dotted.key=value, "
                             f"e.g. train.lr=1e-3")
        if key in out:
            raise ValueError(f"run config 'overrides'(={text!r}) sets {key!r} twice")
        try:
            out[key] = parse_value(key, raw)
        except ValueError as e:
            raise ValueError(f"run config 'overrides': {e}") from None
    return out


def from_run_config(run_config: dict) -> tuple[Config, MethodSpec, str]:
    """(harness configuration, method spec, results directory) from a Flower ``run_config``;
    the configuration's ``methods`` is ``(method,)``.

    Every key of :data:`DEFAULTS` must be present (Flower fuses the App's defaults with
    ``--run-config``); unknown keys are refused.
    """
    rc = RunConfig.of(run_config)
    over: dict = {}
    source: dict[str, str] = {}
    for key, target in KEYS.items():
        v = rc[key]
        if v == -1:
            continue
        over[target] = [int(v)] if key == "lora-rank" else int(v)
        source[target] = key
    for target, value in parse_overrides(rc["overrides"]).items():
        if target in over:
            raise ValueError(f"run config 'overrides' sets {target!r}, which run config {source[target]!r}"
                             f"(={rc[source[target]]!r}) already sets; use one of them")
        over[target] = value
        source[target] = "overrides"
    agg = method_aggregator(rc.method, where="run config 'method'")
    over["methods"] = [rc.method]  # the run's one method, as the spec: the setting's list is never read
    try:
        config = load_config(rc["setting"], over)
    except ValueError as e:
        keys = [f"{source[t]!r} ({t})" for t in source if t in str(e)] or [f"'setting'(={rc['setting']!r})"]
        raise ValueError(f"run config {', '.join(keys)}: {e}") from None
    from fraq.federated.round_loop import ClientPlan

    skip = ClientPlan.make(agg, *config.federated.client_ranks()).skip
    if skip:
        raise ValueError(f"run config 'method'(={str(rc.method)!r}): {skip}")
    return config, rc.method, rc["results-dir"]
