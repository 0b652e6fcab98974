"""The registry: one module per figure or table, each measured here and nowhere else.

Every experiment module exports

- ``points(size) -> list[dict]``: the configs of every result at a size of
  :data:`benchmarks.sizes.SIZES` (``tiny``, ``reduced``, ``paper``);
- ``key(config) -> str``: the result's file name (``<out>/<experiment>/<key>.json``);
- ``measure(config, device) -> dict``: one result.

The runner (:mod:`benchmarks.run`) is one loop over :data:`EXPERIMENTS`; the asv classes
(``benchmarks/bench_*.py``) take their parameters from the same ``points`` and call the
same functions; the pytest-benchmark checks (``tests/bench``) run the ``tiny`` points.
Adding an experiment is a module with those three functions and a line here.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["DEFAULT", "EXPERIMENTS", "get"]

EXPERIMENTS: dict[str, str] = {
    "table4": "table4",
    "fig4_cond": "fig4_cond",
    "fig4_rank": "fig4_rank",
    "fig1": "fig1",
    "fig3": "fig3",
    "clients": "clients",
    "clients_models": "clients_models",
    "backends": "backends",
    "backend_stages": "backend_stages",
    "peft": "peft_compare",
    "tables123": "tables123",
    "eig_precision": "eig_precision",
}
"""Every experiment (its results' directory name) and its module here, in the runner's
order (cheap first)."""

DEFAULT = ("table4", "fig4_cond", "fig4_rank", "fig1", "fig3", "clients", "backends", "backend_stages", "peft",
           "tables123")
"""What ``make run`` reproduces."""


def get(name: str) -> ModuleType:
    """The module of experiment ``name``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment(={name!r}) is not one of {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"benchmarks.experiments.{EXPERIMENTS[name]}")
