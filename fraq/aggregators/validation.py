"""A round's uploads checked before any aggregation: :func:`validate_updates`.

Every client must upload the same modules; per module, every client's factors must share
m, n, dtype and device (ranks may differ), and their LoRA scales must be finite and
positive. The checks run per module over all clients at once, and only where one fails
client by client, so that the error names the client and module. The aggregators
(:meth:`fraq.aggregators.Aggregator.aggregate`) and the certificate
(:func:`fraq.aggregators.certify`) both start here.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence

import torch

from fraq._validation import check_factor, check_finite, check_pair, maybe_non_finite
from fraq.aggregators.group import ModuleSpec
from fraq.aggregators.payload import ClientUpdate

__all__ = ["detached", "validate_updates", "validated"]


def _check_scale(where: str, v: object) -> float:
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{where}(={v!r}) must be a real number")
    v = float(v)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{where}(={v}) must be a finite positive LoRA scale alpha / r")
    return v


def detached(u: ClientUpdate) -> ClientUpdate:
    """``u`` with factors that require grad (``nn.Parameter``, a client's live LoRA weights)
    detached: every aggregator works on the values, builds no autograd graph and returns
    tensors that do not require grad (as :func:`fraq.recompress` does)."""
    for B, A in u.factors.values():  # a plain loop: it runs for every (client, module) pair
        if A.requires_grad or (B is not None and B.requires_grad):
            return dataclasses.replace(u, factors={name: tuple(None if t is None else t.detach() for t in pair)
                                                   for name, pair in u.factors.items()})
    return u


def validate_updates(updates: object, *, single_matrix: bool = False,
                     check_values: bool = True) -> tuple[list[ClientUpdate], list[ModuleSpec]]:
    """Check a round's uploads; return them as a list and one :class:`ModuleSpec` per module
    (:func:`validated`, whose rules these are)."""
    updates, specs, _ = validated(updates, single_matrix=single_matrix, check_values=check_values)
    return updates, specs


def validated(updates: object, *, single_matrix: bool = False,
               check_values: bool = True) -> tuple[list[ClientUpdate], list[ModuleSpec], bool]:
    """Check a round's uploads; return them as a list and one :class:`ModuleSpec` per module.

    Every client must upload the same modules; per module, every client's factors must
    share m, n, dtype and device (ranks may differ; methods that cannot take mixed ranks
    say so). With ``check_values`` every factor is also scanned for NaN and infinity.

    The checks run per module over all clients at once (:func:`_module_spec`), and the
    finiteness of every factor in one reduction and one host read (:func:`_check_values`);
    only when one of them fails are the clients' factors checked one by one, so that the
    error names the client and module. The third value says whether a factor may require
    grad (True where a module took the one-by-one checks), so the caller detaches only then.
    """
    if isinstance(updates, ClientUpdate) or not isinstance(updates, Sequence) or isinstance(updates, (str, bytes)):
        raise TypeError(f"updates must be a sequence of ClientUpdate, got {type(updates).__name__}")
    updates = list(updates)
    if not updates:
        raise ValueError("updates is empty: aggregation needs at least one client")
    for k, u in enumerate(updates):
        if not isinstance(u, ClientUpdate):
            raise TypeError(f"updates[{k}] must be a ClientUpdate, got {type(u).__name__}")
        if not isinstance(u.factors, Mapping):
            raise TypeError(f"updates[{k}].factors must be a mapping module -> (B, A), got {type(u.factors).__name__}")
        if u.upload_rank is not None and (isinstance(u.upload_rank, bool) or not isinstance(u.upload_rank, int)
                                          or u.upload_rank < 0):
            raise ValueError(f"updates[{k}].upload_rank(={u.upload_rank!r}) must be None or an int >= 0")
    names = list(updates[0].factors)
    if not names:
        raise ValueError("updates[0].factors is empty: no modules to aggregate")
    for k, u in enumerate(updates[1:], start=1):
        if set(u.factors) != set(names):
            missing = sorted(set(names) - set(u.factors))
            extra = sorted(set(u.factors) - set(names))
            raise ValueError(f"updates[{k}] has different modules from updates[0]: missing {missing}, extra {extra}")
    plain = [_plain_scale(u.scale) for u in updates]
    specs, grad = [], False
    for name in names:
        fast = None if single_matrix else _module_spec(name, updates, plain)
        if fast is None:
            specs.append(_module_spec_checked(name, updates, single_matrix))
            grad = True  # not known: every client is looked at (:func:`detached`)
        else:
            specs.append(fast[0])
            grad = grad or fast[1]
    if check_values:
        _check_values(updates, names)
    return updates, specs, grad


def _plain_scale(scale: object) -> float | None:
    """A client's one LoRA scale for every module, if it is a valid one (else None: the
    scale is checked module by module, naming the module)."""
    if isinstance(scale, bool) or not isinstance(scale, (float, int)) or not math.isfinite(scale) or scale <= 0:
        return None
    return float(scale)


def _module_spec(name: str, updates: list[ClientUpdate], plain: list[float | None]) -> tuple[ModuleSpec, bool] | None:
    """Module ``name``'s spec, checked over all clients at once, and whether any of its
    factors requires grad; None when any check fails (the caller then checks client by
    client, :func:`_module_spec_checked`, and names it). One loop of plain comparisons per
    client, nothing called per client: this runs for every (client, module) pair, the
    Python cost of a round that grows with the model."""
    Tensor, strided = torch.Tensor, torch.strided
    pairs = [u.factors[name] for u in updates]
    B0, A0 = _pair(pairs[0])
    if not isinstance(A0, Tensor) or not isinstance(B0, Tensor) or A0.dim() != 2 or B0.dim() != 2:
        return None
    dtype, device = A0.dtype, A0.device
    if not dtype.is_floating_point or device.type == "meta":
        return None
    m, n = B0.shape[0], A0.shape[1]
    ranks = []
    grad = False
    for p in pairs:
        if (type(p) is not tuple and type(p) is not list) or len(p) != 2:
            return None
        B, A = p
        if not isinstance(A, Tensor) or not isinstance(B, Tensor):
            return None
        try:
            (bm, br), (ar, an) = B.shape, A.shape
        except ValueError:  # not 2-D
            return None
        if bm != m or an != n or br != ar or B.dtype is not dtype or A.dtype is not dtype or \
                B.layout is not strided or A.layout is not strided or B.device != device or A.device != device:
            return None
        grad = grad or B.requires_grad or A.requires_grad
        ranks.append(ar)
    scales = []
    for k, (u, flat) in enumerate(zip(updates, plain)):
        if flat is None:
            raw = u.scale[name] if isinstance(u.scale, Mapping) and name in u.scale else u.scale
            if isinstance(raw, Mapping):
                return None
            flat = _check_scale(f"updates[{k}].scale for {name!r}", raw)
        scales.append(flat)
    return ModuleSpec(name, m, n, tuple(ranks), tuple(scales), dtype, device), grad


def _pair(p: object) -> tuple[object, object]:
    """``p`` as (B, A) if it is a tuple or list of two, else (None, None) (not a pair)."""
    return p if (type(p) is tuple or type(p) is list) and len(p) == 2 else (None, None)


def _check_values(updates: list[ClientUpdate], names: list[str]) -> None:
    """Refuse NaN and infinity in any factor: one sum per factor added on the device and
    read in one host read (:func:`fraq._validation.maybe_non_finite`); only when that total
    is not finite is every factor scanned, in upload order, to name the first (a total that
    overflowed from finite entries names none and passes)."""
    factors = [t for u in updates for name in names for t in u.factors[name] if t is not None and t.numel()]
    if not maybe_non_finite(factors):
        return
    for k, u in enumerate(updates):
        for name in names:
            B, A = u.factors[name]
            where = f"updates[{k}].factors[{name!r}]"
            if B is not None:
                check_finite(f"{where}[0]", B)
            check_finite(f"{where}[1]", A)


def _module_spec_checked(name: str, updates: list[ClientUpdate], single_matrix: bool) -> ModuleSpec:
    """Module ``name``'s spec, every client's factors checked one by one: the first that
    fails raises, naming the client and module."""
    ranks, scales = [], []
    ref = None
    for k, u in enumerate(updates):
        where = f"updates[{k}].factors[{name!r}]"
        pair = u.factors[name]
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{where} must be a pair (B, A), got {type(pair).__name__}")
        B, A = pair
        if single_matrix:
            if B is not None:
                raise ValueError(f"{where}: FLoRG clients train one matrix per module (update s L A^T A R); "
                                 f"pass (None, A) with A of shape (r, min(m, n)), got a B of type "
                                 f"{type(B).__name__}")
            check_factor(f"{where}[1]", A)
            m, r, n = None, A.shape[-2], A.shape[-1]
        else:
            if B is None:
                raise ValueError(f"{where}[0] is None: this method needs LoRA factors (B, A)")
            check_pair(B, A, f"{where}[0]", f"{where}[1]")
            m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
        if A.dim() != 2:
            raise ValueError(f"{where}: one module's factors must be 2-D, got A.shape={tuple(A.shape)}")
        if ref is None:
            ref = (m, n, A.dtype, A.device)
        elif (m, n) != ref[:2]:
            raise ValueError(f"{where}: shape (m, n)=({m}, {n}) differs from updates[0]'s {ref[:2]}")
        elif A.dtype != ref[2]:
            raise TypeError(f"{where}: dtype {A.dtype} differs from updates[0]'s {ref[2]}")
        elif A.device != ref[3]:
            raise ValueError(f"{where}: device {A.device} differs from updates[0]'s {ref[3]}")
        ranks.append(r)
        raw = u.scale[name] if isinstance(u.scale, Mapping) and name in u.scale else u.scale
        if isinstance(raw, Mapping):
            raise ValueError(f"updates[{k}].scale has no entry for module {name!r}")
        scales.append(_check_scale(f"updates[{k}].scale for {name!r}", raw))
    return ModuleSpec(name, ref[0], ref[1], tuple(ranks), tuple(scales), ref[2], ref[3])
