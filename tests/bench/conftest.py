"""pytest-benchmark hooks for the quick checks: the machine a result was measured on."""

from __future__ import annotations


def pytest_benchmark_update_machine_info(config, machine_info):
    """Add torch, its BLAS, the torch thread count, the CPU (and GPU) to the saved JSON's
    ``machine_info`` (:func:`fraq._machine.machine_record`)."""
    from benchmarks.device import bench_device
    from fraq._machine import machine_record

    try:
        device = bench_device()
    except ValueError:
        device = "cpu"
    rec = machine_record(device)
    machine_info["fraq"] = {k: rec[k] for k in ("torch", "blas", "threads", "cpu", "cores", "device", "gpu",
                                                "gpu_driver", "cuda", "cusolver", "git_sha") if k in rec}
