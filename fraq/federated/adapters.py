"""One round's client adapters as a safetensors file, for the fidelity benchmarks.

:func:`save_client_adapters` writes what K clients uploaded in one round: per client and
module peft's ``lora_A.weight`` (r_k, in) and ``lora_B.weight`` (out, r_k) under
``client{k}.{module}.lora_A.weight``, and in the file's metadata (JSON strings) each
client's rank, LoRA alpha and scale, data weight, the module names and shapes, and the
run (method, round, model). :func:`load_client_adapters` reads it back as
:class:`~fraq.aggregators.ClientUpdate` objects (what every aggregator takes), and
:meth:`RoundAdapters.stacks` gives, per module shape, the per-client factor lists in the
layout of :func:`fraq.synthetic.lora_clients`: ``Bs[k]`` (L, m, r_k), ``As[k]`` (L, r_k, n)
for the L modules of that shape, so a fidelity benchmark can swap synthetic factors for
real ones (the paper's Fig. 4, left).

Write one with ``python -m fraq.federated --set federated.save_adapters_round=3``
(files under ``OUT/adapters/``). :func:`export_peft` (:mod:`fraq.federated.export`) writes
a round-1 file's clients as peft adapter directories for
:func:`fraq.peft.aggregate_adapters` and ``PeftModel.from_pretrained``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from fraq._files import replacing_file
from fraq.aggregators import ClientUpdate

__all__ = ["RoundAdapters", "load_client_adapters", "save_client_adapters"]

_FORMAT = "fraq-client-adapters/1"


def save_client_adapters(path: str | Path, updates: Sequence[ClientUpdate], meta: dict | None = None) -> Path:
    """Write one round's uploads to ``path`` (safetensors); return the path.

    ``meta`` (JSON-serializable) is stored too; its ``alphas`` entry, one per client,
    records each client's ``lora_alpha``. FLoRG's single-matrix uploads ``(None, A)`` store
    ``A`` only.
    """
    from safetensors.torch import save_file

    if not updates:
        raise ValueError("updates is empty: nothing to save")
    tensors: dict[str, torch.Tensor] = {}
    clients = []
    modules = list(updates[0].factors)
    for k, u in enumerate(updates):
        if not isinstance(u, ClientUpdate):
            raise TypeError(f"updates[{k}] must be a ClientUpdate, got {type(u).__name__}")
        if list(u.factors) != modules:
            raise ValueError(f"updates[{k}] has different modules from updates[0]")
        for name, (B, A) in u.factors.items():
            tensors[f"client{k}.{name}.lora_A.weight"] = A.detach().contiguous().cpu()
            if B is not None:
                tensors[f"client{k}.{name}.lora_B.weight"] = B.detach().contiguous().cpu()
        ranks = {name: int(A.shape[-2]) for name, (_, A) in u.factors.items()}
        scale = {n: float(u.scale_of(n)) for n in modules}
        clients.append({"rank": ranks, "scale": scale, "weight": float(u.weight), "upload_rank": u.upload_rank})
    shapes = {n: [None if B is None else int(B.shape[0]), int(A.shape[-1])] for n, (B, A) in updates[0].factors.items()}
    fields = dict(modules=modules, shapes=shapes, clients=clients, meta=meta or {})
    header = {"format": _FORMAT, **{k: json.dumps(v, allow_nan=False) for k, v in fields.items()}}
    path = Path(path)
    with replacing_file(path) as tmp:  # written beside, renamed over: never a half-written file at path
        save_file(tensors, str(tmp), metadata=header)
    return path


@dataclass(frozen=True)
class RoundAdapters:
    """One round's client adapters, as read by :func:`load_client_adapters`.

    Attributes:
        updates: one :class:`~fraq.aggregators.ClientUpdate` per client (factors, LoRA
            scale, data weight), ready for any aggregator's ``aggregate``.
        modules: module names, in file order.
        meta: the run's metadata (method, round, model, alphas).
    """

    updates: list[ClientUpdate]
    modules: list[str]
    meta: dict

    @property
    def weights(self) -> list[float]:
        return [u.weight for u in self.updates]

    def ranks(self, module: str) -> list[int]:
        return [int(u.factors[module][1].shape[-2]) for u in self.updates]

    def scales(self, module: str) -> list[float]:
        return [float(u.scale_of(module)) for u in self.updates]

    def stacks(self, dtype: torch.dtype = torch.float32) -> dict[tuple, tuple[list[torch.Tensor], list[torch.Tensor], list[str]]]:
        """Modules grouped by (m, n, ranks, scales) -> ``(Bs, As, names)``.

        ``Bs[k]`` is (L, m, r_k) and ``As[k]`` (L, r_k, n) for the group's L modules, the
        batched layout of :func:`fraq.synthetic.lora_clients`; pass them with
        :attr:`weights` and the group's scales to :func:`fraq.stack` or a fidelity sweep.
        """
        groups: dict[tuple, list[str]] = {}
        for name in self.modules:
            B0, A0 = self.updates[0].factors[name]
            if B0 is None:
                raise ValueError("single-matrix (FLoRG) uploads have no (B, A) stacks")
            key = (B0.shape[0], A0.shape[-1], tuple(self.ranks(name)), tuple(self.scales(name)))
            groups.setdefault(key, []).append(name)
        out = {}
        for key, names in groups.items():
            Bs = [torch.stack([u.factors[n][0] for n in names]).to(dtype) for u in self.updates]
            As = [torch.stack([u.factors[n][1] for n in names]).to(dtype) for u in self.updates]
            out[key] = (Bs, As, names)
        return out


def load_client_adapters(path: str | Path) -> RoundAdapters:
    """Read a file written by :func:`save_client_adapters` (or ``--set federated.save_adapters_round=T``).

    Returns:
        :class:`RoundAdapters`: ``.updates`` (list of ClientUpdate), ``.modules``,
        ``.meta``, ``.weights``, and ``.stacks()`` for batched per-shape factor lists.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path(={str(path)!r}) is not a file")
    try:
        return _load(path)
    except Exception as e:  # safetensors' own error type, a header without our keys: a damaged file
        if isinstance(e, ValueError) and str(path) in str(e):
            raise
        raise ValueError(f"path(={str(path)!r}) cannot be read as a client-adapter file, truncated or damaged? "
                         f"({type(e).__name__}: {e}): save that round again") from None


def _load(path: Path) -> RoundAdapters:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        header = f.metadata() or {}
        if header.get("format") != _FORMAT:
            raise ValueError(f"{path} is not a client-adapter file (format {header.get('format')!r}, "
                             f"expected {_FORMAT!r})")
        modules = json.loads(header["modules"])
        clients = json.loads(header["clients"])
        keys = set(f.keys())
        updates = []
        for k, c in enumerate(clients):
            factors = {}
            for name in modules:
                kb = f"client{k}.{name}.lora_B.weight"
                B = f.get_tensor(kb) if kb in keys else None
                factors[name] = (B, f.get_tensor(f"client{k}.{name}.lora_A.weight"))
            scales = c["scale"]
            scale = next(iter(scales.values())) if len(set(scales.values())) == 1 else scales
            updates.append(ClientUpdate(factors, scale=scale, weight=c["weight"], upload_rank=c["upload_rank"]))
    return RoundAdapters(updates, modules, json.loads(header["meta"]))
