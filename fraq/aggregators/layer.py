"""What a method's clients train in each adapted module, and what an adapter of it adds to a weight.

A caller that trains or merges adapters (the federated harness, the Flower client,
the evaluation) asks the method for its :class:`ClientLayer`
(:meth:`fraq.aggregators.Aggregator.client_layer`) and uses it without knowing the
method. The default is peft's LoRA: an adapter is a :class:`~fraq.aggregators.Factors`
``(B, A, s)`` whose update is ``s B A``, trained through peft by the caller. A method whose
clients train something else overrides the layer (FLoRG's single matrix per module,
:class:`fraq.aggregators.florg.FlorgLayer`): it then draws the initial adapter, builds
the trainable module, reads the upload back, gives the dense update and the
start-of-training offset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import torch
from torch import nn

from fraq.aggregators.payload import Factors

__all__ = ["ClientLayer", "Draw", "Seeds"]

Seeds = Callable[..., int]
"""``seeds(*parts)``: a seed from hashable parts, the same in every process of a run."""

Draw = Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]
"""``draw(m, n, r)``: a fresh (B (m, r), A (r, n)) pair, the caller's seeded initialization."""


class ClientLayer:
    """peft's LoRA on every target module: the update of ``Factors(B, A, s)`` is ``s B A``.

    Args:
        targets: adapted module -> (m, n), the weight's (out, in) shape.
        seeds: the run's seed function (:data:`Seeds`), for layers with fixed random parts.

    Attributes:
        peft_lora: True when the caller trains the adapters as peft LoRA (``lora_A``,
            ``lora_B``); False when it swaps in :meth:`module` and uploads :meth:`upload`.
    """

    peft_lora: ClassVar[bool] = True

    def __init__(self, targets: Mapping[str, tuple[int, int]], seeds: Seeds):
        self.targets = dict(targets)
        self.seeds = seeds

    def fresh(self, name: str, rank: int, scale: float, draw: Draw) -> Factors:
        """A new adapter of module ``name`` at ``rank`` and LoRA ``scale``, from ``draw``."""
        m, n = self.targets[name]
        B, A = draw(m, n, rank)
        return Factors(B, A, scale)

    def delta(self, name: str, f: Factors) -> torch.Tensor:
        """The dense (m, n) update of adapter ``f`` of module ``name``, in float64."""
        return f.dense(torch.float64)

    def offset(self, start: Mapping[str, Factors]) -> dict[str, tuple[Factors, ...]]:
        """Products every client adds to its pretrained weights before round 1 (none for LoRA,
        whose fresh adapter is zero)."""
        return {}

    def module(self, name: str, base: nn.Module, start: Factors, scale: float) -> nn.Module:
        """The trainable module that replaces ``base`` (only when not :attr:`peft_lora`)."""
        raise NotImplementedError(f"{type(self).__name__} trains through peft's LoRA, not a module of its own")

    def upload(self, module: nn.Module) -> tuple[torch.Tensor | None, torch.Tensor]:
        """What a client uploads from a trained :meth:`module`: ``(B, A)`` on the CPU in float32."""
        raise NotImplementedError(f"{type(self).__name__} trains through peft's LoRA, not a module of its own")
