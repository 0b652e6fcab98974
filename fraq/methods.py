"""A method as one value: a registry name and its options, parsed once from one grammar.

The grammar, wherever a method is named (``fraq aggregate --method``, the harness's
``methods``, the Flower run config's ``method``, the rows of Tables 1-3)::

    NAME                      fraq
    NAME:KEY=VALUE,...        fraq:tau=0.95       fraq:backend=cholesky,tau=0.9
                              florist:tau=0.85    fraq:rank=8,tau=null

A value is read as JSON where it is JSON (``0.9``, ``8``, ``null``, ``true``) and kept as
text otherwise (``cholesky``); a dtype option (:data:`DTYPE_OPTIONS`: ``eig_dtype``) is
written by its torch name and given to the aggregator as that ``torch.dtype``
(``fraq:eig_dtype=float64`` -> ``torch.float64``), and any other value is refused where the
spec is parsed. :class:`MethodSpec` keeps each value's text as written, so
``str(spec)`` is the string it was parsed from (blanks around the separators dropped):
result labels and file names made from it do not change when a spec is passed on. The
form ``fraq:cholesky`` (a backend without its key) is refused with the spelling to use.

This module imports neither torch nor the registry: a spec is checked against the
registry where an aggregator is built from it (:func:`fraq.federated.method_specs.method_aggregator`).

Examples:
    >>> from fraq.methods import MethodSpec
    >>> spec = MethodSpec.parse("fraq:backend=cholesky,tau=0.9")
    >>> spec.name, spec.kwargs
    ('fraq', {'backend': 'cholesky', 'tau': 0.9})
    >>> str(spec)
    'fraq:backend=cholesky,tau=0.9'
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

__all__ = ["DTYPE_OPTIONS", "PACKAGE_METHODS", "MethodSpec"]

PACKAGE_METHODS = ("fedit", "lora-a2", "flora", "fedex-lora", "flexlora", "florg", "florist", "fraq", "fedsvd",
                   "fedmomentum")
"""The package's own methods' names, in registration order: what a command's help lists
without importing torch (``fraq.aggregators.AGGREGATORS`` holds the same first, then the
methods from outside the package; a test keeps the two equal)."""

DTYPE_OPTIONS = {"eig_dtype": ("float32", "float64")}
"""Options whose value is a torch dtype, each with the names it may be written as: the
grammar's text becomes the ``torch.dtype`` of that name (:attr:`MethodSpec.kwargs`)."""

_KEY = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class MethodSpec:
    """A method: its registry ``name`` and ``options``, (key, value text) pairs in the order written.

    Build one with :meth:`parse`; construction checks the parts, so a spec held is a spec
    that prints and parses back to itself (``MethodSpec.parse(str(spec)) == spec``).
    """

    name: str
    options: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip() or \
                any(c in self.name for c in ":,="):
            raise ValueError(f"method name(={self.name!r}) must be a non-empty registry name without blanks at "
                             f"its ends or ':', ',' and '='")
        if not isinstance(self.options, tuple):
            raise TypeError(f"options(={self.options!r}) must be a tuple of (key, value text) pairs")
        for pair in self.options:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                raise TypeError(f"option(={pair!r}) must be a (key, value text) pair of strings")
            key, raw = pair
            if not _KEY.fullmatch(key):
                raise ValueError(f"option key(={key!r}) must be an identifier")
            if raw != raw.strip() or "," in raw:
                raise ValueError(f"option {key}(={raw!r}): a value has no ',' and no blanks at its ends")
            if key in DTYPE_OPTIONS and raw not in DTYPE_OPTIONS[key] and raw != "null":
                raise ValueError(f"option {key}(={raw!r}) must be one of {', '.join(DTYPE_OPTIONS[key])} "
                                 f"(or null for the default)")
        keys = [k for k, _ in self.options]
        twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
        if twice is not None:
            raise ValueError(f"option {twice!r} is given twice; give it once")

    @classmethod
    def parse(cls, text: str | MethodSpec) -> MethodSpec:
        """The spec ``text`` names (module docstring), or ``text`` itself when it is a spec
        already; ValueError echoing ``text`` otherwise."""
        if isinstance(text, MethodSpec):
            return text
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"method(={text!r}) must be a non-empty string like 'fraq' or 'fraq:tau=0.80'")
        name, _, rest = text.strip().partition(":")
        name = name.strip()
        options = []
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, raw = item.partition("=")
            if not eq and _KEY.fullmatch(item.replace("-", "_")) and name == "fraq" and not options:
                raise ValueError(f"method(={text!r}): option {item!r} must be key=value; for the basis backend "
                                 f"write {f'{name}:backend={item}'!r}")
            if not eq or not _KEY.fullmatch(key.strip()):
                raise ValueError(f"method(={text!r}): option {item!r} must be key=value")
            options.append((key.strip(), raw.strip()))
        try:
            return cls(name, tuple(options))
        except (TypeError, ValueError) as e:
            raise ValueError(f"method(={text!r}): {e}") from None

    @classmethod
    def of(cls, name: str, options: dict) -> MethodSpec:
        """The spec of ``name`` with keyword ``options``, the inverse of :attr:`kwargs`: each value
        written as JSON (``0.8`` -> ``0.8``, ``None`` -> ``null``), text as itself, a dtype
        option's ``torch.dtype`` by its torch name, in the order given
        (``MethodSpec.of("fraq", {"tau": 0.8})`` is ``fraq:tau=0.8``), so that
        ``MethodSpec.of(name, spec.kwargs) == spec`` for a spec written in this form. A text value
        that would read back as something else (``"0.9"``, ``"null"``) and a value of another
        type are refused (ValueError, TypeError naming the option)."""
        if not isinstance(options, dict):
            raise TypeError(f"options(={options!r}) must be a dict of keyword options")
        pairs = []
        for key, value in options.items():
            if isinstance(value, str):
                try:
                    json.loads(value)
                except json.JSONDecodeError:
                    pairs.append((key, value))
                    continue
                raise ValueError(f"option {key}(={value!r}): text that reads as JSON would not read back as text")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"option {key}(={value!r}) must be finite: JSON has no {value!r}")
            if value is None or isinstance(value, (bool, int, float)):
                pairs.append((key, json.dumps(value, allow_nan=False)))
            elif key in DTYPE_OPTIONS and type(value).__name__ == "dtype":  # a torch.dtype, without importing torch
                pairs.append((key, str(value).removeprefix("torch.")))
            else:
                raise TypeError(f"option {key}(={value!r}) must be text, a number, a bool, None or (for "
                                f"{', '.join(DTYPE_OPTIONS)}) a torch dtype")
        return cls(name, tuple(pairs))

    @property
    def kwargs(self) -> dict:
        """The options as keyword arguments: each value as JSON where it is JSON, else its text,
        and a dtype option (:data:`DTYPE_OPTIONS`) as its ``torch.dtype`` (:meth:`parse`
        refuses a key given twice and a dtype name not listed)."""
        out = {}
        for key, raw in self.options:
            if key in DTYPE_OPTIONS and raw != "null":
                import torch  # only here: the grammar is read without torch

                out[key] = getattr(torch, raw)
                continue
            try:
                out[key] = json.loads(raw)
            except json.JSONDecodeError:
                out[key] = raw
        return out

    def __str__(self) -> str:
        return self.name + (":" + ",".join(f"{k}={v}" for k, v in self.options) if self.options else "")
