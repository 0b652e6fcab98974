"""fraq: exact, cheap recompression of federated LoRA adapters (FRAQ).

``fraq.stack`` builds the exact weighted factor stacks of K clients' LoRA factors, and
``fraq.recompress`` cuts their product to a best rank-p adapter without forming the
m x n aggregate. ``import fraq`` needs torch alone, and imports it on first use of a
name below, so the command line (:mod:`fraq.cli`) parses its arguments without it.
"""

import importlib
import sys
import types

__version__ = "0.1.0"

_NAMES = {
    "BACKENDS": "fraq.backends",
    "RecompressResult": "fraq.result",
    "normalized_weights": "fraq.stack",
    "recompress": "fraq.recompress",
    "register_backend": "fraq.backends",
    "select_rank": "fraq.recompress",
    "stack": "fraq.stack",
}

__all__ = [
    "BACKENDS",
    "RecompressResult",
    "normalized_weights",
    "recompress",
    "register_backend",
    "select_rank",
    "stack",
    "__version__",
]


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module 'fraq' has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


class _Package(types.ModuleType):
    """``fraq.recompress`` and ``fraq.stack`` are the functions, as with eager imports: the
    import system's binding of the same-named submodules to the package is not kept."""

    def __setattr__(self, name, value):
        if name in ("recompress", "stack") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
