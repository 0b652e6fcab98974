"""Argument checks shared by the public functions.

Every public entry point validates once here and then calls a private ``_impl``
that trusts its inputs. Messages name the argument and echo the offending value,
so a user never has to read a LAPACK error or find a NaN in a result.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

__all__ = [
    "check_factor",
    "check_eig_dtype",
    "check_finite",
    "maybe_non_finite",
    "check_pair",
    "check_rank",
    "check_tau",
    "check_tau_or_rank",
    "check_client_numbers",
    "NonFiniteError",
    "compute_dtype",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the arithmetic runs in for inputs of ``dtype``.

    float32 and float64 compute in their own precision; float16 and bfloat16 have too
    few mantissa bits for a QR and an eigenproblem (eps 1e-3 and 8e-3), so they are
    promoted to float32 and the result is cast back.
    """
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def check_factor(name: str, t: object) -> torch.Tensor:
    """A dense floating tensor with values (not on the meta device), at least two dimensions."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got dtype={t.dtype}")
    if t.is_complex():
        raise TypeError(f"{name} must be real, got dtype={t.dtype}")
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor, got layout={t.layout}: pass {name}.to_dense()")
    if t.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (a shape without values, e.g. a model built under "
                         f"init_empty_weights): load its values first")
    if t.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions (*, rows, cols), got shape={tuple(t.shape)}"
        )
    return t


def maybe_non_finite(tensors: Sequence[torch.Tensor]) -> bool:
    """False when every entry of every tensor is certainly finite; True when one may not be.

    One plain sum per tensor (float32 accumulation for float16 / bfloat16), the sums added
    in float64 on their device and read in one host read per device: a NaN or an infinity
    anywhere makes the total non-finite. Finite entries can also give a non-finite total (overflow past the dtype's
    largest value), so True only tells the caller to run the exact scan that names the
    culprit (:func:`check_finite`); it never refuses anything itself. This is the cheap
    screen every stacking method shares: torch's infinity norm
    (``get_total_norm(ord=inf)``) runs a slow path on the CPU, about 50x a sum on a
    768 x 80 stack.
    """
    with torch.no_grad():  # factors that require grad (a client's live LoRA weights) build no graph
        return _maybe_non_finite(tensors)


def _maybe_non_finite(tensors: Sequence[torch.Tensor]) -> bool:
    by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        if t.numel():
            s = t.sum(dtype=torch.float32) if t.dtype in _LOW_PRECISION else t.sum()
            by_kind.setdefault((t.device, s.dtype), []).append(s)
    totals: dict[torch.device, torch.Tensor] = {}
    for (device, _), sums in by_kind.items():
        total = (sums[0] if len(sums) == 1 else torch.stack(sums).sum()).double()  # float32 sums add in float64
        totals[device] = total if device not in totals else totals[device] + total
    return not all(math.isfinite(float(total)) for total in totals.values())


class NonFiniteError(ValueError):
    """A factor holds a NaN or an infinity (raised by :func:`check_finite`, with its index)."""


def check_finite(name: str, t: torch.Tensor) -> None:
    """Raise :class:`NonFiniteError` if ``t`` holds a NaN or an infinity.

    The common case costs one reduction and no allocation: a NaN or an infinity makes
    the sum non-finite. Only a non-finite sum (which finite entries can also give, by
    overflow) pays for the elementwise check that finds the index.
    """
    if t.numel() == 0 or bool(torch.isfinite(t.sum())):
        return
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise NonFiniteError(f"{name} contains a non-finite value {t[idx].item()} at index {idx}")


def check_pair(B: torch.Tensor, A: torch.Tensor, bname: str = "B", aname: str = "A") -> None:
    """``B`` (*, m, r) and ``A`` (*, r, n) that multiply, with equal batch shapes."""
    check_factor(bname, B)
    check_factor(aname, A)
    if B.shape[-1] != A.shape[-2]:
        raise ValueError(
            f"{bname} (*, m, r) and {aname} (*, r, n) must share r: "
            f"{bname}.shape={tuple(B.shape)}, {aname}.shape={tuple(A.shape)}"
        )
    if B.shape[:-2] != A.shape[:-2]:
        raise ValueError(
            f"{bname} and {aname} must have the same batch shape: "
            f"{bname}.shape={tuple(B.shape)}, {aname}.shape={tuple(A.shape)}"
        )
    if B.dtype != A.dtype:
        raise TypeError(f"{bname} and {aname} must share a dtype: {B.dtype} != {A.dtype}")
    if B.device != A.device:
        raise ValueError(f"{bname} and {aname} must be on one device: {B.device} != {A.device}")


def _scalar(name: str, value: object, kind: str) -> object:
    """A 0-dimensional tensor as its Python number; anything else as given.

    A tensor is accepted where a number is, but only a 0-dimensional one of a real
    numeric dtype (integer for ``kind="int"``): a bool tensor is refused like ``True``.
    """
    if not isinstance(value, torch.Tensor):
        return value
    integral = not value.is_floating_point() and not value.is_complex()
    if value.dim() != 0 or value.dtype == torch.bool or value.is_complex() or (kind == "int" and not integral):
        raise TypeError(
            f"{name}(={value!r}) must be {'an int' if kind == 'int' else 'a real number'}; a tensor must be "
            f"0-dimensional with a{'n integer' if kind == 'int' else ' real, non-bool'} dtype, got "
            f"shape={tuple(value.shape)}, dtype={value.dtype}"
        )
    return value.item()


def check_tau(tau: object) -> float:
    tau = _scalar("tau", tau, "real")
    if isinstance(tau, bool) or not isinstance(tau, numbers.Real):
        raise TypeError(f"tau(={tau!r}) must be a real number in (0, 1]")
    tau = float(tau)
    if math.isnan(tau) or not 0.0 < tau <= 1.0:
        raise ValueError(f"tau(={tau}) must be in (0, 1]")
    return tau


def check_rank(rank: object, limit: int | None) -> int:
    """An int rank in [1, limit] (``limit=None``: any rank >= 1)."""
    rank = _scalar("rank", rank, "int")
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral):
        raise TypeError(f"rank(={rank!r}) must be an int")
    rank = int(rank)
    if limit is None:
        if rank < 1:
            raise ValueError(f"rank(={rank}) must be at least 1")
    elif rank < 1 or rank > limit:
        raise ValueError(f"rank(={rank}) must be in [1, min(d, r)={limit}]")
    return rank


def check_tau_or_rank(tau: object, rank: object, default_tau: float, B: torch.Tensor,
                      A: torch.Tensor) -> tuple[float | None, int | None]:
    """A per-call (tau, rank) request for stacks B (*, m, r), A (*, r, n): at most one of the
    two, ``rank`` within min(m, r, n), ``tau`` defaulting to ``default_tau``; returns the
    checked pair with the other None."""
    if tau is not None and rank is not None:
        raise ValueError(f"pass at most one of tau and rank, got tau={tau!r}, rank={rank!r}")
    if rank is not None:
        return None, check_rank(rank, min(B.shape[-2], B.shape[-1], A.shape[-1]))
    return check_tau(default_tau if tau is None else tau), None


def check_eig_dtype(eig_dtype: object) -> torch.dtype:
    """float32 or float64: the dtypes LAPACK (and cuSOLVER) have symmetric eigensolvers for."""
    if not isinstance(eig_dtype, torch.dtype) or not eig_dtype.is_floating_point:
        raise TypeError(f"eig_dtype(={eig_dtype!r}) must be a floating torch.dtype")
    if eig_dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"eig_dtype(={eig_dtype}) must be torch.float32 or torch.float64: there is no {eig_dtype} "
            "symmetric eigensolver, and its precision could not resolve the spectrum"
        )
    return eig_dtype


def check_client_numbers(name: str, values: object, count: int, *, nonnegative: bool) -> list[float]:
    """Per-client weights or scales: ``count`` finite real numbers."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().reshape(-1).tolist()
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of {count} numbers, got {type(values).__name__}")
    if len(values) != count:
        raise ValueError(f"{name} has {len(values)} entries but there are {count} clients: {name}={list(values)}")
    out = []
    for k, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name}[{k}](={v!r}) must be a real number")
        v = float(v)
        if not math.isfinite(v):
            raise ValueError(f"{name}[{k}](={v}) must be finite")
        if nonnegative and v < 0:
            raise ValueError(f"{name}[{k}](={v}) must be non-negative")
        out.append(v)
    return out
