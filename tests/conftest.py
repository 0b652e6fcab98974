"""Shared helpers for the tests: float64 references and eps-derived tolerances."""

from __future__ import annotations

import os

import pytest
import torch

from fraq.synthetic import lora_clients  # noqa: F401  (re-exported for the tests)


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of the dtype the computation runs in (bf16/fp16 compute in float32)."""
    return torch.finfo(dtype).eps


def dense_svd(M: torch.Tensor):
    """float64 SVD of an explicitly formed aggregate: the reference of record."""
    return torch.linalg.svd(M.double(), full_matrices=False)


def truncation_error(S: torch.Tensor, p: torch.Tensor | int) -> torch.Tensor:
    """sqrt(sum_{i>p} S_i^2): the Eckart-Young optimum for each matrix."""
    idx = torch.arange(S.shape[-1])
    p = torch.as_tensor(p).unsqueeze(-1)
    return torch.where(idx >= p, S, 0).square().sum(-1).sqrt()


def fro(M: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(M.double())


def pytest_benchmark_update_machine_info(config, machine_info):
    """pytest-benchmark's hook (tests/bench): torch, its BLAS, the torch thread count, the
    CPU and GPU in the saved JSON's ``machine_info`` (:func:`fraq._machine.machine_record`)."""
    from benchmarks.device import bench_device
    from fraq._machine import machine_record

    try:
        device = bench_device()
    except ValueError:
        device = "cpu"
    rec = machine_record(device)
    machine_info["fraq"] = {k: rec[k] for k in ("torch", "blas", "threads", "cpu", "cores", "device", "gpu",
                                                "gpu_driver", "cuda", "cusolver", "git_sha") if k in rec}


@pytest.fixture(autouse=True)
def _kernel_table(tmp_path_factory, monkeypatch):
    """The per-machine kernel table (benchmarks.measure.kernels) in a temporary file: tests
    never write the user's cache."""
    if "FRAQ_KERNEL_TABLE" not in os.environ:
        monkeypatch.setenv("FRAQ_KERNEL_TABLE", str(tmp_path_factory.getbasetemp() / "kernels.json"))
