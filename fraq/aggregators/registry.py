"""The aggregator registry: name -> class, with the methods defined outside the package.

A method outside the package is one :class:`~fraq.aggregators.Aggregator` subclass in a
module of its own that calls :func:`register_aggregator` on import. Two ways name that
module, and the registry imports it the first time the registry is read (lazily, once per
process, so ``import fraq`` stays light and a process started by a benchmark or by Flower
finds the same methods as its parent):

- an installed distribution's entry point in the group :data:`ENTRY_POINT_GROUP`
  (``fraq.aggregators``), e.g. in its ``pyproject.toml``::

      [project.entry-points."fraq.aggregators"]
      my-method = "my_pkg.my_method:MyMethod"

  The entry point may name the class (it is registered) or the module (importing it
  registers);
- the environment variable :data:`ENV` (``FRAQ_METHODS``): comma-separated module names,
  ``FRAQ_METHODS=my_pkg.my_method,other.method``, each importable from ``sys.path``
  (``PYTHONPATH``). An environment variable reaches every process a run starts (the
  benchmarks' fresh launches, Flower's simulation), where a registration made in code
  would not.

A module or entry point that fails to load (missing, raising at import, ``SystemExit``
included, or registering a class that :func:`register_aggregator` refuses) is a
:class:`MethodLoadError` of one line naming it and the reason, raised by the read that
triggered the load; the registry is marked loaded only once a load succeeds, so every
later read tries the load and reports the error. A front door calls
:func:`load_outside_methods` before any work and prints that line (exit status 2).
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterator

from fraq.aggregators.base import Aggregator, AggregatorState
from fraq.aggregators.payload import REINITIALIZE, WARM_START
from fraq.aggregators.fedex_lora import FedExLoRA
from fraq.aggregators.fedit import FedIT
from fraq.aggregators.fedmomentum import FedMomentum
from fraq.aggregators.fedsvd import FedSVD
from fraq.aggregators.flexlora import FlexLoRA
from fraq.aggregators.flora import FLoRA
from fraq.aggregators.florg import FLoRG
from fraq.aggregators.florist import FLoRIST
from fraq.aggregators.fraq import Fraq
from fraq.aggregators.lora_a2 import LoraA2

__all__ = ["AGGREGATORS", "ENTRY_POINT_GROUP", "ENV", "MethodLoadError", "get_aggregator", "load_outside_methods",
           "register_aggregator"]

ENTRY_POINT_GROUP = "fraq.aggregators"
"""The importlib.metadata entry point group of methods from installed distributions."""

ENV = "FRAQ_METHODS"
"""The environment variable naming modules of methods (comma-separated module names)."""

_NOT_IN_NAMES = ":,=/"
"""Characters a registry name cannot hold: the method grammar splits on ``:``, ``,`` and
``=`` (:mod:`fraq.methods`), and result file names are made from the name (``/``)."""

_FLAGS = ("heterogeneous_ranks", "single_matrix", "alternating_freeze", "rank_budgets", "checks_finite",
          "dense_factorization", "partial_first_round", "basis_backend", "energy_rule", "nested")
"""The boolean class attributes of :class:`Aggregator`: a caller branches on each, so a
truthy non-boolean (``energy_rule = "no"``) would silently read as True."""


class MethodLoadError(ImportError):
    """A method from outside the package failed to load: one line naming the entry point or
    module and the reason (:func:`load_outside_methods`)."""


class _Registry(dict):
    """A dict whose every read first loads the methods from outside the package
    (:func:`load_outside_methods`), so no reader can miss one."""

    def _loaded(self) -> _Registry:
        load_outside_methods()
        return self

    def __getitem__(self, key):
        return dict.__getitem__(self._loaded(), key)

    def __contains__(self, key) -> bool:
        return dict.__contains__(self._loaded(), key)

    def __iter__(self) -> Iterator[str]:
        return dict.__iter__(self._loaded())

    def __len__(self) -> int:
        return dict.__len__(self._loaded())

    def __eq__(self, other) -> bool:
        return dict.__eq__(self._loaded(), other)

    __hash__ = None

    def __repr__(self) -> str:
        return dict.__repr__(self._loaded())

    def get(self, key, default=None):
        return dict.get(self._loaded(), key, default)

    def keys(self):
        return dict.keys(self._loaded())

    def values(self):
        return dict.values(self._loaded())

    def items(self):
        return dict.items(self._loaded())

    def copy(self) -> dict:
        return dict(self.items())


AGGREGATORS: dict[str, type[Aggregator]] = _Registry(
    (cls.name, cls) for cls in (FedIT, LoraA2, FLoRA, FedExLoRA, FlexLoRA, FLoRG, FLoRIST, Fraq, FedSVD, FedMomentum))
"""Registry: name -> aggregator class, in the order of registration (the package's first,
then the methods from outside it). The paper's order is each class's ``paper_order``."""

_loaded = False
"""Whether the methods from outside the package are loaded (:func:`load_outside_methods`)."""


def load_outside_methods() -> None:
    """Import the methods named by entry points (:data:`ENTRY_POINT_GROUP`) and by
    :data:`ENV`, once per process: every read of :data:`AGGREGATORS` calls this, and only
    the first that succeeds does any work (the entry points and the variable are read then;
    after a failed load the registry is not marked loaded, so each later read repeats the
    load and its error).

    Raises:
        MethodLoadError: an ImportError of one line naming the entry point or module and
            the exception it raised (``SystemExit`` included: a plug-in does not end the
            process that loads it).
    """
    global _loaded
    if _loaded:
        return
    _loaded = True  # before loading: a module's own register_aggregator, or any read of it, reads the registry
    try:
        _load()
    except BaseException:
        _loaded = False
        raise


def _load() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if inspect.isclass(obj):
                register_aggregator(obj)
        except (Exception, SystemExit) as exc:
            raise MethodLoadError(f"{ENTRY_POINT_GROUP} entry point {ep.name} = {ep.value!r} failed to load: "
                                  f"{_reason(exc)}") from None
    given = os.environ.get(ENV, "")
    modules = [m.strip() for m in given.split(",") if m.strip()]
    twice = next((m for i, m in enumerate(modules) if m in modules[:i]), None)
    if twice is not None:
        raise MethodLoadError(f"{ENV}={given!r}: module {twice!r} is named twice; name it once")
    for module in modules:
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:
            raise MethodLoadError(f"{ENV}={given!r}: module {module!r} failed to import: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """An exception as the one line of a :class:`MethodLoadError`: its type and first line."""
    if isinstance(exc, SystemExit):
        return f"it raised SystemExit({exc.code!r}) at import"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def get_aggregator(name: str, **options) -> Aggregator:
    """An aggregator by registry name, configured by keyword ``options`` (e.g. ``tau``)."""
    if not isinstance(name, str) or name not in AGGREGATORS:
        raise ValueError(f"aggregator(={name!r}) is not one of {sorted(AGGREGATORS)}")
    cls = AGGREGATORS[name]
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as exc:
        raise TypeError(_refused(cls, options, exc)) from None
    return cls(**options)


def _refused(cls: type[Aggregator], options: dict, exc: TypeError) -> str:
    """One line naming the options of ``options`` that ``cls`` does not take (those alone),
    what it takes instead, and, for a refused ``rank`` or ``tau``, how the method sets its
    output rank (its ``energy_rule`` and ``downlink_rule``)."""
    params = inspect.signature(cls).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return f"aggregator {cls.name!r} cannot be built with options {options}: {exc}"
    accepted = [k for k, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    refused = [k for k in options if k not in accepted]
    if not refused:
        return f"aggregator {cls.name!r} cannot be built with options {options}: {exc}"
    takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no options"
    line = f"aggregator {cls.name!r} does not take {'options' if len(refused) > 1 else 'option'} " \
           f"{', '.join(refused)}; {takes}"
    if {"rank", "tau"} & set(refused):
        if "tau" in accepted and cls.energy_rule:
            line += "; its output rank is set by tau (the energy rule)"
        elif "rank" not in accepted:
            rule = f": each client receives {cls.downlink_rule} parameters per module" if cls.downlink_rule else ""
            line += f"; its output rank is its own rule, not an option{rule}"
    return line


def register_aggregator(cls: type[Aggregator]) -> type[Aggregator]:
    """Add an :class:`Aggregator` subclass to :data:`AGGREGATORS` under ``cls.name``.

    A name names one method: registering a different class under a taken name is a
    ValueError naming both (a method would otherwise replace another silently, and every
    table, result and Flower run would show the wrong one under its name). Registering the
    same class a second time changes nothing. Refused before anything is registered:

    - a ``name`` that is empty, has blanks at its ends or holds ``:``, ``,``, ``=`` or ``/``
      (it could not be written in the method grammar or a file name);
    - a ``client_init`` that is missing or not ``WARM_START`` / ``REINITIALIZE``, a
      boolean attribute (``energy_rule``, ``nested``, ...) that is not a bool, and
      ``kernel_variants`` that is not a tuple of strings;
    - a description (:meth:`Aggregator.describe`: display name, paper order, downlink rule,
      FLOP model) of the wrong types, or a display name or paper order another registered
      method has (a report keys its rows by them: one of the two would vanish or be
      misplaced).
    """
    if not (isinstance(cls, type) and issubclass(cls, Aggregator)):
        raise TypeError(f"cls(={cls!r}) must be an Aggregator subclass")
    name = getattr(cls, "name", None)
    if not isinstance(name, str):
        raise ValueError(f"{cls.__name__} needs a string class attribute `name`")
    if not name or name != name.strip() or any(c in name for c in _NOT_IN_NAMES):
        raise ValueError(f"{cls.__name__}.name(={name!r}) must be non-empty, without blanks at its ends and "
                         f"without {', '.join(repr(c) for c in _NOT_IN_NAMES)}")
    init = getattr(cls, "client_init", None)
    if init not in (WARM_START, REINITIALIZE):
        raise ValueError(f"{cls.__name__}.client_init(={init!r}) must be {WARM_START!r} (WARM_START) or "
                         f"{REINITIALIZE!r} (REINITIALIZE)")
    for flag in _FLAGS:
        if not isinstance(getattr(cls, flag), bool):
            raise TypeError(f"{cls.__name__}.{flag}(={getattr(cls, flag)!r}) must be a bool")
    variants = cls.kernel_variants
    if not isinstance(variants, tuple) or not all(isinstance(v, str) and v for v in variants):
        raise TypeError(f"{cls.__name__}.kernel_variants(={variants!r}) must be a tuple of option values (str)")
    st = cls.state_type
    if st is not None and not (isinstance(st, type) and issubclass(st, AggregatorState) and st.aggregator == cls.name):
        raise ValueError(f"{cls.__name__}.state_type(={st!r}) must be an AggregatorState subclass whose "
                         f"`aggregator` is {cls.name!r}")
    shown = cls.describe()  # its checks
    taken = dict.get(AGGREGATORS, cls.name)
    if taken is not None and taken is not cls:
        raise ValueError(f"aggregator name {cls.name!r} is taken by {taken.__module__}.{taken.__qualname__}; "
                         f"give {cls.__module__}.{cls.__qualname__} another `name`")
    if taken is None:
        for other in dict.values(AGGREGATORS):
            theirs = other.describe()
            for key in ("display_name", "paper_order"):
                if shown[key] is not None and shown[key] == theirs[key]:
                    raise ValueError(f"{cls.__module__}.{cls.__qualname__}.{key}(={shown[key]!r}) is "
                                     f"{other.__module__}.{other.__qualname__}'s ({other.name!r}); give it "
                                     f"its own `{key}`")
    dict.__setitem__(AGGREGATORS, cls.name, cls)
    return cls
