"""A record of the machine and device a run used, saved beside every result.

Used by the benchmark suites (one record per result file) and by the federated
harness's run records. It describes the environment; it measures nothing.

On a CUDA device the record adds the GPU's name, the driver version (from NVML, or
``nvidia-smi`` where NVML's Python binding is absent), the CUDA runtime torch was built
with and the cuSOLVER library version (``cusolverGetVersion`` from the library torch
loaded). A field that cannot be read is None, never a guess.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import platform
import subprocess
import time

import torch

__all__ = ["machine_record", "gpu_record", "smi_record", "steal_share"]

_PROC_STAT = "/proc/stat"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_mhz(path: str = "/proc/cpuinfo") -> float | None:
    """The cores' mean clock now (MHz, one decimal), from ``cpu MHz`` in ``path``; None where the
    kernel gives none. A reading at the record's time, not over the run: host-bound times
    move with it (a GPU host's by ~20% within one call), so a record says where it stood."""
    try:
        with open(path) as f:
            mhz = [float(line.split(":", 1)[1]) for line in f if line.startswith("cpu MHz")]
    except (OSError, ValueError):
        return None
    return round(sum(mhz) / len(mhz), 1) if mhz else None


def _cpu_times() -> tuple[int, int] | None:
    """(steal, total) jiffies summed over CPUs since boot, from /proc/stat; None where unreadable."""
    try:
        with open(_PROC_STAT) as f:
            for line in f:
                if line.startswith("cpu "):
                    fields = [int(x) for x in line.split()[1:]]
                    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
                    # already inside user and nice, so the total stops at steal
                    if len(fields) < 8:
                        return None
                    return fields[7], sum(fields[:8])
    except (OSError, ValueError):
        pass
    return None


STEAL_WINDOW_S = 10.0
"""The shortest span :func:`steal_share` reads. /proc/stat counts in jiffies (1/100 s per
CPU): over half a second of two CPUs one stolen jiffy is 1% and a burst of eight is 8%, above
the share a report calls busy (:data:`analysis.verdicts.BUSY_STEAL`), while the same burst
over ten seconds is 0.4%. Results written in quick succession (a sweep's small points) would
each read such a burst alone."""

_times: list[tuple[float, tuple[int, int]]] = []  # (monotonic s, (steal, total)) of earlier calls, oldest first


def _snapshot() -> None:
    now = _cpu_times()
    if now is not None:
        _times.append((time.monotonic(), now))


_snapshot()


def steal_share() -> float | None:
    """The share of CPU time stolen by the hypervisor since the previous call (or import),
    over at least the last :data:`STEAL_WINDOW_S` seconds where this process has lived that
    long (the span reaches back to an earlier call).

    None where /proc/stat has no steal column or cannot be read, and where no time passed.
    """
    now = _cpu_times()
    if now is None:
        return None
    t = time.monotonic()
    # the newest earlier call at least the window back, or the oldest there is
    older = [i for i, (ti, _) in enumerate(_times) if t - ti >= STEAL_WINDOW_S]
    start = older[-1] if older else 0
    before = _times[start][1] if _times else None
    del _times[:start]  # what lies before the start is never read again
    _times.append((t, now))
    if before is None or now[1] <= before[1]:
        return None
    return (now[0] - before[0]) / (now[1] - before[1])


def _blas() -> str:
    cfg = torch.__config__.show()
    for key in ("BLAS_INFO=", "LAPACK_INFO="):
        if key in cfg:
            return cfg.split(key, 1)[1].split(",", 1)[0]
    return "unknown"


@functools.cache
def _git_sha() -> str | None:
    """HEAD of the checkout fraq is imported from, asked once per process: the code a
    process runs is what it imported, so a run during which HEAD moves records the commit
    it started from, not each commit it passes."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _driver_version(index: int) -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML absent or not initialisable: try nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _cusolver_version() -> int | None:
    """cusolverGetVersion() of the cuSOLVER torch uses (e.g. 11601 for 11.6.1), or None."""
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    site = os.path.dirname(os.path.dirname(torch.__file__))
    names = ["libcusolver.so", "libcusolver.so.11", "libcusolver.so.12"]
    names += glob.glob(os.path.join(torch_lib, "libcusolver*.so*"))
    names += glob.glob(os.path.join(site, "nvidia", "cu*", "lib", "libcusolver*.so*"))
    names += glob.glob(os.path.join(site, "nvidia", "cusolver", "lib", "libcusolver*.so*"))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            v = ctypes.c_int()
            if lib.cusolverGetVersion(ctypes.byref(v)) == 0:
                return int(v.value)
        except (OSError, AttributeError):
            continue
    return None


SMI_FIELDS = {"clocks.sm": "gpu_clock_sm_mhz", "clocks.mem": "gpu_clock_mem_mhz",
              "clocks.max.sm": "gpu_clock_sm_max_mhz", "clocks.max.mem": "gpu_clock_mem_max_mhz",
              "memory.total": "gpu_memory_total_mib", "memory.used": "gpu_memory_used_mib"}
"""``nvidia-smi --query-gpu`` field -> the record's key (MHz, MiB)."""


def _nvml(index: int) -> dict | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVML's binding absent or not initialisable
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        sm, mc = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
        return {"gpu_clock_sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, sm),
                "gpu_clock_mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, mc),
                "gpu_clock_sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, sm),
                "gpu_clock_mem_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, mc),
                "gpu_memory_total_mib": mem.total // 2**20, "gpu_memory_used_mib": mem.used // 2**20}
    except Exception:  # noqa: BLE001 - a query this driver refuses
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _number(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def smi_record(index: int = 0) -> dict:
    """GPU ``index``'s clocks (MHz: now and the maximum) and memory (MiB: total, used), from
    NVML where its binding is installed, else one ``nvidia-smi`` query; None where neither
    answers. NVML numbers GPUs as the driver does (``CUDA_VISIBLE_DEVICES`` can renumber
    them for CUDA); with one visible GPU the two agree."""
    rec = _nvml(index)
    if rec is not None:
        return rec
    rec = dict.fromkeys(SMI_FIELDS.values())
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return rec
    values = [v.strip() for v in out.stdout.strip().split(",")]
    if out.returncode == 0 and len(values) == len(SMI_FIELDS):
        rec.update({key: _number(v) for key, v in zip(SMI_FIELDS.values(), values)})
    return rec


def gpu_record(device: torch.device | str) -> dict:
    """GPU name, driver, CUDA runtime and cuSOLVER versions of a CUDA ``device``."""
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return {"gpu": torch.cuda.get_device_name(index), "gpu_driver": _driver_version(index),
            "cuda": torch.version.cuda, "cusolver": _cusolver_version(), **smi_record(index)}


def machine_record(device: torch.device | str = "cpu") -> dict:
    """CPU model and clock, cores, torch threads, BLAS, versions, git sha, and the device used.

    ``device``: where the run computed; on a CUDA device the :func:`gpu_record` fields
    are filled, otherwise they are None.
    """
    device = torch.device(device)
    rec = {
        "cpu": _cpu_model(),
        "cpu_mhz": _cpu_mhz(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "blas": _blas(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "gpu": None, "gpu_driver": None, "cuda": torch.version.cuda, "cusolver": None,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "git_sha": _git_sha(),
    }
    if device.type == "cuda":
        rec.update(gpu_record(device))
    return rec
