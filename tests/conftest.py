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
    CPU and GPU and the 1-minute load average in the saved JSON's ``machine_info`` (:func:`fraq._machine.machine_record`)."""
    from benchmarks.device import bench_device
    from fraq._machine import machine_record

    try:
        device = bench_device()
    except ValueError:
        device = "cpu"
    rec = machine_record(device)
    machine_info["fraq"] = {k: rec[k] for k in ("torch", "blas", "threads", "cpu", "cores", "device", "gpu",
                                                "gpu_driver", "cuda", "cusolver", "git_sha") if k in rec}
    from benchmarks import cases

    # the load at the run's end and the checks' threads: benchmarks.pytest_compare.busy
    machine_info["fraq"].update(loadavg=os.getloadavg()[0], bench_threads=cases.THREADS)


@pytest.fixture(autouse=True, scope="session")
def _kernel_table(tmp_path_factory):
    """The per-machine kernel table (benchmarks.measure.kernels) in a temporary file for the
    whole session, session fixtures and the processes tests start included: tests never
    write the user's cache."""
    if "FRAQ_KERNEL_TABLE" in os.environ:
        yield
        return
    mp = pytest.MonkeyPatch()
    mp.setenv("FRAQ_KERNEL_TABLE", str(tmp_path_factory.getbasetemp() / "kernels.json"))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def tiny_results(tmp_path_factory):
    """The recorded tiny run's result files (:mod:`tiny_fixture`: every experiment a figure
    or table draws, measured once and committed), unpacked once per session: the same
    numbers on every machine, for the tests of what the analysis draws from them.
    Read-only: a module takes its experiments with :func:`tiny_copy`."""
    from tiny_fixture import unpack

    return unpack(tmp_path_factory.mktemp("tiny-recorded"))


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """The runner's results at the tiny size, measured now (real measurements, about a
    minute and a half) for the end-to-end tests of the runner and the report: every test
    that takes it is in the integration tier (:func:`pytest_collection_modifyitems`).
    Read-only: a module takes its experiments with :func:`tiny_copy`."""
    import importlib.util

    from benchmarks import run
    from tiny_fixture import EXPERIMENTS

    peft = all(importlib.util.find_spec(m) is not None for m in ("peft", "transformers"))
    out = tmp_path_factory.mktemp("tiny-runs") / "results"
    run.run(out, tuple(e for e in EXPERIMENTS if peft or e != "peft"), size="tiny", progress=False)
    return out


def tiny_copy(results, dest, experiments) -> None:
    """Copy ``experiments``' result folders (those that exist) from ``results`` into ``dest``."""
    import shutil
    from pathlib import Path

    Path(dest).mkdir(parents=True, exist_ok=True)
    for e in experiments:
        if (Path(results) / e).is_dir():
            shutil.copytree(Path(results) / e, Path(dest) / e)


@pytest.fixture
def method_parses(monkeypatch) -> list:
    """Every text :meth:`fraq.methods.MethodSpec.parse` is handed during the test, in order (a
    spec handed back as it is is not a parse): the front doors' parses, counted."""
    from fraq.methods import MethodSpec

    texts, real = [], MethodSpec.parse.__func__

    def parse(cls, text):
        if not isinstance(text, MethodSpec):
            texts.append(text)
        return real(cls, text)

    monkeypatch.setattr(MethodSpec, "parse", classmethod(parse))
    return texts


INTEGRATION_FIXTURES = {"tiny_runs", "cpu_run"}
"""Fixtures that run an end-to-end flow (the tiny run measured now; the GPU check's CPU
flow, ``tests/test_gpu_check.py``): a test that takes one is an integration test."""


def pytest_collection_modifyitems(config, items):
    """Every test that takes a fixture of :data:`INTEGRATION_FIXTURES` is an integration
    test: ``make test`` leaves it to ``make test-integration``. Other end-to-end tests
    carry the ``integration`` marker themselves."""
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


def pytest_addoption(parser):
    parser.addoption("--pipeline", default=None, choices=["stepwise", "static"],
                     help="the pipeline recompress(pipeline='auto') runs on every device "
                          "(fraq._defaults.DEFAULTS); with 'static', every call the static pipeline "
                          "completes is also run stepwise and must give the same ranks")


def set_default(monkeypatch, device_type: str, **choices) -> None:
    """For this test, ``"auto"`` on ``device_type`` resolves to ``choices`` (fields of
    :class:`fraq._defaults.DeviceDefaults`): the device's entry of the one defaults table is
    replaced, the rest of it kept, and restored when the test ends."""
    import dataclasses

    from fraq._defaults import DEFAULTS, defaults_for

    monkeypatch.setitem(DEFAULTS, device_type, dataclasses.replace(defaults_for(device_type), **choices))


STATIC_RUNS = {"static": 0, "stepwise": 0}
"""Under ``--pipeline=static``: calls the static pipeline completed, and those it handed on."""


@pytest.fixture(autouse=True)
def _pipeline_default(request, monkeypatch):
    """``--pipeline``: every ``pipeline="auto"`` call runs that pipeline (where it applies);
    with ``static``, ``backend="auto"`` is ``cholesky`` on the CPU too (the CUDA configuration,
    the one the static pipeline serves), and every static result is checked against the
    stepwise pipeline on the same input, rank for rank."""
    chosen = request.config.getoption("--pipeline")
    if chosen is not None:
        import fraq._static

        for device in ("cpu", "cuda"):
            set_default(monkeypatch, device, pipeline=chosen)
        if chosen == "static":  # backend="auto" runs the configuration the static pipeline serves
            set_default(monkeypatch, "cpu", backend="cholesky")
            monkeypatch.setattr(fraq._static, "run", _same_ranks_as_stepwise(fraq._static.run))
    yield


def _same_ranks_as_stepwise(run):
    import dataclasses

    import fraq._recompress

    def checked(plan, B, A):
        res = run(plan, B, A)
        STATIC_RUNS["static" if res is not None else "stepwise"] += 1
        counting = torch.Tensor.numpy is not torch._C.TensorBase.numpy  # a test counting host reads: none of ours
        if res is not None and not counting:
            old = fraq._recompress._recompress_impl(dataclasses.replace(plan, static=False), B, A)
            assert res.rank_list() == old.rank_list(), (res.rank_list(), old.rank_list())
        return res

    return checked


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config.getoption("--pipeline") == "static":
        terminalreporter.write_line(f"static pipeline: {STATIC_RUNS['static']} calls completed, "
                                    f"{STATIC_RUNS['stepwise']} handed to the stepwise pipeline")
