"""fraq: exact, cheap recompression of federated LoRA adapters (FRAQ).

``fraq.stack`` builds the exact weighted factor stacks of K clients' LoRA factors, and
``fraq.recompress`` cuts their product to a best rank-p adapter without forming the
m x n aggregate. ``import fraq`` needs torch alone.
"""

from fraq.backends import BACKENDS, register_backend
from fraq.recompress import recompress, select_rank
from fraq.result import RecompressResult
from fraq.stack import normalized_weights, stack

__version__ = "0.1.0"

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
