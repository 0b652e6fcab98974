"""The names of :mod:`fraq.peft` under their earlier module, ``fraq.peft_adapters``.

The code lives in the :mod:`fraq.peft` package (config, reader, aggregate, report,
writer, examples); this module re-exports its public names so that existing imports
(``from fraq.peft_adapters import aggregate_adapters``) keep working.
"""

from fraq.peft import (
    CONFIG,
    NO_DELTA,
    NOT_AN_ADAPTER,
    PREFIX,
    WEIGHTS,
    AdapterAggregation,
    ClientAdapter,
    ModuleRow,
    aggregate_adapters,
    config_rank_alpha,
    exact_key,
    example_clients,
    pattern_key,
    read_adapter,
)

__all__ = [
    "CONFIG",
    "NOT_AN_ADAPTER",
    "NO_DELTA",
    "PREFIX",
    "WEIGHTS",
    "AdapterAggregation",
    "ClientAdapter",
    "ModuleRow",
    "aggregate_adapters",
    "config_rank_alpha",
    "exact_key",
    "example_clients",
    "pattern_key",
    "read_adapter",
]
