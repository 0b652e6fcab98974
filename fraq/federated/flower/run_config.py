"""The Flower App's run configuration (``[tool.flwr.app.config]``) mapped onto the harness's.

``flwr run`` hands the ``ServerApp`` and every ``ClientApp`` the same ``context.run_config``:
the kebab-case keys of ``apps/flower/pyproject.toml``, with ``--run-config`` overrides
applied. :func:`from_run_config` turns it into a :func:`fraq.federated.config.load_config`
dictionary, a method spec and the results directory. Every key is checked once; errors
name the run-config key and its value.

Keys (:data:`DEFAULTS` repeats the App's defaults):

``setting``            ``quick``, ``roberta``, ``llama`` or a JSON file (harness settings)
``method``             one method spec, e.g. ``fraq:tau=0.95``, checked with its options by
                       :func:`~fraq.federated.config.method_aggregator` (as the harness's ``methods``)
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

import json
import numbers

from fraq.federated.config import client_ranks, load_config, method_aggregator

__all__ = ["DEFAULTS", "KEYS", "from_run_config", "parse_overrides"]

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
_STRINGS = ("setting", "method", "overrides", "results-dir")

DEFAULTS = {
    "setting": "quick",
    "method": "fraq:tau=0.95",
    "num-server-rounds": 2,
    "clients": 2,
    "local-steps": 5,
    "batch-size": -1,
    "lora-rank": -1,
    "seed": -1,
    "eval-every": 1,
    "threads": 1,
    "overrides": "dataset.train_per_intent=20 dataset.test_per_intent=5",
    "results-dir": "results/flower",
}


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
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def from_run_config(run_config: dict) -> tuple[dict, str, str]:
    """(harness config, method spec, results directory) from a Flower ``run_config``.

    Every key of :data:`DEFAULTS` must be present (Flower fuses the App's defaults with
    ``--run-config``); unknown keys are refused.
    """
    rc = dict(run_config)
    unknown = sorted(set(rc) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown run config key(s) {unknown}; known: {sorted(DEFAULTS)}")
    missing = sorted(set(DEFAULTS) - set(rc))
    if missing:
        raise ValueError(f"run config lacks {missing}; declare them under [tool.flwr.app.config]")
    for key in _STRINGS:
        if not isinstance(rc[key], str):
            raise ValueError(f"run config {key!r}(={rc[key]!r}) must be a string")
    for key in ("setting", "method", "results-dir"):
        if not rc[key].strip():
            raise ValueError(f"run config {key!r}(={rc[key]!r}) must not be empty")
    over: dict = {}
    source: dict[str, str] = {}
    for key, target in KEYS.items():
        v = rc[key]
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or (v < 0 and v != -1):
            raise ValueError(f"run config {key!r}(={v!r}) must be an int >= 0, or -1 for the setting's value")
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
    try:
        cfg = load_config(rc["setting"], over)
    except ValueError as e:
        keys = [f"{source[t]!r} ({t})" for t in source if t in str(e)] or [f"'setting'(={rc['setting']!r})"]
        raise ValueError(f"run config {', '.join(keys)}: {e}") from None
    agg = method_aggregator(rc["method"], where="run config 'method'")
    from fraq.federated.server import ClientPlan

    skip = ClientPlan.make(agg, *client_ranks(cfg)).skip
    if skip:
        raise ValueError(f"run config 'method'(={rc['method']!r}): {skip}")
    cfg["methods"] = [rc["method"]]
    return cfg, rc["method"], rc["results-dir"]
