"""peft LoRA adapters in, one aggregated peft adapter (or a weight delta) out: ``fraq aggregate``.

Modules, one step each:

- :mod:`fraq.peft.config`: peft's file names and ``adapter_config.json`` (validation,
  ``rank_pattern`` / ``alpha_pattern`` lookup, scales, the output config).
- :mod:`fraq.peft.reader`: one adapter directory in, checked: its header (:func:`read_header`),
  then its tensors (:func:`read_adapter`).
- :mod:`fraq.peft.layout`: each module's base weight layout, from the base model (for deltas).
- :mod:`fraq.peft.aggregate`: K adapters through any aggregator (:func:`aggregate_adapters`,
  its options one :class:`AggregateOptions`).
- :mod:`fraq.peft.report`: per-module energy and error (:class:`AdapterAggregation`).
- :mod:`fraq.peft.writer`: the one writer of adapter directories, delta files and JSON
  reports, each swapped in whole (also used by :mod:`fraq.federated.export`).
- :mod:`fraq.peft.examples`: a tiny model and client adapters (:func:`example_clients`).

Reading, aggregating and writing an adapter need only ``safetensors`` and ``json``; a
delta file needs transformers too (the base model's module types); peft is imported only
by :func:`example_clients`. Not imported by ``import fraq``.
"""

from fraq.peft.aggregate import AggregateOptions, aggregate_adapters
from fraq.peft.config import CONFIG, PREFIX, WEIGHTS, config_rank_alpha, exact_key, pattern_key
from fraq.peft.examples import example_clients
from fraq.peft.reader import AdapterHeader, ClientAdapter, read_adapter, read_header
from fraq.peft.report import AdapterAggregation, ModuleRow

__all__ = [
    "CONFIG",
    "PREFIX",
    "WEIGHTS",
    "AdapterAggregation",
    "AdapterHeader",
    "AggregateOptions",
    "ClientAdapter",
    "ModuleRow",
    "aggregate_adapters",
    "config_rank_alpha",
    "exact_key",
    "example_clients",
    "pattern_key",
    "read_adapter",
    "read_header",
]
