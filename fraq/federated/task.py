"""The task of a run: tokenized data, the clients' partitions, the model and its head.

Built once per run and shared by every method (and by every round of a Flower node);
:meth:`Task.derive` gives the same data and model under another seed or client setting
without loading or encoding anything again. The corpus is drawn from ``dataset.seed``
(42 when unset), not from the run's seed: every seed of a run is evaluated on the same
test set, and the run's seed draws the partition, the initialization and the data order.
"""

from __future__ import annotations

import copy
import math
import time

import torch
from torch import nn

from fraq.aggregators import Aggregator, ClientLayer
from fraq.federated.config import Config
from fraq.federated.dataset import load_dataset
from fraq.federated.model import Backbone, Inputs, resolve_device
from fraq.federated.partition import partition, partition_summary
from fraq.federated.seeding import stable_seed

__all__ = ["DTYPES", "Task"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
"""``model.dtype`` names."""


class Task:
    """What every method of a run shares: model, tokenized data, client partitions.

    Built once per run; ``backbone`` may be passed in (tests build a tiny BERT).

    Attributes:
        config: the run's :class:`~fraq.federated.config.Config`.
        data: the data set (:func:`~fraq.federated.dataset.load_dataset`).
        parts: per client, the indices of its training examples.
        backbone: the :class:`~fraq.federated.model.Backbone`.
        clients: per client, its encoded examples and labels.
        test, test_labels: the encoded test split.
        pretrained: adapted module -> its pretrained weight (m, n).
        round1: round-1 signature -> the clients' uploads, heads, losses and training
            seconds, shared by the methods of this partition (:mod:`fraq.federated.round1`).
        share_round1: reuse them (True); False trains round 1 for every method.
    """

    share_round1: bool = True

    def __init__(self, config: Config, *, backbone: Backbone | None = None, log=print):
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self.data = load_dataset(config.dataset)
        m = config.model
        if backbone is None:
            backbone = Backbone(m.name, target_modules=m.target_modules, layers_to_transform=m.layers_to_transform,
                                layers_pattern=m.layers_pattern, pooling=m.pooling, max_length=m.max_length,
                                dtype=DTYPES[m.dtype], device=resolve_device(m.device), cache_prefix=m.cache_prefix)
        self.backbone = backbone
        t0 = time.perf_counter()
        self._train = backbone.encode(self.data.train_texts)
        self.test = backbone.encode(self.data.test_texts)
        backbone.prefix_cached()
        log(f"{len(self.data.train_texts)} training / {len(self.data.test_texts)} test examples, "
            f"{self.data.num_labels} labels; {len(backbone.targets)} adapted modules; data encoded in "
            f"{time.perf_counter() - t0:.1f} s"
            + (f" (frozen prefix of {backbone.cache_from} layers cached)" if backbone.cache_from else ""))
        self.test_labels = torch.from_numpy(self.data.test_labels)
        self.pretrained = backbone.weights()
        self._split(config, log)

    def _split(self, config: Config, log) -> None:
        """The clients' partitions and examples under ``config``'s seed and partition settings."""
        self.config = config
        p = config.partition
        K = config.federated.clients
        self.parts = partition(self.data.train_labels, K, scheme=p.scheme, alpha=p.alpha,
                               tasks=self.data.train_tasks, min_size=p.min_size, seed=config.seed)
        log(f"seed {config.seed}: partition {p.scheme}"
            + (f"(alpha={p.alpha})" if p.scheme == "dirichlet" else "") + " over " + str(K) + " clients")
        log(partition_summary(self.parts, self.data.train_labels, self.data.label_names))
        labels = torch.from_numpy(self.data.train_labels)
        train = self._train
        self.clients = [(Inputs(train.x[torch.from_numpy(ix)], train.mask[torch.from_numpy(ix)]),
                         labels[torch.from_numpy(ix)]) for ix in self.parts]
        self._layers: dict[type, ClientLayer] = {}
        self.round1: dict[str, tuple] = {}

    def derive(self, config: Config, log=print) -> Task:
        """This task under ``config``, another seed or client setting of the same model and data:
        the data, its encoding and the model are shared (loaded and encoded once), the
        partition is drawn again from ``config``'s seed. ``config`` must name the same model
        and data set (ValueError naming the section otherwise)."""
        for section in ("model", "dataset"):
            if getattr(config, section) != getattr(self.config, section):
                raise ValueError(f"derive: config.{section}(={getattr(config, section)!r}) differs from this "
                                 f"task's ({getattr(self.config, section)!r}); build a new Task")
        out = copy.copy(self)
        out._split(config, log)
        return out

    def seeds(self, *parts) -> int:
        """The run's seed function: :func:`~fraq.federated.seeding.stable_seed` of the run's seed and ``parts``."""
        return stable_seed(self.config.seed, *parts)

    def client_layer(self, agg: Aggregator) -> ClientLayer:
        """``agg``'s clients' layer on this task's modules (:meth:`Aggregator.client_layer`), built once."""
        key = type(agg)
        if key not in self._layers:
            self._layers[key] = agg.client_layer(self.backbone.targets, self.seeds)
        return self._layers[key]

    def new_head(self) -> nn.Linear:
        """The initial head, nn.Linear's default initialization drawn from the run's seed."""
        head = nn.Linear(self.backbone.hidden_size, self.data.num_labels)
        g = torch.Generator().manual_seed(stable_seed(self.config.seed, "head"))
        bound = 1 / math.sqrt(self.backbone.hidden_size)
        with torch.no_grad():
            head.weight.copy_((torch.rand(head.weight.shape, generator=g) * 2 - 1) * bound)
            head.bias.copy_((torch.rand(head.bias.shape, generator=g) * 2 - 1) * bound)
        return head.to(self.backbone.device)
