r"""The r x r Gram eigenproblem, by route: where the batch of small symmetric eigenproblems is solved.

FRAQ solves one r x r symmetric eigenproblem per matrix (r the stacked rank: 80 for
RoBERTa-base's ten clients of rank 8, 64 or 232 for LLaMA-3.2-3B's presets), in float64
by default. On the CPU every route is LAPACK's ``syevd`` (through ``torch.linalg.eigh``,
the batch split over threads by :func:`fraq._parallel.batch_map`). On CUDA the route
matters: torch's batched ``eigh`` runs cuSOLVER's batched Jacobi solver only for small
matrices and otherwise loops over the batch one ``syevd`` at a time, each with its own
launches and synchronisations. Routes (``eigensolver=``):

- ``"device"``: ``torch.linalg.eigh`` where the Gram lives;
- ``"host"``: the Grams copied to the host, solved there by LAPACK, the results copied
  back. The pipeline reads its eigenvalues on the host once anyway (the energy rule's
  rank), so the solve costs a transfer of r x r matrices, not a new stall. On the CPU
  it is ``"device"``;
- ``"cupy"``: CuPy's batched ``cupy.linalg.eigh`` on the same device memory, handed over
  through DLPack with no copy, on torch's current stream (CUDA only; CuPy must import);
- ``"auto"``: the device's entry in :data:`fraq._defaults.DEFAULTS` (with the measurement
  it was set from): ``"cupy"`` on CUDA where CuPy imports, else ``"device"``. A route becomes
  a device's default only from an end-to-end measurement of ``fraq.recompress`` on that
  device, never from the eigensolver alone.

CuPy's workspace comes from CuPy's own memory pool, which torch's peak-memory counters do
not see: on the ``"cupy"`` route the measured tensor peak leaves out the solver's
workspace (a few r x r matrices per batch entry).

Every route reads the lower triangle (the Gram may hold only it) and returns ascending
eigenvalues with orthonormal eigenvectors in the requested dtype, on the Gram's device.
A route that refuses a non-finite Gram returns None (the caller then takes its rescaled
path, which names the NaN or Inf in the input); CuPy returns NaN instead of raising, so
its result is checked and a non-finite one is taken as that refusal.
"""

from __future__ import annotations

import functools
import warnings

import torch

from fraq._defaults import DEFAULTS, UNMEASURED
from fraq._parallel import batch_map

__all__ = ["EIGENSOLVERS", "check_eigensolver", "eigh", "resolve"]

EIGENSOLVERS = ("auto", "device", "host", "cupy")
"""The routes of :func:`eigh` (module docstring)."""


def check_eigensolver(eigensolver: object, device: torch.device | None = None) -> str:
    """``eigensolver`` if it names a route that can run on ``device`` (None: any device),
    else a ValueError naming the argument and the value."""
    if eigensolver not in EIGENSOLVERS:
        raise ValueError(f"eigensolver(={eigensolver!r}) must be one of {', '.join(map(repr, EIGENSOLVERS))}")
    if eigensolver == "cupy":
        if device is not None and device.type != "cuda":
            raise ValueError(f"eigensolver(={eigensolver!r}) solves on a CUDA GPU; the factors are on {device}")
        why = _cupy_import_error()
        if why is not None:
            raise ValueError(f"eigensolver(={eigensolver!r}) needs CuPy, which does not import here ({why})")
    return eigensolver


def resolve(eigensolver: str, device: torch.device) -> str:
    """The route ``eigensolver`` (checked) takes on ``device``: ``"auto"`` is the device's entry
    in :data:`fraq._defaults.DEFAULTS` (``"cupy"`` on CUDA), and a ``"cupy"`` default takes
    ``"device"`` where CuPy does not import (said once per process); ``"host"`` on the CPU
    is ``"device"``."""
    if eigensolver == "auto":
        eigensolver = (DEFAULTS[device.type] if device.type in DEFAULTS else UNMEASURED).eigensolver
        if eigensolver == "cupy" and (device.type != "cuda" or _cupy_import_error() is not None):
            if device.type == "cuda":
                _say_no_cupy()
            return "device"
    if eigensolver == "host" and device.type != "cuda":
        return "device"
    return eigensolver


@functools.cache
def _say_no_cupy() -> None:
    """Once per process: ``"auto"`` on CUDA takes torch's ``eigh`` because CuPy does not
    import (correct, and slower than CuPy's batched solver: docs/library.md, "On a GPU")."""
    warnings.warn(f"eigensolver='auto' takes torch's eigh on CUDA: CuPy does not import here "
                  f"({_cupy_import_error()}); pip install -e '.[gpu]' for its batched solver", stacklevel=3)


@functools.cache
def _cupy_import_error() -> str | None:
    """None when CuPy imports here, else why not (asked once per process: the answer
    cannot change)."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - absent, or built for another CUDA
        return f"{type(exc).__name__}: {exc}"
    return None


def eigh(G: torch.Tensor, dtype: torch.dtype, eigensolver: str = "auto",
         check: bool = True) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(lam, U)`` of each symmetric ``G`` (``(*, r, r)``, lower triangle read) in ``dtype``,
    ascending, on ``G``'s device, by route ``eigensolver`` (checked by
    :func:`check_eigensolver`); None when the solver refuses a non-finite Gram.

    ``check=False`` leaves CuPy's result unchecked (NaN where it failed): the check reads the
    device, and a caller whose own verdict reads lambda_1 later (:mod:`fraq._static`)
    needs no second read. torch's solvers raise on the routes that refuse."""
    Gd = G.to(dtype)
    route = resolve(eigensolver, Gd.device)
    try:
        if route == "device":
            return batch_map(torch.linalg.eigh, Gd)
        if route == "host":
            lam, U = batch_map(torch.linalg.eigh, Gd.cpu())
            return lam.to(G.device, non_blocking=True), U.to(G.device, non_blocking=True)
    except torch.linalg.LinAlgError:
        return None
    return _cupy(Gd, check)


def _cupy(G: torch.Tensor, check: bool = True) -> tuple[torch.Tensor, torch.Tensor] | None:
    import cupy

    index = G.device.index if G.device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(index)
    with warnings.catch_warnings():
        # The device's CuPy deprecates ExternalStream for Stream.from_external; ExternalStream
        # is the form that ran on a GPU (docs/results/gpu/h100-routes), so it stays until the
        # other has run there too. Only that message is silenced.
        warnings.filterwarnings("ignore", "ExternalStream is deprecated", DeprecationWarning)
        with cupy.cuda.Device(index), cupy.cuda.ExternalStream(stream.cuda_stream, index):
            w, V = cupy.linalg.eigh(cupy.from_dlpack(G.contiguous()), UPLO="L")
            lam, U = torch.from_dlpack(w), torch.from_dlpack(V)
    if check and not bool(torch.isfinite(lam).all()):
        return None
    return lam, U
