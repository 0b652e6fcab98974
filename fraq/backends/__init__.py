"""Basis backends for :func:`fraq.recompress`, by name.

Each backend maps the oriented left factor X (*, d, r) to a :class:`Basis`: coordinates
C with X = Q C, and a way to apply Q. ``householder`` is the default and the reference.
"""

from __future__ import annotations

from fraq.backends.base import Backend, Basis
from fraq.backends.householder import householder

__all__ = ["BACKENDS", "Backend", "Basis", "get_backend", "register_backend"]

BACKENDS: dict[str, Backend] = {"householder": householder}


def register_backend(name: str, fn: Backend) -> None:
    """Make ``fn`` available as ``recompress(..., backend=name)``."""
    BACKENDS[name] = fn


def get_backend(name: str) -> Backend:
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(f"backend(={name!r}) is not one of {sorted(BACKENDS)}")
    return BACKENDS[name]
