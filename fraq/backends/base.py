"""The interface every basis backend implements.

FRAQ needs, for the oriented left factor X (*, d, r), an orthonormal Q (*, d, s) whose
span contains col(X) and the coordinates C = Q^T X (*, s, r), so that X = Q C
(the paper's Proposition 1 and Appendix D). A backend is a callable ``X -> Basis``.
The pipeline in :mod:`fraq._recompress` does the rest: H = C Y, the Gram eigenproblem,
the energy rule, and ``Basis.apply`` to map the retained directions back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["Basis", "Backend", "INFO_REDUCERS", "identity_basis", "merge_info"]

INFO_REDUCERS = {"sum": lambda a, b: a + b, "max": max, "all": lambda a, b: bool(a and b)}
"""How an ``info`` key of a batch computed in parts combines its parts' values: a count adds
up (``"sum"``), a worst case takes the largest (``"max"``), a success holds for all parts
(``"all"``). A key without a rule keeps the first value that is not None."""


def merge_info(infos: list[dict], rules: dict[str, str]) -> dict:
    """One ``info`` for a batch computed chunk by chunk, each key combined by its rule
    (``rules``: key -> a name in :data:`INFO_REDUCERS`; declared by the backend that sets
    the key, see :func:`fraq.backends.register_backend`)."""
    out: dict = {}
    for info in infos:
        for k, v in info.items():
            if k not in out or out[k] is None:
                out[k] = v
            elif v is not None and k in rules:
                out[k] = INFO_REDUCERS[rules[k]](out[k], v)
    return out


@dataclass(frozen=True)
class Basis:
    """An orthonormal basis of col(X), held in whatever form is cheapest to apply.

    Attributes:
        C: (*, s, r) coordinates of X in the basis: X = Q C.
        apply: maps U (*, s, p) to Q U (*, d, p) without forming Q when it is implicit.
        info: diagnostics to copy into the result (fallbacks taken, iterations).
        rejected: None for a complete basis; for a ``deferred`` one (see :data:`Backend`),
            (nb,) bool, True where C and ``apply`` are not to be trusted.
        complete: for a deferred basis, returns the complete one.
    """

    C: torch.Tensor
    apply: Callable[[torch.Tensor], torch.Tensor]
    info: dict = field(default_factory=dict)
    rejected: torch.Tensor | None = None
    complete: Callable[[], Basis] | None = None

    def completed(self) -> Basis:
        """This basis with every matrix right: ``complete()`` when a verdict is pending."""
        return self if self.rejected is None else self.complete()


Backend = Callable[[torch.Tensor], Basis]
"""``X (*, d, r) -> Basis``, every matrix's basis right (``rejected`` None).

A backend whose fast basis needs a per-matrix verdict read on the host (a fallback
count, say) may also register a ``deferred`` callable
(:func:`fraq.backends.register_backend`): the same basis computed the fast way for
every matrix, with ``rejected`` ((nb,) bool, X flattened to (nb, d, r)) marking the
matrices where it is wrong and ``complete()`` returning the corrected basis.
:func:`fraq.recompress` reads the verdict in the one host synchronization it makes
anyway, and completes (and recomputes) only when something was rejected, so the fast
path of a call synchronizes once. ``C`` and ``apply`` of a pending basis must still be
finite and safe to use on every matrix (they are discarded where rejected).
"""


def identity_basis(X: torch.Tensor, info: dict | None = None) -> Basis:
    """Q = I_d, C = X, for X (*, d, r) with r >= d: exact, because col(X) then lies in
    R^d = span(I_d), and every other orthonormal basis of it is a rotation of this one.

    No arithmetic at all; ``apply`` returns its argument. ``info`` gets ``basis="identity"``.
    """
    return Basis(C=X, apply=_unchanged, info=dict(info or {}, basis="identity"))


def _unchanged(U: torch.Tensor) -> torch.Tensor:
    return U
