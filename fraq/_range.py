"""Exact power-of-two scaling, per matrix, for factors near the ends of a dtype's range.

Multiplying by 2^k changes only the exponent of a normal number, so it is exact: a
factor scaled this way has the same significant digits, and the scale can be put back
at the end without a rounding. :func:`fraq.recompress` and the Gram-based backends use it
to keep their squared intermediates (Gram matrices) away from underflow and overflow.

``torch.ldexp(x, e)`` is *not* used: it computes ``x * 2.0**e`` with 2^e rounded in the
dtype of ``e`` (or float32 for an integer ``e``), so 2^148 is inf in float32 and 2^-1100
is 0 in float64, although x * 2^e may be perfectly representable. Here 2^k is built
from its bit pattern and a large k is applied in several exact steps.
"""

from __future__ import annotations

import torch

__all__ = ["amax", "exponent", "pow2", "scale_pow2"]

_BITS = {  # dtype -> (integer dtype of its bit pattern, mantissa bits, exponent bias)
    torch.float32: (torch.int32, 23, 127),
    torch.float64: (torch.int64, 52, 1023),
}


def amax(t: torch.Tensor) -> torch.Tensor:
    """max |t| per matrix (*, rows, cols) -> (*); NaN where the matrix holds a NaN."""
    return t.abs().amax(dim=(-2, -1))


def exponent(t: torch.Tensor) -> torch.Tensor:
    """int64 e per matrix with max|t| = f * 2^e, 0.5 <= f < 1 (0 for a zero matrix).

    Scaling the matrix by 2^-e brings its largest entry into [0.5, 1). Subnormal entries
    get their true exponent (down to -1073 in float64, -148 in float32).
    """
    return torch.frexp(amax(t)).exponent.to(torch.int64)


def pow2(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """2^k exactly, for int k in the normal range of ``dtype`` (float32: [-126, 127])."""
    idt, mant, bias = _BITS[dtype]
    return ((k.to(idt) + bias) << mant).view(dtype)


def scale_pow2(t: torch.Tensor, e: torch.Tensor, parts: int) -> torch.Tensor:
    """t * 2^e exactly (unless the result itself under/overflows), in ``parts`` steps.

    Args:
        t: float32 or float64 tensor.
        e: int tensor broadcastable to t (one exponent per matrix: shape (nb, 1, 1)).
        parts: number of multiplications; each applies at most ceil(|e| / parts), which
            must stay in the normal exponent range. Two parts cover any factor's own
            exponent (|e| <= 1074 in float64, 149 in float32), three a product of two.

    All steps move in the direction of e, so an intermediate never leaves the range
    between t and the result.
    """
    rest = e.to(torch.int64)
    for i in range(parts, 0, -1):
        k = torch.div(rest, i, rounding_mode="floor")
        t = t * pow2(k, t.dtype)
        rest = rest - k
    return t
