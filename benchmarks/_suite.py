"""What every asv benchmark class shares: the device check, asv's skip, one mixin
timing, weighing and counting ``self.call``, and the ``track_`` methods that read
``setup_cache``.

A class sets ``self.call`` (a zero-argument callable, inputs already on ``self.device``)
in its ``setup`` after :func:`prepare`; :class:`_Measured` then provides ``time_run``
(synchronized on CUDA), ``track_peakmem`` (tensor peak above the inputs, bytes) and
``track_flops`` (counted, LAPACK included). A class whose numbers are measured once in
``setup_cache`` (a dict keyed by the parameter tuple) declares each of them as
``track_x = cached("x", unit)``. Names start with an underscore, or are not asv
prefixes, so asv does not collect them as benchmarks themselves.
"""

from __future__ import annotations

import torch

from benchmarks.cases import check_threads
from benchmarks.device import require


def skip(reason: str):
    """asv's skip: NotImplementedError raised from ``setup``."""
    raise NotImplementedError(reason)


def prepare() -> torch.device:
    """Every ``setup``'s first line: the suite's threads, and its device or asv's skip."""
    check_threads()
    return require()


def measure_points(params: list, measure) -> dict:
    """A ``setup_cache``'s dict: for every combination of asv's ``params``,
    ``measure(*combo, device)`` (a point's metrics), or the reason it is skipped (a string:
    no device, or the ``NotImplementedError`` the point's config raised)."""
    import itertools

    from benchmarks.device import DeviceUnavailable, checked

    check_threads()
    try:
        device = checked()
    except DeviceUnavailable as exc:
        return {combo: str(exc) for combo in itertools.product(*params)}
    out = {}
    for combo in itertools.product(*params):
        try:
            out[combo] = measure(*combo, device)
        except NotImplementedError as exc:
            out[combo] = str(exc)
    return out


def cached(key: str, unit: str, doc: str | None = None):
    """A ``track_`` method returning ``cache[params][key]``: the value ``setup_cache``
    measured for this parameter combination (asv passes the cache first)."""

    def track(self, cache, *params):
        return cache[params][key]

    track.unit = unit
    track.__doc__ = doc or f"``{key}`` as measured in setup_cache."
    return track


class _Measured:
    """time_run / track_peakmem / track_flops of ``self.call`` on ``self.device``."""

    device = torch.device("cpu")

    def time_run(self, *params):
        self.call()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def track_peakmem(self, *params):
        from benchmarks.measure import peak_memory

        return peak_memory(self.call, device=self.device).peak

    track_peakmem.unit = "bytes"

    def track_flops(self, *params):
        from benchmarks.measure import count_flops

        return count_flops(self.call).total

    track_flops.unit = "flop"


def _warm_up() -> None:
    """Pay the measurement layer's one-time costs once, at import, not in every benchmark.

    asv's forkserver imports the suite once and forks a process per benchmark; the first
    FlopCounterMode in a process imports torch's dispatch machinery (~6 s), which would
    otherwise be paid by every ``track_flops``.
    """
    from benchmarks.measure import count_flops

    a = torch.ones(2, 2)
    count_flops(lambda: a @ a)


_warm_up()
