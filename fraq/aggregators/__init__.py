"""Federated LoRA aggregators for a whole model, by name, on one interface.

>>> from fraq.aggregators import ClientUpdate, get_aggregator
>>> agg = get_aggregator("fraq", tau=0.95)
>>> result = agg.aggregate([ClientUpdate({"q": (B1, A1)}, scale=2.0, weight=120), ...])  # doctest: +SKIP
>>> result.downlinks[k]["q"].merge, result.client_init, result.downlink_bytes(k)      # doctest: +SKIP

Each client uploads a :class:`ClientUpdate` (per module (B_k, A_k), LoRA scale, data
weight); :meth:`Aggregator.aggregate` returns an :class:`AggregationResult`: per client
and module what is sent, what is merged into the frozen base weights, and the adapter
the client warm-starts from (or None: reinitialize), with downlink counts in parameters
and bytes; ``result.certificate(updates)`` says per module how far the result is from
the exact weighted aggregate, with a rounding bound (:mod:`fraq.aggregators.certificate`), or with
``method="probe"`` at about k / R of that cost, with a probability
(:mod:`fraq.aggregators.probe_certificate`). Stateful methods (``lora-a2``, ``florg``) return
``result.state`` to pass to the next round. ``agg.open_round(shapes, clients=K, ranks=...)``
takes the same uploads one client at a time as they arrive (:class:`RoundBuffer`; FRAQ and
FLoRA then read the stacks the uploads were copied into). ``shared/reference/baselines.md``
describes each method.

A new method is a subclass of :class:`Aggregator` in its own module and one call,
``register_aggregator(MyMethod)``; a method outside the package is found through the
``fraq.aggregators`` entry point group or ``FRAQ_METHODS`` (:mod:`fraq.aggregators.registry`;
docs/library.md, "Adding a method"). The harness, the Flower strategy, ``fraq aggregate``
and the checkpoints then run it, asking the class (never its name) for what is
peculiar to it: its clients' layer (:meth:`Aggregator.client_layer`), what they train
each round (:meth:`Aggregator.trained_factors`), what its result can be written as
(``not_an_adapter``, ``no_delta``), its rank cap (:meth:`Aggregator.capped`) and its
state's record (``state_type``, an :class:`AggregatorState`). What a report shows of it
(display name, paper order, downlink rule, FLOP model) is its class's too
(:meth:`Aggregator.describe`), written into every result by the benchmarks.

===============  ============================  ===========  ====================  ==========
name             server math                   mixed ranks  downlink / module     next round
===============  ============================  ===========  ====================  ==========
``fedit``        average B and A               no           (m + n) r             warm start
``lora-a2``      average the trained factor    no           m r or n r            warm start
``flora``        weighted stack                yes          (m + n) sum r_k       merge
``fedex-lora``   average + exact residual      no           (m + n)(sum r_k + r)  warm start
``flexlora``     dense SVD, per-client cut     yes          (m + n) r_k           warm start
``florg``        Gram average + Procrustes     no           r min(m, n)           warm start
``florist``      thin SVDs + core SVD          yes          (m + n) p             warm start
``fraq``         QR + Gram eigenproblem        yes          (m + n) p             merge
``fedsvd``       SVD of the FedAvg adapter     no           (m + n) r             warm start
``fedmomentum``  top r of the aggregate's SVD  yes          (m + n) max(r_k, p)   warm start
===============  ============================  ===========  ====================  ==========

FlexLoRA, FedSVD and FedMomentum decompose an m x n matrix densely by default, as their
public code does; with ``kernel="fraq"`` (``flexlora:kernel=fraq``) they take the same
singular triplets from the factors instead (:func:`fraq.svd`, :mod:`fraq.aggregators._kernel`).
FedEx-LoRA's and FedMomentum's clients also merge a residual into their base weights.
"""

from __future__ import annotations

from fraq.aggregators.aggregation_result import AggregationResult
from fraq.aggregators.certificate import Certificate, ModuleCertificate, certify
from fraq.aggregators.probe_certificate import ProbeCertificate, ProbeModuleCertificate, certify_probe
from fraq.aggregators.base import Aggregator, AggregatorState, Group, ModuleSpec
from fraq.aggregators.validation import validate_updates
from fraq.aggregators.fedex_lora import FedExLoRA
from fraq.aggregators.fedit import FedIT
from fraq.aggregators.fedmomentum import FedMomentum
from fraq.aggregators.fedsvd import FedSVD
from fraq.aggregators.flexlora import FlexLoRA
from fraq.aggregators.flora import FLoRA
from fraq.aggregators.florg import FLoRG, FlorgState
from fraq.aggregators.florist import FLoRIST
from fraq.aggregators.fraq import Fraq
from fraq.aggregators.layer import ClientLayer
from fraq.aggregators.lora_a2 import LoraA2, LoraA2State
from fraq.aggregators.round_buffer import RoundBuffer
from fraq.aggregators.upload_layout import Layout
from fraq.aggregators.payload import (
    REINITIALIZE,
    WARM_START,
    ClientUpdate,
    Downlink,
    Factors,
)
from fraq.aggregators.registry import (
    AGGREGATORS,
    ENTRY_POINT_GROUP,
    ENV,
    MethodLoadError,
    get_aggregator,
    load_outside_methods,
    register_aggregator,
)
from fraq.aggregators.flops import analytic_flops, model_flops

__all__ = [
    "AGGREGATORS",
    "AggregationResult",
    "Aggregator",
    "AggregatorState",
    "Certificate",
    "ClientLayer",
    "ClientUpdate",
    "Downlink",
    "ENTRY_POINT_GROUP",
    "ENV",
    "Factors",
    "FedExLoRA",
    "FedIT",
    "FedMomentum",
    "FedSVD",
    "FlexLoRA",
    "FLoRA",
    "FLoRG",
    "FlorgState",
    "FLoRIST",
    "Fraq",
    "Group",
    "Layout",
    "LoraA2",
    "LoraA2State",
    "MethodLoadError",
    "ModuleCertificate",
    "ModuleSpec",
    "ProbeCertificate",
    "ProbeModuleCertificate",
    "REINITIALIZE",
    "RoundBuffer",
    "WARM_START",
    "analytic_flops",
    "certify",
    "certify_probe",
    "get_aggregator",
    "load_outside_methods",
    "model_flops",
    "register_aggregator",
    "validate_updates",
]
