"""The device every suite measures on: ``FRAQ_BENCH_DEVICE=cpu|cuda|cuda:N`` (default cpu).

One variable for the asv suite, the pytest-benchmark checks and ``make run`` (the runner
also takes ``--device``, which wins). :func:`bench_device` parses it and refuses a
malformed value with a ValueError naming the variable; :func:`unavailable` says why a
well-formed device cannot be used here (no CUDA build, no GPU, index out of range), or
None; :func:`checked` raises it as :class:`DeviceUnavailable`. The suites turn that reason
into their own skip: ``NotImplementedError`` in asv's ``setup`` (:func:`require`),
``pytest.skip`` in pytest, a one-line error and exit status 2 from the runner and the
other command-line tools.

On a CUDA device timings are CUDA events around the call after warm-up calls and a
synchronize (:func:`benchmarks.measure.timed`), peak memory is ``max_memory_allocated``
after a reset (:func:`benchmarks.measure.peak_memory`), and the machine record names the
GPU, its driver, CUDA and cuSOLVER (:func:`fraq._machine.machine_record`).
"""

from __future__ import annotations

import os
import re
import sys

import torch

__all__ = ["ENV", "DEVICE_RE", "DeviceUnavailable", "parse_device", "bench_device", "unavailable", "checked",
           "checked_or_said", "require", "to_device"]

ENV = "FRAQ_BENCH_DEVICE"
DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def parse_device(text: str, *, source: str = ENV) -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"`` as a torch.device; ValueError naming ``source`` otherwise."""
    if not isinstance(text, str) or not DEVICE_RE.match(text.strip()):
        raise ValueError(f"{source}(={text!r}) must be cpu, cuda or cuda:N")
    return torch.device(text.strip())


def bench_device(override: str | None = None) -> torch.device:
    """The suites' device: ``override`` (the runner's ``--device``) or ``FRAQ_BENCH_DEVICE``, default cpu."""
    if override is not None:
        return parse_device(override, source="--device")
    return parse_device(os.environ.get(ENV, "cpu") or "cpu")


def unavailable(device: torch.device) -> str | None:
    """Why ``device`` cannot run here, or None when it can."""
    if device.type == "cpu":
        return None
    if not torch.backends.cuda.is_built():
        return f"device {device} requested but this torch {torch.__version__} has no CUDA support"
    if not torch.cuda.is_available():
        return f"device {device} requested but no CUDA GPU is visible"
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        return f"device {device} requested but only {count} CUDA device(s) are visible"
    return None


class DeviceUnavailable(ValueError):
    """A well-formed device this machine cannot run on; the message is the reason."""


def checked(override: str | None = None) -> torch.device:
    """The suites' device (:func:`bench_device`) when this machine has it.

    Raises ValueError naming the variable (or ``--device``) for a malformed value, and
    :class:`DeviceUnavailable` (a ValueError) with :func:`unavailable`'s reason for a
    device that is not here. A command-line tool prints either as its one-line error.
    """
    device = bench_device(override)
    reason = unavailable(device)
    if reason is not None:
        raise DeviceUnavailable(reason)
    return device


def checked_or_said(override: str | None = None) -> torch.device | None:
    """:func:`checked` for a command-line tool: the device, or None once its one-line error
    is on stderr (the tool then exits with status 2)."""
    try:
        return checked(override)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def require(override: str | None = None) -> torch.device:
    """The suites' device, or NotImplementedError with the reason (asv's skip, from ``setup``)."""
    try:
        return checked(override)
    except DeviceUnavailable as exc:
        raise NotImplementedError(str(exc)) from None


def to_device(x, device: torch.device):
    """Tensors (or nested tuples/lists of them) moved to ``device``; others unchanged."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x
