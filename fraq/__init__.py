"""fraq: exact, cheap recompression of federated LoRA adapters (FRAQ).

``fraq.stack`` builds the exact weighted factor stacks of K clients' LoRA factors, and
``fraq.recompress`` cuts their product to a best rank-p adapter without forming the
m x n aggregate; ``fraq.svd`` gives that aggregate's leading singular triplets from the
same factors at the same cost. ``import fraq`` needs torch alone, and imports it on
first use of a name below, so the command line (:mod:`fraq.cli`) parses its arguments
without it.
The functions live in private modules (``fraq._stack``, ``fraq._recompress``), as
torch's public ``svd_lowrank`` lives in ``torch._lowrank``: a public name never shares
its spelling with a module, so ``fraq.recompress`` is always the function.
"""

import importlib

__version__ = "0.1.0"

_NAMES = {
    "BACKENDS": "fraq.backends",
    "RecompressResult": "fraq.result",
    "normalized_weights": "fraq._stack",
    "recompress": "fraq._recompress",
    "register_backend": "fraq.backends",
    "select_rank": "fraq._energy",
    "stack": "fraq._stack",
    "svd": "fraq._svd",
    "ThinSVD": "fraq._svd",
}

__all__ = [
    "BACKENDS",
    "RecompressResult",
    "normalized_weights",
    "recompress",
    "register_backend",
    "select_rank",
    "stack",
    "svd",
    "ThinSVD",
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

