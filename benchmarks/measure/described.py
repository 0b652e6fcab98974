"""What a result records of the method it measured: the fields the analysis shows it by.

The analysis imports neither fraq nor benchmarks; it shows a method by what its result
files say. :func:`describe` gives those fields for every method the suites compare, and
the runner (:mod:`benchmarks.run`) and the experiments that measure several methods in one
result (:mod:`benchmarks.experiments.tables123`) write them:

- ``display_name``: the name in tables and legends;
- ``family``: the display name of the method without its options (``FRAQ`` for
  ``fraq:backend=cholesky``): a figure draws a variant in its family's colour;
- ``paper_order``: its row in the paper's Tables 1-3, or None (after the paper's);
- ``downlink_rule``, ``flop_model``: as the aggregator class states them;
- ``energy_rule``: whether the method cuts its output rank by an energy threshold ``tau``
  in a federated round (its class's ``energy_rule``: FRAQ, FLoRIST; not FlexLoRA, which
  keeps the clients' rank), so that a report explains the energy rule only beside the
  methods it applies to (Tables 1-3's downlink).

An aggregator's fields are its class's (:meth:`fraq.aggregators.Aggregator.describe`),
so a method registered from outside the package is described with no change here. The
compared entries that are not aggregators are described where they are defined: the
textbook baselines in :data:`benchmarks.measure.textbook.DISPLAY_NAMES`, FRAQ in the
paper's configuration (``fraq-paper``, :data:`benchmarks.measure.methods.PAPER_CONFIG`)
by :data:`PAPER_CONFIG_NAME`.
"""

from __future__ import annotations

__all__ = ["PAPER_CONFIG_NAME", "describe"]

PAPER_CONFIG_NAME = "FRAQ (paper config.)"
"""The display name of ``fraq-paper``: FRAQ with the product Gram and a float32 eigensolver."""


def describe(method: str) -> dict:
    """The fields a result records of compared method ``method`` (a registry name, a
    name with options ``name:options`` such as ``fraq:backend=cholesky`` or
    ``fraq:tau=0.80``, a textbook baseline or ``fraq-paper``); see the module docstring.
    A spec naming a backend alone is shown by the backend, ``FRAQ (cholesky)``: the label
    the archives under ``docs/results`` hold for it, whose files spell it ``fraq:cholesky``.

    Raises:
        ValueError: a method that is none of these, naming it.
    """
    from benchmarks.measure.methods import PAPER_CONFIG
    from benchmarks.measure.textbook import DISPLAY_NAMES
    from fraq.aggregators import AGGREGATORS
    from fraq.methods import MethodSpec

    if not isinstance(method, str):
        raise ValueError(f"method(={method!r}) must be a method name")
    if method in DISPLAY_NAMES:
        return {"display_name": DISPLAY_NAMES[method], "family": DISPLAY_NAMES[method], "paper_order": None,
                "downlink_rule": None, "flop_model": False, "energy_rule": False}
    spec = None if method == PAPER_CONFIG else MethodSpec.parse(method)  # the one grammar's reading
    cls = AGGREGATORS.get("fraq" if spec is None else spec.name)
    if cls is None:
        raise ValueError(f"method(={method!r}) is neither a registered aggregator ({sorted(AGGREGATORS)}), "
                         f"a textbook baseline ({sorted(DISPLAY_NAMES)}) nor {PAPER_CONFIG!r}")
    fields = cls.describe()
    family = fields.pop("display_name")
    fields.pop("name")
    if spec is None:
        display = PAPER_CONFIG_NAME
    else:
        backend_only = len(spec.options) == 1 and spec.options[0][0] == "backend"
        shown = spec.options[0][1] if backend_only else str(spec).partition(":")[2]
        display = f"{family} ({shown})" if shown else family
    return {"display_name": display, "family": family, **fields, "energy_rule": bool(cls.energy_rule)}
