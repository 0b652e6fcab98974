"""The one internal surface the measurement suite (``benchmarks/``) reads from the library.

Users of fraq need none of this: it is what a benchmark needs to time or record the
library from inside, and it may change with the library. Everything ``benchmarks/`` takes
from ``fraq`` that is not public API comes through here, so the library's private modules
stay private and the surface the suite depends on is one list (:data:`SURFACE`):

- the tools every side of the project shares: the machine record, the result files, files
  that appear whole, results archives read only once verified, the progress display,
  ``--help`` text, the sign test's ranks over several looks (the runner's stopping rule
  and the analysis's verdicts read the same ones);
- the stages of :func:`fraq.recompress` a benchmark times one by one: orientation, the
  Gram's forms, the eigensolver routes, the batch sharing and the device defaults.

Each name is imported from its module on first use (PEP 562), so importing this module
costs nothing: a tool that needs the file helpers alone imports no torch.
"""

from __future__ import annotations

import importlib

SURFACE = {
    # shared tools
    "machine_record": "fraq._machine",
    "plain": "fraq._help",
    "replacing_file": "fraq._files",
    "check_dir_out": "fraq._files",
    "check_file_target": "fraq._files",
    "failed_write": "fraq._files",
    "result_path": "fraq._results",
    "result_record": "fraq._results",
    "versions": "fraq._results",
    "write_result": "fraq._results",
    "damage": "fraq._results",
    "ArchiveError": "fraq._archive",
    "open_tar_gz": "fraq._archive",
    "own_folder": "fraq._leftovers",
    "remove_dead": "fraq._leftovers",
    "alive": "fraq._leftovers",
    "finite": "fraq._json",
    "Progress": "fraq._progress",
    "sign_ranks": "fraq._sign_test",
    "sign_error": "fraq._sign_test",
    "compute_dtype": "fraq._validation",
    # the recompression's stages
    "orient": "fraq._orient",
    "unorient": "fraq._orient",
    "GRAMS": "fraq._gram",
    "Coordinates": "fraq._gram",
    "coordinates": "fraq._gram",
    "rows": "fraq._gram",
    "scale_sum": "fraq._gram",
    "check_eigensolver": "fraq._eigen",
    "eigh": "fraq._eigen",
    "check_options": "fraq._plan",
    "start_checked": "fraq._recompress",
    "start_checked_all": "fraq._recompress",
    "basis_and_gram": "fraq._static",
    "CHUNK_BYTES": "fraq._parallel",
    "TEAM_WORK": "fraq._parallel",
    "team_work": "fraq._parallel",
    "whole_batch_threads": "fraq._parallel",
    "batched": "fraq.aggregators._linalg",
    "tall_product": "fraq._layout",
    "thin_svd": "fraq.aggregators._linalg",
    "defaults_for": "fraq._defaults",
}
"""Name -> the private module that defines it."""

__all__ = sorted(SURFACE)


def __getattr__(name: str):
    if name not in SURFACE:
        raise AttributeError(f"module 'fraq.internals' has no attribute {name!r}: the suite's surface is "
                             f"{sorted(SURFACE)}")
    return getattr(importlib.import_module(SURFACE[name]), name)  # read through: a patched module is seen


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(SURFACE))
