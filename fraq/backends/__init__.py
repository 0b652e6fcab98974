"""Basis backends for :func:`fraq.recompress`, by name.

Each backend maps the oriented left factor X (*, d, r) to a :class:`Basis`: coordinates
C with X = Q C, and a way to apply Q. ``householder`` is the default and the reference.

==========================  ====================================================  ======
name                        basis                                                 exact
==========================  ====================================================  ======
``householder``             reduced Householder QR, reflectors applied implicitly  yes
``polar``                   polar factor from the SVD, S = (X^T X)^{1/2} for R     yes
``cholesky-qr2``            two Cholesky-QR passes, per-matrix Householder         yes
                            fallback detected from the data
``cholesky``                one Cholesky of X's Gram formed in float64, per-       yes
                            matrix Householder fallback; float64 data: Householder
``newton-schulz``           classic cubic iteration to tolerance, Cholesky         yes
                            metric correction (pseudo-inverse if rank-deficient)
``newton-schulz-polar-      Polar Express schedule, otherwise as above: fewer      yes
express``                   steps, 1.3e-6 above the optimum in float32 (cubic:
                            8.5e-7), see fraq.backends.newton_schulz
``newton-schulz-lstsq``     Polar Express to tolerance, least-squares coordinates  near
``newton-schulz-direct``    Polar Express to tolerance, direct coordinates Q^T X   near
``newton-schulz-muon``      Muon's quintic, 5 steps, direct coordinates            no
==========================  ====================================================  ======

"near": exact up to the iterate's remaining orthogonality error (about the tolerance).
The Newton-Schulz bases are exact in the same sense as Householder's but their float32
rounding is a few times larger (see :mod:`fraq.backends.newton_schulz`, "Accuracy").
``newton-schulz-muon`` is a documented reference that does not converge.
"""

from __future__ import annotations

from functools import partial

from fraq.backends.base import Backend, Basis
from fraq.backends.cholesky import cholesky
from fraq.backends.cholesky_qr import cholesky_qr2
from fraq.backends.householder import householder
from fraq.backends.newton_schulz import newton_schulz
from fraq.backends.polar import polar

__all__ = ["BACKENDS", "EXACT_BACKENDS", "Backend", "Basis", "get_backend", "register_backend"]

BACKENDS: dict[str, Backend] = {
    "householder": householder,
    "polar": polar,
    "cholesky-qr2": cholesky_qr2,
    "cholesky": cholesky,
    "newton-schulz": partial(newton_schulz, schedule="cubic", coords="cholesky"),
    "newton-schulz-polar-express": partial(newton_schulz, schedule="polar-express", coords="cholesky"),
    "newton-schulz-lstsq": partial(newton_schulz, schedule="polar-express", coords="lstsq"),
    "newton-schulz-direct": partial(newton_schulz, schedule="polar-express", coords="direct"),
    "newton-schulz-muon": partial(newton_schulz, schedule="muon", steps=5, coords="direct"),
}

EXACT_BACKENDS: tuple[str, ...] = ("householder", "polar", "cholesky-qr2", "cholesky", "newton-schulz", "newton-schulz-polar-express")
"""Backends whose basis is orthonormal with X = Q C to working precision (see the table)."""


def register_backend(name: str, fn: Backend) -> None:
    """Make ``fn`` available as ``recompress(..., backend=name)``."""
    BACKENDS[name] = fn


def get_backend(name: str) -> Backend:
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(f"backend(={name!r}) is not one of {sorted(BACKENDS)}")
    return BACKENDS[name]
