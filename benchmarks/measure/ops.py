"""Counted aten ops: what one call dispatches, all of them and the non-view ones, with a dispatch-mode counter.

On a GPU every non-view op is at least one kernel launch with host work around it, so the
ops a call dispatches are its fixed cost there; counted on the CPU they hold the GPU path
to account where no GPU is at hand. A view op (``view``, ``transpose``, ``select``,
``detach``, ...) launches no kernel: it returns a tensor aliasing its input's memory. It
is told by its schema: :attr:`torch._ops.OpOverload.is_view`, True when an argument is
aliased by the output and not written (``Tensor(a) self -> Tensor(a)``); an in-place op
(``Tensor(a!)``) is not a view. The mode is per thread: ops run by helper threads
(a CPU batch fanned out over threads) are not seen, so count at one thread.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpCounter", "count_ops"]


class OpCounter(TorchDispatchMode):
    """Inside the block, ``ops`` counts every aten op dispatched on this thread, by name,
    and ``non_view`` those that are not views (the kernels a GPU would launch)."""

    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.non_view: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.ops[name] += 1
        if not func.is_view:
            self.non_view[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def non_view_total(self) -> int:
        return sum(self.non_view.values())


def count_ops(fn: Callable[[], object]) -> OpCounter:
    """The ops one warm call of ``fn`` dispatches (one call first, so lazy set-up is not counted)."""
    fn()
    with OpCounter() as counter:
        fn()
    return counter
