"""A method spec checked against the aggregator registry, where a configuration names one.

:class:`fraq.methods.MethodSpec` reads the grammar (``"fraq:tau=0.80"``) without the
registry; :func:`method_aggregator` is the one check of a spec against it, shared by
:class:`fraq.federated.config.Config`, the round loop's
:class:`~fraq.federated.round_loop.MethodSetup` and the Flower run config. :func:`method_label`
is a spec's file-name-safe label, the name of its runs' files.
"""

from __future__ import annotations

import re

from fraq.methods import MethodSpec

__all__ = ["method_aggregator", "method_label", "parse_method"]


def parse_method(spec: str | MethodSpec) -> tuple[str, dict]:
    """``"fraq:tau=0.80,backend=householder"`` -> ``("fraq", {"tau": 0.8, "backend": "householder"})``
    (:meth:`fraq.methods.MethodSpec.parse`, the one grammar)."""
    parsed = MethodSpec.parse(spec)
    return parsed.name, parsed.kwargs


def method_aggregator(spec: str | MethodSpec, where: str = "method"):
    """The :class:`~fraq.aggregators.Aggregator` a method spec names, built with its options.

    The one check of a method spec, shared by :class:`Config`, the round loop's
    :class:`~fraq.federated.round_loop.MethodSetup` and the Flower run config: an unknown name,
    an unknown option or a bad option value raises ValueError naming ``where``, the spec and
    the option, e.g. ``method(='fraq:tau=abc'): tau(='abc') must be a real number in (0, 1]``.
    A :class:`~fraq.methods.MethodSpec` is used as it is; text is parsed first (a caller
    holding text is a front door). Building an aggregator does no work (it only stores its
    checked options).
    """
    from fraq.aggregators import AGGREGATORS, get_aggregator

    if not isinstance(spec, MethodSpec):
        try:
            spec = MethodSpec.parse(spec)  # its errors read "method(=...): ..."
        except ValueError as e:
            if where == "method":
                raise
            raise ValueError(f"{where}: {e}") from None
    text = str(spec)  # messages echo the spec as written
    if spec.name not in AGGREGATORS:
        raise ValueError(f"{where}(={text!r}): {spec.name!r} is not one of {sorted(AGGREGATORS)}")
    try:
        return get_aggregator(spec.name, **spec.kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}(={text!r}): {e}") from None


def method_label(spec: str | MethodSpec) -> str:
    """A file-name-safe label of a method spec: ``fraq:tau=0.80`` -> ``fraq-tau0.80``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(spec).strip().replace("=", "")).strip("-")
