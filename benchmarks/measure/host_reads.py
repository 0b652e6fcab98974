"""Counted host reads: the device synchronisations one call makes, countable on a CPU.

On a GPU the host queues kernels and runs ahead of them; a read of a device value on the
host (a Python number, a list, a numpy array) or a blocking copy of host data to the
device makes the host wait until the queue has drained. Each such wait is one *host
read*. On a CPU nothing waits, so the counter runs every call as if in the CUDA
configuration: every tensor the computation holds is taken to live on the device, and
the calls that would cross between host and device are counted.

The rule: one host read is one call of

* ``Tensor.item``, ``Tensor.__bool__`` (``bool(t)``, ``if t:``), ``Tensor.tolist``
  (one read per call, however many elements: one copy brings them all),
  ``Tensor.numpy`` or ``Tensor.cpu``: a device value read on the host;
* ``torch.tensor``, ``torch.as_tensor`` (of anything but a tensor) or
  ``torch.from_numpy``: a tensor made from host data, which the computation then uses on
  the device (a blocking copy from pageable host memory);
* at dispatch, beneath any Python call above (``float(t)``, ``int(t)``, a read inside a
  torch function): ``aten._local_scalar_dense`` (a scalar read), ``aten.nonzero``,
  ``aten.masked_select`` and ``aten.index`` with a boolean index (their output's size
  is a device value, so the host waits for it), and, on a real device only, a copy
  (``aten._to_copy``, ``aten.copy_``) from a non-CPU tensor to a CPU one.

A read inside another counted read is the same synchronisation and is not counted again
(``t.tolist()`` on a GPU copies to the host once, then reads host memory; ``float(t)``
dispatches ``aten._local_scalar_dense`` once). A tensor that a counted ``.cpu()``
returned is on the host: its ``.numpy()``, ``.tolist()`` or ``.item()`` is free (on a
CPU ``.cpu()`` returns the tensor itself, so this holds for that object). Not counted:
``Tensor.to("cpu")`` on a CPU, where it cannot be told from ``.to(device)`` with the
device being the CPU (on a real device it is counted at dispatch), and a tensor made on
the host without host data (``torch.zeros(3)``) then copied to the device.

The Python-level reads are seen by replacing the named functions on ``torch.Tensor`` and
``torch`` while the block runs (restored on exit); code that bound one of them before the
block (``from torch import tensor``) is not seen. The dispatch-level reads are seen by a
:class:`~torch.utils._python_dispatch.TorchDispatchMode`, per thread: count at one thread.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostReadCounter", "PYTHON_READS", "DISPATCH_READS", "count_host_reads"]

PYTHON_READS = (("Tensor", "item"), ("Tensor", "__bool__"), ("Tensor", "tolist"), ("Tensor", "numpy"),
                ("Tensor", "cpu"), ("torch", "tensor"), ("torch", "as_tensor"), ("torch", "from_numpy"))
"""(owner, name) of every Python-level call counted as one read (the module docstring)."""

DISPATCH_READS = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select")
"""aten ops counted as one read when no counted Python call is around them; ``aten.index``
with a boolean index and a device-to-host copy are counted too (the module docstring)."""

_READ_BACK = frozenset({"numpy", "tolist", "item", "__bool__"})  # free on a tensor already brought to the host


class _DispatchReads(TorchDispatchMode):
    """The dispatch half of :class:`HostReadCounter`: reads no Python call of it covers."""

    def __init__(self, owner: HostReadCounter):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.owner._depth == 0:
            name = str(func.overloadpacket)
            if name in DISPATCH_READS or (name == "aten.index" and _bool_index(args)) or \
                    (name in ("aten._to_copy", "aten.copy_") and _to_host(func, args, kwargs, out)):
                self.owner.reads[name] += 1
        return out


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _to_host(func, args, kwargs, out) -> bool:
    """A copy from a device tensor into a CPU one (only a real device has one to see)."""
    src = args[1] if str(func.overloadpacket) == "aten.copy_" else args[0]
    dst = args[0] if str(func.overloadpacket) == "aten.copy_" else out
    return (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
            and src.device.type != "cpu" and dst.device.type == "cpu")


class HostReadCounter:
    """Inside the block, ``reads`` counts the host reads made on this thread, by kind.

    Kinds are ``"Tensor.item"``, ``"torch.from_numpy"``, ... (:data:`PYTHON_READS`) and the
    aten op names of the dispatch-level reads (:data:`DISPATCH_READS`, ``"aten.index"``,
    ``"aten._to_copy"``, ``"aten.copy_"``); :attr:`total` is their sum. The module
    docstring gives the rule.

    >>> with HostReadCounter() as c:
    ...     _ = torch.ones(3).sum().item()
    >>> c.total, dict(c.reads)
    (1, {'Tensor.item': 1})
    """

    def __init__(self):
        self.reads: collections.Counter = collections.Counter()
        self._depth = 0
        self._on_host: dict[int, object] = {}  # id -> weakref of tensors a counted .cpu() returned
        self._saved: list[tuple[object, str, object]] = []
        self._mode = _DispatchReads(self)

    @property
    def total(self) -> int:
        return sum(self.reads.values())

    def _wrap(self, owner: str, name: str, fn: Callable) -> Callable:
        kind = f"{owner}.{name}"

        @functools.wraps(fn)
        def counted(*args, **kwargs):
            if self._depth == 0 and self._counts(name, args):
                self.reads[kind] += 1
            self._depth += 1
            try:
                out = fn(*args, **kwargs)
            finally:
                self._depth -= 1
            if name == "cpu" and isinstance(out, torch.Tensor):
                self._on_host[id(out)] = _ref(out)
            return out

        return counted

    def _counts(self, name: str, args) -> bool:
        if name == "as_tensor" and args and isinstance(args[0], torch.Tensor):
            return False  # already a tensor: no host data is copied
        if name in _READ_BACK and args and isinstance(args[0], torch.Tensor):
            ref = self._on_host.get(id(args[0]))
            return ref is None or ref() is not args[0]
        return True

    def __enter__(self) -> HostReadCounter:
        owners = {"Tensor": torch.Tensor, "torch": torch}
        for owner, name in PYTHON_READS:
            obj = owners[owner]
            before = obj.__dict__[name] if name in vars(obj) else _MISSING
            self._saved.append((obj, name, before))
            setattr(obj, name, self._wrap(owner, name, getattr(obj, name)))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._mode.__exit__(*exc)
        finally:
            for obj, name, before in reversed(self._saved):
                if before is _MISSING:
                    delattr(obj, name)
                else:
                    setattr(obj, name, before)
            self._saved.clear()
            self._on_host.clear()


_MISSING = object()


def _ref(t: torch.Tensor):
    import weakref

    try:
        return weakref.ref(t)
    except TypeError:
        return lambda: t


def count_host_reads(fn: Callable[[], object]) -> HostReadCounter:
    """The host reads one warm call of ``fn`` makes (one call first, so lazy set-up is not counted)."""
    fn()
    with HostReadCounter() as counter:
        fn()
    return counter
