"""A record of the machine a measurement ran on, saved beside every result."""

from __future__ import annotations

import os
import platform
import subprocess

import torch

__all__ = ["machine_record"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas() -> str:
    cfg = torch.__config__.show()
    for key in ("BLAS_INFO=", "LAPACK_INFO="):
        if key in cfg:
            return cfg.split(key, 1)[1].split(",", 1)[0]
    return "unknown"


def _git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_record() -> dict:
    """CPU model, cores, torch threads, BLAS, torch/Python versions, GPU if any, git sha."""
    rec = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "blas": _blas(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "git_sha": _git_sha(),
    }
    return rec
