"""Federated LoRA aggregators for a whole model, by name, on one interface.

>>> from fraq.aggregators import ClientUpdate, get_aggregator
>>> agg = get_aggregator("fraq", tau=0.95)
>>> result = agg.aggregate([ClientUpdate({"q": (B1, A1)}, scale=2.0, weight=120), ...])  # doctest: +SKIP
>>> result.downlinks[k]["q"].merge, result.client_init, result.downlink_bytes(k)      # doctest: +SKIP

Each client uploads a :class:`ClientUpdate` (per module (B_k, A_k), LoRA scale, data
weight); :meth:`Aggregator.aggregate` returns an :class:`AggregationResult`: per client
and module what is sent, what is merged into the frozen base weights, and the adapter
the client warm-starts from (or None: reinitialize), with downlink counts in parameters
and bytes. Stateful methods (``lora-a2``, ``florg``) return ``result.state`` to pass to
the next round. ``shared/reference/baselines.md`` describes each method.

A new method is a subclass of :class:`Aggregator` in its own module and one call,
``register_aggregator(MyMethod)``; the harness, the Flower strategy, ``fraq aggregate``
and the checkpoints then run it, asking the class (never its name) for what is
peculiar to it: its clients' layer (:meth:`Aggregator.client_layer`), what they train
each round (:meth:`Aggregator.trained_factors`), what its result can be written as
(``not_an_adapter``, ``no_delta``), its rank cap (:meth:`Aggregator.capped`) and its
state's record (``state_type``, an :class:`AggregatorState`).

=============  ==========================  ============  ===================  ==========
name           server math                 mixed ranks   downlink / module    next round
=============  ==========================  ============  ===================  ==========
``fedit``      average B and A             no            (m + n) r            warm start
``lora-a2``    average the trained factor  no            m r or n r           warm start
``flora``      weighted stack              yes           (m + n) sum r_k      merge
``fedex-lora`` average + exact residual    no            (m + n)(sum r_k + r) warm start
``flexlora``   dense SVD, per-client cut   yes           (m + n) r_k          warm start
``florg``      Gram average + Procrustes   no            r min(m, n)          warm start
``florist``    thin SVDs + core SVD        yes           (m + n) p            warm start
``fraq``       QR + Gram eigenproblem      yes           (m + n) p            merge
=============  ==========================  ============  ===================  ==========
"""

from __future__ import annotations

import inspect

from fraq.aggregators.base import Aggregator, AggregatorState, Group, ModuleSpec, validate_updates
from fraq.aggregators.fedex_lora import FedExLoRA
from fraq.aggregators.fedit import FedIT
from fraq.aggregators.flexlora import FlexLoRA
from fraq.aggregators.flora import FLoRA
from fraq.aggregators.florg import FLoRG, FlorgState
from fraq.aggregators.florist import FLoRIST
from fraq.aggregators.fraq import Fraq
from fraq.aggregators.layer import ClientLayer
from fraq.aggregators.lora_a2 import LoraA2, LoraA2State
from fraq.aggregators.payload import (
    REINITIALIZE,
    WARM_START,
    AggregationResult,
    ClientUpdate,
    Downlink,
    Factors,
)

__all__ = [
    "AGGREGATORS",
    "AggregationResult",
    "Aggregator",
    "AggregatorState",
    "ClientLayer",
    "ClientUpdate",
    "Downlink",
    "Factors",
    "FedExLoRA",
    "FedIT",
    "FlexLoRA",
    "FLoRA",
    "FLoRG",
    "FlorgState",
    "FLoRIST",
    "Fraq",
    "Group",
    "LoraA2",
    "LoraA2State",
    "ModuleSpec",
    "REINITIALIZE",
    "WARM_START",
    "get_aggregator",
    "register_aggregator",
    "validate_updates",
]

AGGREGATORS: dict[str, type[Aggregator]] = {
    cls.name: cls for cls in (FedIT, LoraA2, FLoRA, FedExLoRA, FlexLoRA, FLoRG, FLoRIST, Fraq)
}
"""Registry: name -> aggregator class, in the order of the paper's tables."""


def get_aggregator(name: str, **options) -> Aggregator:
    """An aggregator by registry name, configured by keyword ``options`` (e.g. ``tau``)."""
    if not isinstance(name, str) or name not in AGGREGATORS:
        raise ValueError(f"aggregator(={name!r}) is not one of {sorted(AGGREGATORS)}")
    cls = AGGREGATORS[name]
    try:
        inspect.signature(cls).bind(**options)
    except TypeError:
        accepted = [p for p in inspect.signature(cls).parameters if p not in ("args", "kwargs")]
        raise TypeError(f"aggregator {name!r} does not take options {sorted(options)}; "
                        f"it takes {accepted}") from None
    return cls(**options)


def register_aggregator(cls: type[Aggregator]) -> type[Aggregator]:
    """Add an :class:`Aggregator` subclass to :data:`AGGREGATORS` under ``cls.name``.

    A name names one method: registering a different class under a taken name is a
    ValueError naming both (a method would otherwise replace another silently, and every
    table, result and Flower run would show the wrong one under its name). Registering the
    same class again changes nothing."""
    if not (isinstance(cls, type) and issubclass(cls, Aggregator)):
        raise TypeError(f"cls(={cls!r}) must be an Aggregator subclass")
    if not isinstance(getattr(cls, "name", None), str):
        raise ValueError(f"{cls.__name__} needs a string class attribute `name`")
    st = cls.state_type
    if st is not None and not (isinstance(st, type) and issubclass(st, AggregatorState) and st.aggregator == cls.name):
        raise ValueError(f"{cls.__name__}.state_type(={st!r}) must be an AggregatorState subclass whose "
                         f"`aggregator` is {cls.name!r}")
    taken = AGGREGATORS.get(cls.name)
    if taken is not None and taken is not cls:
        raise ValueError(f"aggregator name {cls.name!r} is taken by {taken.__module__}.{taken.__qualname__}; "
                         f"give {cls.__module__}.{cls.__qualname__} another `name`")
    AGGREGATORS[cls.name] = cls
    return cls
