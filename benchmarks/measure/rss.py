"""The process's resident-set growth over one call, in a process that has run nothing: the
cross-check of the tensor peak (:mod:`benchmarks.measure.memory`).

The tensor peak counts torch's allocator only; a server's memory also holds what BLAS and
LAPACK allocate for themselves (MKL's buffers, OpenBLAS's work areas), the allocator's
fragmentation and the pages the first call of a routine maps. The resident set sees all
of it. :func:`rss_growth` runs a point's call (``<module>.call(config, "cpu")``, ``module`` the
import path of the experiment that asks, so this layer imports no experiment itself) at one
torch thread (where the tensor peak is taken) in a process that has imported torch and the
suite and computed nothing, and reports, in bytes:

- ``rss_cold``: the high-water mark of the first call above the resident set before it
  (the call's inputs built): the tensor peak, what the libraries allocate, and their
  one-time set-up (their buffers and the code pages the call runs);
- ``rss_warm``: the same for a second call, after freed heap memory is handed back
  (``malloc_trim``): what a server that has run the call before needs again.

**The measuring process.** Each point runs in a child forked from one measuring server
(``python -m benchmarks.measure.rss --serve``, started once per measuring process at one
thread, torch and the suite imported, then nothing computed), so a point pays a fork,
not an interpreter's start with torch imported (seconds). The child is what a fresh
interpreter is when its work starts: no BLAS or LAPACK routine has run, no thread pool is
up, the allocator holds nothing of another point's (each point its own child, so the
high-water mark and the libraries' set-up are that point's alone). One difference is
counted, on the cold side only: a forked child does not inherit the page-table entries of
the library code its server touched while importing (Linux copies none for file mappings
it can fault in again), so the first call also counts the resident code pages it runs
that an interpreter's own import would have touched already; a second call finds them
resident, so ``rss_warm`` is the same number either way. The server and its children die
with the process that started them.

The high-water mark is reset before each call by writing 5 to ``/proc/self/clear_refs``
(Linux; ``VmHWM`` in ``/proc/self/status``), so inputs built before the call do not hide
the call's own peak. Where that is not available the growth is not measured (``None``):
``ru_maxrss`` cannot be reset and would report the inputs' peak instead. The server is
started with :func:`benchmarks.measure.children.child_env`, so it imports the suite
wherever the caller runs (asv's working directory included).
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import traceback

from benchmarks.measure.children import child_env, die_with_parent

__all__ = ["rss_growth"]

_MARK = "rss-growth:"


def _status(field: str) -> int | None:
    try:
        text = open("/proc/self/status").read()
    except OSError:
        return None
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return None if m is None else 1024 * int(m.group(1))


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _growth(fn) -> int | None:
    _trim()
    before = _status("VmRSS")
    if before is None or not _reset_peak():
        return None
    out = fn()
    peak = _status("VmHWM")
    del out
    return None if peak is None else max(0, peak - before)


def _measure(module: str, config: dict) -> dict:
    """Both growths of one point, in this process (the measuring child)."""
    import torch

    torch.set_num_threads(1)
    fn = importlib.import_module(module).call(config, "cpu")
    cold = _growth(fn)
    warm = _growth(fn)
    return {"rss_cold": cold, "rss_warm": warm}


class _Server:
    """The measuring server of this process (see the module docstring): one request line
    (``[module, config]``) in, one reply line out (``{"ok": growths}`` or
    ``{"error": text}``)."""

    def __init__(self):
        self.log = tempfile.TemporaryFile("w+")
        env = child_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.measure.rss", "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env, preexec_fn=die_with_parent())
        self.pid = os.getpid()  # a forked copy of this process must not share the pipes

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def ask(self, name: str, config: dict, timeout: float) -> dict:
        self.proc.stdin.write(json.dumps([name, config], allow_nan=False) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            self.log.seek(0)
            tail = self.log.read().strip().splitlines()[-1:]
            why = f"no reply in {timeout:g} s" if not ready else f"the server exited ({tail})"
            raise RuntimeError(f"rss_growth({name!r}): the measuring process failed: {why}")
        return json.loads(line)

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_SERVER: _Server | None = None


def _server() -> _Server:
    global _SERVER
    if _SERVER is None or not _SERVER.alive():
        _SERVER = _Server()
        atexit.register(_SERVER.close)
    return _SERVER


def rss_growth(module: str, config: dict, device: str = "cpu", timeout: float = 900.0) -> dict:
    """``{"rss_cold": bytes, "rss_warm": bytes}`` of one call of point ``config`` of the
    experiment module ``module`` (its import path: an experiment passes its ``__name__``;
    the module's ``call(config, device)`` returns the call), measured in a child of the measuring server (see the module docstring);
    ``None`` values on a GPU (the tensor peak there is the device's) or where ``/proc``
    cannot reset the mark (off Linux, nothing is started)."""
    if str(device) != "cpu" or not sys.platform.startswith("linux"):
        return {"rss_cold": None, "rss_warm": None}
    reply = _server().ask(module, config, timeout)
    if "error" in reply:
        raise RuntimeError(f"rss_growth({module!r}): the measuring process failed: {reply['error']}")
    return reply["ok"]


def _child(name: str, config: dict, out: int, err: int) -> None:
    """The forked child: measure, write the reply to ``out``, exit (never returns)."""
    code = 1
    try:
        os.dup2(err, 1)  # the server's stdout carries replies only
        os.dup2(err, 2)
        if sys.platform.startswith("linux"):  # dies with the server
            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)
        reply = json.dumps({"ok": _measure(name, config)}, allow_nan=False)
        code = 0
    except BaseException:  # noqa: BLE001 -- everything the parent must hear of
        traceback.print_exc()
        reply = json.dumps({"error": traceback.format_exc().strip().splitlines()[-1]}, allow_nan=False)
    try:
        os.write(out, (reply + "\n").encode())
    finally:
        os._exit(code)


def _serve() -> int:
    """Import torch and the suite, then fork a child per request line on stdin."""
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        name, config = json.loads(line)
        try:
            importlib.import_module(name)  # imported here once (code, no computation), not in every child
        except Exception as exc:  # noqa: BLE001 -- the reply names it
            sys.stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}, allow_nan=False) + "\n")
            sys.stdout.flush()
            continue
        r, w = os.pipe()
        err = tempfile.TemporaryFile("w+")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _child(name, config, w, err.fileno())
        os.close(w)
        with os.fdopen(r) as f:
            reply = f.read().strip()
        _, status = os.waitpid(pid, 0)
        if not reply:
            err.seek(0)
            tail = err.read().strip().splitlines()[-1:]
            reply = json.dumps({"error": f"exit status {os.waitstatus_to_exitcode(status)}: {tail}"}, allow_nan=False)
        err.close()
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()
    return 0


def _main(argv: list[str]) -> int:
    if argv == ["--serve"]:
        return _serve()
    name, config = argv[0], json.loads(argv[1])  # one point in this process
    print(_MARK + json.dumps(_measure(name, config), allow_nan=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
