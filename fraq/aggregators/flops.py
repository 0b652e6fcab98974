"""A registered method's analytic FLOPs: its aggregator class's ``flop_model``, by name.

The formulas are :mod:`fraq.flops`' (the paper's Table 5 and the pipelines the code runs);
which formula a method takes is its class's (:attr:`fraq.aggregators.Aggregator.flop_model`,
``basis_backend``), so the lookup by name lives here, beside the registry, and
:mod:`fraq.flops` needs nothing of the aggregators.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

from fraq.aggregators.registry import AGGREGATORS
from fraq.flops import MODELS

__all__ = ["analytic_flops", "model_flops"]


def analytic_flops(method: str, d: int, D: int, r: int, p: int, *, backend: str = "householder",
                   model: str = "full", steps: int | None = None, factored: bool = False,
                   identity: bool = False, kernel: str | None = None) -> float:
    """Analytic FLOPs of one d x D module with stacked rank r and output rank p.

    Args:
        method: a registered aggregator (:data:`fraq.aggregators.AGGREGATORS`) with a FLOP
            model, its class's ``flop_model`` (``fraq``, ``florist``, ``flexlora``, ``florg``,
            ``fedsvd``, ``fedmomentum`` in the package; Table 5 has rows for the first three
            only, :data:`fraq.flops.TABLE5_METHODS`).
        backend: FRAQ's basis backend (``model="full"`` only; a method whose class has
            ``basis_backend``).
        model: ``"table5"``, the paper's leading-order formulas exactly (FRAQ with a SYRK
            Gram, (2d + 3D) r^2); ``"full"``, the same pipelines with the constants of what
            the code runs and the lower-order terms: FRAQ from :func:`fraq_flops` (GEMM
            Gram, every registered backend), FLoRIST and FlexLoRA with their SVDs with
            singular vectors at ``gesdd``'s counts (:func:`svd_flops`).
        steps: Newton-Schulz step count, for those backends.
        factored: FRAQ's Gram formed factored (``recompress(gram="factored")``, or
            ``gram="auto"`` when ``info["product_gram_count"]`` is 0), ``model="full"`` only.
        identity: FRAQ's identity basis (r >= d; ``result.info["basis"] == "identity"``),
            ``model="full"`` only.
        kernel: the method's ``kernel`` option (``flexlora:kernel=fraq``,
            :mod:`fraq.aggregators._kernel`; ``florg:kernel=gram``), for a method whose FLOP
            model takes one; None: the method's default.

    Shapes are oriented here: d and D may come in either order.

    Raises:
        ValueError: a method that is not registered or has no FLOP model, naming it and
            those that have one.
    """
    if model not in MODELS:
        raise ValueError(f"model(={model!r}) must be one of {MODELS}")
    cls = AGGREGATORS.get(method) if isinstance(method, str) else None
    if cls is None or cls.flop_model is None:
        modelled = [n for n, c in AGGREGATORS.items() if c.flop_model is not None]
        raise ValueError(f"method(={method!r}) has no FLOP model: the methods with one are {modelled}")
    d, D = min(d, D), max(d, D)
    for flag, value in (("factored", factored), ("identity", identity)):
        if value and (model != "full" or not cls.basis_backend):
            raise ValueError(f"{flag}=True models a path of FRAQ (model='full'), not method(={method!r}) "
                             f"with model(={model!r})")
    extra = {}
    if kernel is not None:
        if "kernel" not in inspect.signature(cls.flop_model).parameters:
            raise ValueError(f"method(={method!r}) has no kernel option in its FLOP model, got kernel(={kernel!r})")
        extra["kernel"] = kernel
    if cls.basis_backend:
        return float(cls.flop_model(d, D, r, p, model=model, backend=backend, steps=steps, factored=factored,
                                    identity=identity, **extra))
    return float(cls.flop_model(d, D, r, p, model=model, **extra))


def model_flops(modules: Iterable[tuple[int, int, int]], method: str, r: int,
                ranks: Iterable[int] | int, **kwargs) -> float:
    """Eq. 14: the sum of per-module FLOPs over a model.

    Args:
        modules: (m, n, count) per group of equal-shape modules, e.g.
            ``[(g.m, g.n, g.count) for g in preset.groups]``.
        method, kwargs: as :func:`analytic_flops`.
        r: stacked rank (sum of the clients' ranks).
        ranks: output rank p of each module (one int for all, or one per module in the
            order the groups list them).
    """
    modules = list(modules)
    total_modules = sum(c for _, _, c in modules)
    ps = [ranks] * total_modules if isinstance(ranks, int) else [int(x) for x in ranks]
    if len(ps) != total_modules:
        raise ValueError(f"ranks has {len(ps)} entries for {total_modules} modules")
    out, i = 0.0, 0
    for m, n, count in modules:
        for _ in range(count):
            out += analytic_flops(method, m, n, r, ps[i], **kwargs)
            i += 1
    return out
