"""The interface every basis backend implements.

FRAQ needs, for the oriented left factor X (*, d, r), an orthonormal Q (*, d, s) whose
span contains col(X) and the coordinates C = Q^T X (*, s, r), so that X = Q C
(the paper's Proposition 1 and Appendix D). A backend is a callable ``X -> Basis``.
The pipeline in :mod:`fraq.recompress` does the rest: H = C Y, the Gram eigenproblem,
the energy rule, and ``Basis.apply`` to map the retained directions back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["Basis", "Backend"]


@dataclass(frozen=True)
class Basis:
    """An orthonormal basis of col(X), held in whatever form is cheapest to apply.

    Attributes:
        C: (*, s, r) coordinates of X in the basis: X = Q C.
        apply: maps U (*, s, p) to Q U (*, d, p) without forming Q when it is implicit.
        info: diagnostics to copy into the result (fallbacks taken, iterations).
    """

    C: torch.Tensor
    apply: Callable[[torch.Tensor], torch.Tensor]
    info: dict = field(default_factory=dict)


Backend = Callable[[torch.Tensor], Basis]
