"""Basis backends for :func:`fraq.recompress`, by name: the one registry.

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
express``                   steps, a larger float32 rounding than the cubic's
                            (see fraq.backends.newton_schulz, "Accuracy")
``newton-schulz-lstsq``     Polar Express to tolerance, least-squares coordinates  near
``newton-schulz-direct``    Polar Express to tolerance, direct coordinates Q^T X   near
``newton-schulz-muon``      Muon's quintic, 5 steps, direct coordinates            no
==========================  ====================================================  ======

"near": exact up to the iterate's remaining orthogonality error (about the tolerance).
The Newton-Schulz bases are exact in the same sense as Householder's but their float32
rounding is a few times larger (see :mod:`fraq.backends.newton_schulz`, "Accuracy").
``newton-schulz-muon`` is a documented reference that does not converge.

**The registry.** :data:`REGISTRY` maps each name to a :class:`BackendSpec`: the
callable, whether it is exact, and its FLOP model. Everything else reads it:
:data:`BACKENDS` (name -> callable) and :data:`EXACT_BACKENDS` (the exact names, in
registration order) are live read-only views of it, :func:`fraq.flops.fraq_flops` takes
the backend's cost from it, and the benchmarks, experiments and figures list backends
from it. A new backend needs one call::

    from fraq.backends import register_backend
    from fraq._routine_flops import cholesky_flops, gemm_flops, gram_flops, trsm_flops

    def gram_cholesky_flops(d, r, p, *, steps=None, gram="gemm"):
        # basis of X (d x r) plus Q applied to U_p (r x p); fraq_flops adds the pipeline
        return gram_flops(d, r, gram) + cholesky_flops(r) + trsm_flops(r, p) + gemm_flops(d, r, p)

    register_backend("gram-cholesky", gram_cholesky, exact=True, flops=gram_cholesky_flops)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch

from fraq._defaults import DEFAULTS, UNMEASURED, Column
from fraq.backends.base import INFO_REDUCERS, Backend, Basis
from fraq.backends.cholesky import cholesky, cholesky_basis_flops, cholesky_deferred
from fraq.backends.cholesky_qr import cholesky_qr2, cholesky_qr2_flops
from fraq.backends.householder import householder, householder_flops
from fraq.backends.newton_schulz import newton_schulz, newton_schulz_flops
from fraq.backends.polar import polar, polar_flops

__all__ = [
    "AUTO",
    "BACKENDS",
    "DEVICE_DEFAULTS",
    "EXACT_BACKENDS",
    "REGISTRY",
    "Backend",
    "BackendSpec",
    "Basis",
    "FlopModel",
    "get_backend",
    "register_backend",
    "resolve_backend",
]

FlopModel = Callable[..., float]
"""``cost(d, r, p, *, steps=None, gram="gemm") -> float``: FLOPs of the basis of X (d x r)
plus applying Q to U_p (r x p), for d = min(m, n); ``gram`` is ``"gemm"`` (as the code
runs a symmetric product) or ``"syrk"`` (at half, the paper's convention); ``steps`` is
an iteration count for data-dependent backends. :func:`fraq.flops.fraq_flops` adds the
pipeline around the basis (H, the Gram, the eigenproblem, R_p)."""


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend.

    Attributes:
        fn: the backend, ``X (*, d, r) -> Basis``.
        exact: the basis is orthonormal with X = Q C to working precision, so FRAQ's
            result is a best rank-p approximation (the test suite checks every exact
            backend for it).
        flops: its :data:`FlopModel`, or None when it has none (then
            :func:`fraq.flops.fraq_flops` refuses it by name).
        info_rules: how each ``info`` key it sets combines over a batch computed in
            parts (key -> ``"sum"``, ``"max"`` or ``"all"``; see
            :func:`fraq.backends.base.merge_info`); keys not named keep the first value.
        deferred: the same basis with its per-matrix verdict left pending, for
            :func:`fraq.recompress` to read in its one host synchronization (see
            :data:`fraq.backends.base.Backend`), or None: the pipeline calls ``fn``.
        scale_invariant: the basis of X D is the basis of X with C scaled by D, to the
            last bit, for every diagonal D of powers of two (Householder QR: each
            reflector is computed from, and applied to, whole columns). For the others
            :func:`fraq.recompress` equilibrates X's columns against Y's rows first
            (:func:`fraq._range.equilibrate`), which leaves the product unchanged.
        static: the static pipeline (:mod:`fraq._static`) computes this basis in its one pass
            at fixed shapes (the Cholesky basis, C = L^T of X's Gram formed in float64, its
            verdicts on the device), so ``pipeline="static"`` serves the backend where the
            dtype and the Gram's form allow (:func:`fraq._static.applies`). True only for a
            backend whose basis is that one: the static pass does not call ``fn``.
    """

    fn: Backend
    exact: bool = False
    flops: FlopModel | None = None
    info_rules: Mapping[str, str] = field(default_factory=dict)
    deferred: Backend | None = None
    scale_invariant: bool = False
    static: bool = False


REGISTRY: dict[str, BackendSpec] = {}
"""Backend name -> :class:`BackendSpec`; add to it with :func:`register_backend`."""


def register_backend(name: str, fn: Backend, *, exact: bool = False, flops: FlopModel | None = None,
                     info_rules: Mapping[str, str] | None = None, deferred: Backend | None = None,
                     scale_invariant: bool = False, static: bool = False) -> None:
    """Make ``fn`` available as ``recompress(..., backend=name)``, with its exactness and FLOP model.

    Args:
        name: the backend's name; registering a name again replaces its entry.
        fn: ``X (*, d, r) -> Basis`` (see :mod:`fraq.backends.base`).
        exact: True only if the basis is orthonormal with X = Q C to working precision
            whatever the data; default False, so an unverified backend is never listed
            with the exact ones.
        flops: ``cost(d, r, p, *, steps=None, gram="gemm")`` (see :data:`FlopModel`);
            default None: no analytic FLOP count.
        info_rules: how the ``info`` keys it sets combine over chunks (see
            :class:`BackendSpec`); default: every key keeps its first value.
        deferred: ``X (nb, d, r) -> Basis`` with ``rejected`` and ``complete`` set (see
            :data:`fraq.backends.base.Backend`), the pipeline's fast path; default None.
        scale_invariant: True only if the basis commutes with X's column scaling by
            powers of two to the last bit (see :class:`BackendSpec`); default False:
            :func:`fraq.recompress` equilibrates X's columns (against Y's rows) before calling ``fn``.
        static: True only if the basis is the static pass's Cholesky basis (see
            :class:`BackendSpec`); default False: every call runs the stepwise pipeline.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name(={name!r}) must be a non-empty str")
    if not callable(fn):
        raise TypeError(f"fn(={fn!r}) must be callable: X (*, d, r) -> Basis")
    if not isinstance(exact, bool):
        raise TypeError(f"exact(={exact!r}) must be a bool")
    if not isinstance(scale_invariant, bool):
        raise TypeError(f"scale_invariant(={scale_invariant!r}) must be a bool")
    if not isinstance(static, bool):
        raise TypeError(f"static(={static!r}) must be a bool")
    if flops is not None and not callable(flops):
        raise TypeError(f"flops(={flops!r}) must be callable: cost(d, r, p, *, steps, gram) -> float")
    if deferred is not None and not callable(deferred):
        raise TypeError(f"deferred(={deferred!r}) must be callable: X (nb, d, r) -> Basis with a pending verdict")
    rules = dict(info_rules or {})
    for key, rule in rules.items():
        if rule not in INFO_REDUCERS:
            raise ValueError(f"info_rules[{key!r}](={rule!r}) must be one of {sorted(INFO_REDUCERS)}")
    REGISTRY[name] = BackendSpec(fn=fn, exact=exact, flops=flops, info_rules=rules, deferred=deferred,
                                 scale_invariant=scale_invariant, static=static)


def get_backend(name: str) -> Backend:
    """The callable registered as ``name``; ValueError listing the names otherwise."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"backend(={name!r}) is not one of {sorted(REGISTRY)}")
    return REGISTRY[name].fn


class _Callables(Mapping):
    """name -> callable, read live from :data:`REGISTRY`."""

    def __getitem__(self, name: str) -> Backend:
        return REGISTRY[name].fn

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)

    def __repr__(self) -> str:
        return f"BACKENDS({list(REGISTRY)})"


class _ExactNames(Sequence):
    """The exact backends' names in registration order, read live from :data:`REGISTRY`."""

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, spec in REGISTRY.items() if spec.exact)

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return f"EXACT_BACKENDS({list(self._names())})"


BACKENDS: Mapping[str, Backend] = _Callables()
"""Backend name -> callable, a read-only view of :data:`REGISTRY`."""

EXACT_BACKENDS: Sequence[str] = _ExactNames()
"""Backends whose basis is orthonormal with X = Q C to working precision (see the table)."""

_FALLBACKS = {"fallback_count": "sum"}
_ITERATIVE = {"fallback_count": "sum", "steps": "max", "residual": "max", "converged": "all"}
register_backend("householder", householder, exact=True, flops=householder_flops, scale_invariant=True)
register_backend("polar", polar, exact=True, flops=polar_flops)
register_backend("cholesky-qr2", cholesky_qr2, exact=True, flops=cholesky_qr2_flops, info_rules=_FALLBACKS)
register_backend("cholesky", cholesky, exact=True, flops=cholesky_basis_flops, info_rules=_FALLBACKS,
                 deferred=cholesky_deferred, static=True)
register_backend("newton-schulz", partial(newton_schulz, schedule="cubic", coords="cholesky"), exact=True,
                 flops=newton_schulz_flops("cholesky"), info_rules=_ITERATIVE)
register_backend("newton-schulz-polar-express",
                 partial(newton_schulz, schedule="polar-express", coords="cholesky"), exact=True,
                 flops=newton_schulz_flops("cholesky"), info_rules=_ITERATIVE)
register_backend("newton-schulz-lstsq", partial(newton_schulz, schedule="polar-express", coords="lstsq"),
                 flops=newton_schulz_flops("lstsq"), info_rules=_ITERATIVE)
register_backend("newton-schulz-direct", partial(newton_schulz, schedule="polar-express", coords="direct"),
                 flops=newton_schulz_flops("direct"), info_rules=_ITERATIVE)
register_backend("newton-schulz-muon", partial(newton_schulz, schedule="muon", steps=5, coords="direct"),
                 flops=newton_schulz_flops("direct", default_steps=5), info_rules=_ITERATIVE)

AUTO = "auto"
"""``recompress(..., backend="auto")``: the backend the device's entry in
:data:`fraq._defaults.DEFAULTS` names for the input's device (``householder`` for float64
data), recorded resolved in ``result.backend``."""

DEVICE_DEFAULTS: Mapping[str, str] = Column("backend")
"""Device type -> the backend ``"auto"`` runs there: a read-only view of the ``backend``
column of :data:`fraq._defaults.DEFAULTS`, where each entry's evidence is."""


def resolve_backend(name: str, device: torch.device | str, dtype: torch.dtype | None = None) -> str:
    """``name``, or for ``"auto"`` the backend of ``device``'s type in :data:`fraq._defaults.DEFAULTS`,
    ``householder`` for float64 data (``dtype``; None: not known yet): ``cholesky`` has no
    wider dtype for their Gram and would hand every matrix to Householder anyway."""
    if name == AUTO:
        if dtype == torch.float64:
            return "householder"
        kind = torch.device(device).type
        return (DEFAULTS[kind] if kind in DEFAULTS else UNMEASURED).backend
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"backend(={name!r}) is not one of {[AUTO, *sorted(REGISTRY)]}")
    return name
