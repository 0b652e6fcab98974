"""What ``"auto"`` runs on each device type: the basis backend, the pipeline, when the host
reads, and the eigensolver's route, in one table (:data:`DEFAULTS`) that every resolver reads.

**The rule.** A default changes only from an end-to-end measurement on that device: the
whole call (:func:`fraq.recompress`, or a whole-model aggregate), timed against today's
default with the same ranks and products within rounding, never a kernel alone. Each
entry below names the measurement it was set from; an entry no device has measured stays
at the reference route (:data:`UNMEASURED`, which every device type not in the table runs).

**CPU** (``DEFAULTS["cpu"]``)

* backend ``householder``. Once a large batch runs chunk by chunk (each LAPACK call on one
  thread, the chunks shared by the threads) and the Gram is formed factored, Householder's
  geqrf/ormqr cost no more than ``cholesky``'s float64 Gram and float64 application of
  R^-1, which run at half the float32 GEMM rate; the interleaved measurement on the
  presets is in docs/performance.md. ``cholesky`` (exact, same accuracy) stays one name
  away; re-measure on another CPU with ``python -m benchmarks.roofline --compare
  fraq:backend=householder fraq:backend=cholesky``.
* pipeline ``"stepwise"``. The static pipeline serves a backend with a static pass
  (``cholesky``), while the CPU's default basis is ``householder``, which the interleaved
  one-thread measurement on the presets found faster than the static pass; a host read
  costs nothing there, and the static pass maps back at the full width s and runs a batch
  unchunked. ``pipeline="static"`` stays one word away.
* reads ``"group"``: a host read costs nothing on a CPU, and ``"call"`` holds every
  group's stacks until the one read, where ``"group"`` frees each group's after its own.
* eigensolver ``"device"``: every route is LAPACK's ``syevd`` there; no CPU measurement
  favours another.

**CUDA** (``DEFAULTS["cuda"]``)

* backend ``cholesky``. torch runs geqrf (d > 256) and ormqr as per-matrix loops on CUDA,
  ``cholesky_ex`` and the GEMMs batched. Measured end to end on an H100
  (docs/results/gpu/h100-routes, part ``alternatives``): ``fraq.recompress`` with
  ``cholesky`` took 41.9 ms against Householder's 82.7 ms on RoBERTa-base's 36 modules
  (768 x 768, r = 80) and 48.6 against 65.1 ms on LLaMA-3.2-3B's 56 gate/up projections
  (r = 64), with excess over the float64 optimum 4e-14 to 2e-13 for both. On GPUs whose
  float64 rate is 1/64 of float32 (about 1 TFLOP/s) the float64 Gram and application
  of R^-1 at these shapes (2 d r^2 + 2 d r p per matrix: 0.4 GFLOP for RoBERTa-base's 36
  modules, 1.5 for the 56 projections) add well under the loops' cost, but no such GPU
  has measured it (``python -m benchmarks.gpu_check --parts alternatives``).
* pipeline ``"static"``. On an H100 (docs/results/gpu/h100-2026-11-27-pipeline), whole model,
  15 interleaved rounds: 0.74x the stepwise pipeline's time on RoBERTa-base and 0.68x on
  LLaMA-3.2-3B, one host read per shape group against 7 and 24 per call, the same rank on
  every module of both presets.
* reads ``"group"``: no GPU has timed ``"call"`` yet (the GPU check's pipeline part times
  both); a device takes ``"call"`` only from that measurement showing it no slower.
* eigensolver ``"cupy"``, and ``"device"`` where CuPy does not import (:func:`fraq._eigen.resolve`
  says so once per process). On an H100 (docs/results/gpu/h100-routes) ``"cupy"`` was the
  fastest route end to end on both presets with the same ranks as ``"device"`` and products
  equal to float32 rounding (``python -m benchmarks.gpu_check``, part ``eigensolver``).

Whatever the device, float64 data runs ``householder`` under ``backend="auto"``
(:func:`fraq.backends.resolve_backend`): ``cholesky`` has no wider dtype for their Gram and
would hand every matrix to Householder anyway.

The per-option names (``fraq.backends.DEVICE_DEFAULTS``, ``fraq._plan.PIPELINE_DEFAULTS``,
``fraq.aggregators.fraq.READS_DEFAULTS``) are read-only live views of one column of this table
(:class:`Column`); to change a default in a test, replace the device's entry in :data:`DEFAULTS`.
This module imports nothing of fraq and no torch: the resolvers import it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields

__all__ = ["DEFAULTS", "UNMEASURED", "Column", "DeviceDefaults", "defaults_for"]

_CHOICES = {"pipeline": ("stepwise", "static"), "reads": ("group", "call"), "eigensolver": ("device", "host", "cupy")}
"""The resolved values each option may take (``"auto"`` is what resolves to one of them)."""


@dataclass(frozen=True)
class DeviceDefaults:
    """What ``"auto"`` resolves to on one device type.

    Attributes:
        backend: the basis backend (a name registered in :data:`fraq.backends.REGISTRY`).
        pipeline: ``"stepwise"`` or ``"static"`` (:data:`fraq._plan.PIPELINES`).
        reads: ``"group"`` or ``"call"`` (:data:`fraq.aggregators.fraq.READS`).
        eigensolver: ``"device"``, ``"host"`` or ``"cupy"`` (:mod:`fraq._eigen`); ``"cupy"``
            takes ``"device"`` where CuPy does not import, ``"host"`` on a CPU is ``"device"``.
    """

    backend: str
    pipeline: str
    reads: str
    eigensolver: str

    def __post_init__(self):
        if not isinstance(self.backend, str) or not self.backend or self.backend == "auto":
            raise ValueError(f"backend(={self.backend!r}) must be a registered backend's name")
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"{name}(={value!r}) must be one of {list(choices)}")


UNMEASURED = DeviceDefaults(backend="householder", pipeline="stepwise", reads="group", eigensolver="device")
"""The reference routes, what a device type not in :data:`DEFAULTS` runs: no measurement
there favours another."""

DEFAULTS: dict[str, DeviceDefaults] = {
    "cpu": DeviceDefaults(backend="householder", pipeline="stepwise", reads="group", eigensolver="device"),
    "cuda": DeviceDefaults(backend="cholesky", pipeline="static", reads="group", eigensolver="cupy"),
}
"""Device type -> :class:`DeviceDefaults`, each entry set from the measurement the module
docstring names. Every resolver reads it at call time, so replacing an entry changes what
``"auto"`` resolves to from the next call on."""


def defaults_for(device_type: str | None) -> DeviceDefaults:
    """The entry of ``device_type`` (``torch.device(...).type``) in :data:`DEFAULTS`, or
    :data:`UNMEASURED` for a type not in it (None: no device known yet).

    The resolvers on a call's path spell the same lookup inline, ``DEFAULTS[t] if t in
    DEFAULTS else UNMEASURED``: a subscript and ``in`` are no calls in the host budget's count
    (:mod:`benchmarks.measure.python_calls`), where this function and ``dict.get`` are one
    each per resolution, several per shape group."""
    return DEFAULTS.get(device_type, UNMEASURED) if device_type is not None else UNMEASURED


class Column(Mapping):
    """Device type -> one field of :data:`DEFAULTS`, read live and read-only.

    ``Column("backend")["cuda"]`` is ``DEFAULTS["cuda"].backend`` whenever it is read;
    ``.get(t, default)`` answers for the types in the table only."""

    def __init__(self, field: str):
        if field not in {f.name for f in fields(DeviceDefaults)}:
            raise ValueError(f"field(={field!r}) must be one of {[f.name for f in fields(DeviceDefaults)]}")
        self.field = field

    def __getitem__(self, device_type: str) -> str:
        return getattr(DEFAULTS[device_type], self.field)

    def __iter__(self) -> Iterator[str]:
        return iter(DEFAULTS)

    def __len__(self) -> int:
        return len(DEFAULTS)

    def __repr__(self) -> str:
        return f"Column({self.field!r}: {dict(self)})"
