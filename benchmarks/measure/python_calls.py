"""Counted Python calls: the interpreter's share of a call's host work, the same on every machine.

Once the math of an aggregate is fast (a GPU's kernels, or 16 x 16 factors on a CPU), its
time is the host's: the interpreter running the method's Python, and torch's dispatcher
below it. The dispatcher's work is counted in aten ops (:mod:`benchmarks.measure.ops`);
this module counts the interpreter's, in calls:

* a Python call: one ``"call"`` event of :func:`sys.setprofile`, a Python function's
  frame entered, including a generator's or comprehension's frame resumed for one more
  item (each resume is an entry; a generator expression over K clients costs K + 1);
* a builtin call: one ``"c_call"`` event, a function implemented in C called from Python
  (``isinstance``, ``len``, ``dict.setdefault``, a numpy function, a torch function or
  ``Tensor`` method such as ``torch.stack`` or ``t.mul_``).

Why calls and not seconds: a count is exact and machine-independent, so a CI runner can
hold it to a budget; and the host work that grows with a model's size comes in calls (a
check per module, a dataclass per module, a generator step per (client, module) pair), so
a count shows the growth a timing would, without the timing's noise. What it does not
weigh: a call's own length (a generator step is tens of nanoseconds, a dataclass
``__init__`` hundreds, ``torch.linalg.eigh`` the math), and operators reached through a
type's slots rather than a call (``a @ b``, ``t[0]``, ``x + 1``) or a C type's
constructor (``range(n)``), whose torch work the aten ops show. Rejected: bytecode
instructions executed (``sys.settrace`` with ``f_trace_opcodes``), which weigh a Python
step by its length but see nothing of a builtin's, and run the tracer once per instruction.

The garbage collector is off inside the block, so a collection (whose finalizers would run
Python) does not fall into one count and not another; the previous profile function is
restored on exit. Per thread, like :mod:`benchmarks.measure.ops`: count at one thread.
"""

from __future__ import annotations

import gc
import sys

__all__ = ["PythonCallCounter"]


class PythonCallCounter:
    """Inside the block, ``python`` counts Python calls and ``builtin`` builtin calls made on
    this thread (the module docstring's rule); :attr:`total` is their sum.

    >>> def f(n):
    ...     return sum(i for i in range(n))
    >>> with PythonCallCounter() as c:
    ...     _ = f(3)
    >>> c.python, c.builtin  # f and its generator's 4 entries (3 items, then the end); sum
    (5, 1)
    """

    def __init__(self):
        self.python = 0
        self.builtin = 0
        self._saved = None
        self._gc = False

    @property
    def total(self) -> int:
        return self.python + self.builtin

    def _event(self, frame, event, arg) -> None:
        if event == "call":
            self.python += 1
        elif event == "c_call":
            self.builtin += 1

    def __enter__(self) -> PythonCallCounter:
        self._saved = sys.getprofile()
        self._gc = gc.isenabled()
        gc.disable()
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(self._saved)
        if self._gc:
            gc.enable()
        # this __exit__ and its setprofile call are seen as the last calls: not the block's
        self.python -= 1
        self.builtin -= 1
