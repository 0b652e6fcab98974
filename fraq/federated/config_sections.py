"""The harness configuration's sections (``model``, ``partition``, ``federated``, ``train``) as frozen values.

Each section is a frozen dataclass whose ``__post_init__`` checks its keys, in the order of
its fields, and raises ValueError naming the dotted key and its value, e.g.
``train.lr(=-1) must be a finite positive number``. The sections have no defaults of their
own: ``configs/defaults.json`` is the one source (:func:`fraq.federated.config.load_config`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

__all__ = ["Federated", "Model", "Partition", "Train", "check_index_list", "check_int", "check_real"]


def check_int(key: str, v, minimum: int = 1, allow_none: bool = False) -> None:
    """An int >= ``minimum`` (a bool is refused), or None where ``allow_none``; else ValueError naming ``key``."""
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{key}(={v!r}) must be an int >= {minimum}" + (" or null" if allow_none else ""))


def check_real(key: str, v, zero_ok: bool = False) -> None:
    """A finite positive number (non-negative where ``zero_ok``); else ValueError naming ``key``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or \
            not (v >= 0 if zero_ok else v > 0):
        raise ValueError(f"{key}(={v!r}) must be a finite {'non-negative' if zero_ok else 'positive'} number")


def check_index_list(v, minimum: int) -> bool:
    """Whether ``v`` is a non-empty list of ints >= ``minimum`` (bools are not ints here)."""
    return isinstance(v, list) and bool(v) and all(isinstance(x, int) and not isinstance(x, bool) and x >= minimum
                                                   for x in v)


@dataclass(frozen=True)
class Model:
    """The ``model`` section: which network, which of its modules carry LoRA, and where it runs."""

    name: str
    target_modules: list
    layers_to_transform: list | None
    layers_pattern: str | None
    pooling: str
    max_length: int
    dtype: str
    device: str
    cache_prefix: bool

    def __post_init__(self):
        from fraq.federated.model import resolve_device

        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"model.name(={self.name!r}) must be a model name or path")
        tm = self.target_modules
        if not isinstance(tm, list) or not tm or not all(isinstance(t, str) for t in tm):
            raise ValueError(f"model.target_modules(={tm!r}) must be a non-empty list of names")
        lt = self.layers_to_transform
        if lt is not None and not check_index_list(lt, 0):
            raise ValueError(f"model.layers_to_transform(={lt!r}) must be null or a list of layer indices >= 0")
        if self.pooling not in ("mean", "first", "last"):
            raise ValueError(f"model.pooling(={self.pooling!r}) must be 'mean', 'first' or 'last'")
        check_int("model.max_length", self.max_length, 2)
        if self.dtype not in ("float32", "bfloat16", "float16", "float64"):
            raise ValueError(f"model.dtype(={self.dtype!r}) must be float32, bfloat16, float16 or float64")
        lp = self.layers_pattern
        if lp is not None and (not isinstance(lp, str) or not lp):
            raise ValueError(f"model.layers_pattern(={lp!r}) must be null or a module name, e.g. 'layer'")
        resolve_device(self.device)
        if not isinstance(self.cache_prefix, bool):
            raise ValueError(f"model.cache_prefix(={self.cache_prefix!r}) must be true or false")
        if self.cache_prefix and lt is None:
            raise ValueError("model.cache_prefix needs model.layers_to_transform (the layers below the first one "
                             "are cached)")
        limits = self.limits()
        if limits is not None and self.max_length > limits.max_length:
            raise ValueError(f"model.max_length(={self.max_length}) exceeds {limits.max_length}, "
                             f"{limits.max_length_why}")

    def limits(self):
        """What this model can hold (:func:`fraq.federated.model_limits.model_limits`), None where
        its configuration is not on this machine."""
        from fraq.federated.model_limits import model_limits

        lt = self.layers_to_transform
        return model_limits(self.name, tuple(self.target_modules), None if lt is None else tuple(lt),
                            self.layers_pattern)


@dataclass(frozen=True)
class Partition:
    """The ``partition`` section: how the training examples are split over the clients."""

    scheme: str
    alpha: float
    min_size: int

    def __post_init__(self):
        if self.scheme not in ("dirichlet", "pathological", "iid"):
            raise ValueError(f"partition.scheme(={self.scheme!r}) must be 'dirichlet', 'pathological' or 'iid'")
        check_real("partition.alpha", self.alpha)
        if isinstance(self.min_size, bool) or not isinstance(self.min_size, int) or self.min_size < 1:
            raise ValueError(f"partition.min_size(={self.min_size!r}) must be an int >= 1: every client trains on "
                             f"its own examples each round, so a client without any cannot take part (a Dirichlet "
                             f"draw with min_size 0 leaves some clients empty)")


@dataclass(frozen=True)
class Federated:
    """The ``federated`` section: clients, rounds and each client's LoRA rank and alpha."""

    clients: int
    rounds: int
    ranks: list
    alphas: list | None
    head_rounds: int
    eval_every: int
    save_adapters_round: int | None

    def __post_init__(self):
        check_int("federated.clients", self.clients)
        check_int("federated.rounds", self.rounds)
        check_int("federated.head_rounds", self.head_rounds, 0)
        check_int("federated.eval_every", self.eval_every)
        check_int("federated.save_adapters_round", self.save_adapters_round, 1, allow_none=True)
        if self.save_adapters_round is not None and self.save_adapters_round > self.rounds:
            raise ValueError(f"federated.save_adapters_round(={self.save_adapters_round}) exceeds "
                             f"federated.rounds(={self.rounds})")
        K, ranks, alphas = self.clients, self.ranks, self.alphas
        if not check_index_list(ranks, 1):
            raise ValueError(f"federated.ranks(={ranks!r}) must be a non-empty list of ints >= 1")
        if len(ranks) > K:
            raise ValueError(f"federated.ranks has {len(ranks)} entries for federated.clients(={K}): give at most K "
                             f"(a shorter list repeats: clients 0, 1, ... take ranks[k % len(ranks)])")
        if alphas is not None and (not isinstance(alphas, list) or len(alphas) != len(ranks) or
                                   not all(isinstance(a, numbers.Real) and not isinstance(a, bool)
                                           and math.isfinite(a) and a > 0 for a in alphas)):
            raise ValueError(f"federated.alphas(={alphas!r}) must be null (alpha = 2 r) or one finite positive "
                             f"number per entry of federated.ranks(={ranks})")

    def client_ranks(self) -> tuple[list[int], list[float]]:
        """Per-client LoRA ranks and alphas: the ``ranks`` pattern repeated to K clients
        (client k takes ``ranks[k % len(ranks)]``), alpha = 2 r where ``alphas`` is null."""
        alphas = self.alphas or [2 * r for r in self.ranks]
        reps = -(-self.clients // len(self.ranks))
        return (list(self.ranks) * reps)[:self.clients], [float(a) for a in (list(alphas) * reps)[:self.clients]]


@dataclass(frozen=True)
class Train:
    """The ``train`` section: each client's local steps and optimizer."""

    steps: int
    batch_size: int
    lr: float
    head_lr: float
    weight_decay: float
    use_rslora: bool

    def __post_init__(self):
        check_int("train.steps", self.steps, 0)
        check_int("train.batch_size", self.batch_size)
        check_real("train.lr", self.lr)
        check_real("train.head_lr", self.head_lr)
        check_real("train.weight_decay", self.weight_decay, zero_ok=True)
        if not isinstance(self.use_rslora, bool):
            raise ValueError(f"train.use_rslora(={self.use_rslora!r}) must be true or false")
