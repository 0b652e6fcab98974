"""A tiny random BERT and peft adapters of it, to try ``fraq aggregate`` on (``fraq example-adapters``)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

from fraq._files import check_parent, replacing_dir

__all__ = ["example_clients"]


def example_clients(directory: str | os.PathLike, *, clients: int = 3, seed: int = 0) -> list[Path]:
    """Write a tiny random BERT to ``directory/base`` and ``clients`` peft adapters of it.

    No download: the model is built from a ``BertConfig`` (2 layers, hidden size 32) with
    seeded weights and saved with ``save_pretrained``. The adapters target ``query``,
    ``key``, ``value`` and ``dense`` (13 modules with the pooler, shapes 32 x 32, 37 x 32 and
    32 x 37) and
    cycle through (r=4, alpha=8), (r=8, alpha=16, rsLoRA), (r=2, alpha=4 with a
    ``rank_pattern`` and an ``alpha_pattern``). Their factors are random with decaying
    column norms (peft initializes B = 0), so the aggregate has a spectrum to truncate.
    Needs transformers and peft (``pip install -e '.[fl]'``). Returns the adapter directories.

    ``directory`` must be missing or empty; it appears whole (built beside, then renamed),
    with ``base_model_name_or_path`` of every adapter the absolute path of the final
    ``directory/base``, so ``AutoPeftModel.from_pretrained`` finds the base from any
    working directory (and so does an aggregate, which keeps the first client's).
    """
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients(={clients!r}) must be an int >= 1")
    directory = Path(directory)
    base = Path(os.path.abspath(directory)) / "base"  # what the adapters record: valid from any directory
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ValueError(f"directory(={str(directory)!r}) exists and is not an empty directory")
    check_parent(directory, "directory")
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=32)
    kinds = [dict(r=4, lora_alpha=8), dict(r=8, lora_alpha=16, use_rslora=True),
             dict(r=2, lora_alpha=4, rank_pattern={"layer.1.attention.self.query": 6}, alpha_pattern={"value": 3})]
    paths = []
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the tiny model's load report and progress bars are noise here
    hf_logging.disable_progress_bar()
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), replacing_dir(directory) as tmp:
            warnings.simplefilter("ignore", FutureWarning)  # transformers deprecations peft still triggers
            # peft looks for the base's config at the recorded path, which exists only after the rename;
            # no embedding is adapted, so its vocabulary check has nothing to find
            warnings.filterwarnings("ignore", "Could not find a config file", UserWarning)
            torch.manual_seed(seed)
            BertModel(config).save_pretrained(tmp / "base")
            for k in range(clients):
                model = get_peft_model(BertModel.from_pretrained(tmp / "base"),
                                       LoraConfig(target_modules=["query", "key", "value", "dense"], **kinds[k % 3]))
                model.peft_config["default"].base_model_name_or_path = str(base)  # after the rename
                with torch.no_grad():
                    for name, p in model.named_parameters():
                        if "lora_" in name:
                            r = p.shape[0] if "lora_A" in name else p.shape[1]
                            decay = 0.8 ** torch.arange(r, dtype=p.dtype)
                            p.copy_(torch.randn_like(p) * (decay[:, None] if "lora_A" in name else decay) * 0.1)
                model.save_pretrained(tmp / f"client{k}")
                paths.append(directory / f"client{k}")
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    return paths
