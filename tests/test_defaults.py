"""The one defaults table: what ``"auto"`` resolves to per device type, read by every resolver.

What must hold: on the CPU and CUDA every option resolves to the table's entry (and those
entries are the measured ones the module docstring names); a device type not in the table
runs the reference routes; replacing a device's entry changes what a real call runs, for
each of the four options; the per-option names are live, read-only views of it; and
an entry naming a value no resolver knows is refused by name.

The one numeric check (a call the patched table sends down the static pipeline) bounds
||M - B_p A_p||_F <= ||M - M_p||_F + 64 s eps32 ||M||_F against the float64 SVD of the
aggregate M, s = min(d, r): the bound of tests/test_reads_per_call.py, for the same reason.
"""

from __future__ import annotations

import pytest
import torch
from conftest import set_default

import fraq
from benchmarks.measure.host_reads import count_host_reads
from fraq._defaults import DEFAULTS, UNMEASURED, Column, DeviceDefaults, defaults_for
from fraq._eigen import resolve
from fraq._plan import PIPELINE_DEFAULTS, Plan, check_options
from fraq.aggregators import ClientUpdate, get_aggregator
from fraq.aggregators.fraq import READS_DEFAULTS, _reads
from fraq.backends import DEVICE_DEFAULTS, EXACT_BACKENDS, resolve_backend
from fraq.synthetic import lora_clients

EPS32 = torch.finfo(torch.float32).eps
CPU, CUDA, OTHER = torch.device("cpu"), torch.device("cuda", 0), torch.device("meta")


def _factors(m=48, n=40, ranks=(2, 3, 4), seed=0, dtype=torch.float32):
    Bs, As = lora_clients(m, n, list(ranks), seed=seed, dtype=dtype)
    return fraq.stack(Bs, As)


COMMITTED = dict(DEFAULTS)
"""The table as the library defines it, taken at import, before any fixture patches it."""


@pytest.fixture(autouse=True)
def _committed_table(monkeypatch):
    """This file tests the table itself: its entries are the committed ones whatever
    ``--pipeline`` asks of the rest of the suite (conftest's fixture patches the table first)."""
    for device, entry in COMMITTED.items():
        monkeypatch.setitem(DEFAULTS, device, entry)


class _OnDevice:
    """A factor's shape and dtype on ``device``: all :meth:`Plan.of` reads, so a CUDA call is
    planned without a GPU."""

    def __init__(self, t: torch.Tensor, device: torch.device):
        self.shape, self.dtype, self.device = t.shape, t.dtype, device


def _pipeline(device: torch.device) -> str:
    """The pipeline a call with every option ``"auto"`` plans for float32 factors on ``device``."""
    B, A = _factors()
    plan = Plan.of(check_options(tau=0.95), _OnDevice(B, device), _OnDevice(A, device))
    return "static" if plan.static else "stepwise"


def test_cpu_and_cuda_resolve_as_measured(monkeypatch):
    """The entries the module docstring's measurements set, resolved by each resolver."""
    import fraq._eigen as eigen

    monkeypatch.setattr(eigen, "_cupy_import_error", lambda: None)  # CuPy imports: CUDA's route
    assert (resolve_backend("auto", CPU), resolve_backend("auto", CUDA)) == ("householder", "cholesky")
    assert (_pipeline(CPU), _pipeline(CUDA)) == ("stepwise", "static")
    assert (_reads("auto", CPU), _reads("auto", CUDA), _reads("auto", None)) == ("group", "group", "group")
    assert (resolve("auto", CPU), resolve("auto", CUDA)) == ("device", "cupy")
    for device in (CPU, CUDA):  # float64 data: Householder whatever the device's entry
        assert resolve_backend("auto", device, torch.float64) == "householder"


def test_a_device_type_not_in_the_table_runs_the_reference_routes():
    assert OTHER.type not in DEFAULTS and defaults_for(OTHER.type) is UNMEASURED is defaults_for(None)
    assert resolve_backend("auto", OTHER) == "householder" and _reads("auto", OTHER) == "group"
    assert resolve("auto", OTHER) == "device" and _pipeline(OTHER) == "stepwise"


def test_every_entry_names_an_exact_backend():
    for device, entry in [*DEFAULTS.items(), ("unmeasured", UNMEASURED)]:
        assert entry.backend in EXACT_BACKENDS, (device, entry)


def test_patching_the_table_changes_what_a_real_call_runs(monkeypatch):
    """Backend and pipeline: ``fraq.recompress`` with every option ``"auto"`` runs the patched
    CPU entry, and its product is still within float32 rounding of the float64 optimum."""
    B, A = _factors()
    before = fraq.recompress(B, A, tau=0.95)
    assert (before.backend, before.info["pipeline"]) == ("householder", "stepwise")
    set_default(monkeypatch, "cpu", backend="cholesky", pipeline="static")
    res = fraq.recompress(B, A, tau=0.95)
    assert (res.backend, res.info["pipeline"]) == ("cholesky", "static")
    M = B.double() @ A.double()
    S = torch.linalg.svdvals(M)
    p = int(res.rank)
    s = min(min(M.shape), B.shape[-1])
    err = torch.linalg.matrix_norm(M - res.B.double() @ res.A.double())
    assert err <= S[p:].square().sum().sqrt() + 64 * s * EPS32 * S.square().sum().sqrt()


def test_patching_the_table_changes_when_the_host_reads(monkeypatch):
    """Reads: with CUDA's basis and pipeline on the CPU, ``"auto"`` reads once per shape group
    until the table says ``"call"``, then once per call."""
    factors = [{} for _ in range(3)]
    for i, (m, n) in enumerate([(48, 40), (64, 40), (40, 64)]):
        Bs, As = lora_clients(m, n, [2, 3, 4], seed=i)
        for k in range(3):
            factors[k][f"layers.{i}.proj"] = (Bs[k], As[k])
    ups = [ClientUpdate(f, weight=1.0, scale=2.0) for f in factors]
    set_default(monkeypatch, "cpu", backend="cholesky", pipeline="static")
    agg = get_aggregator("fraq")
    assert count_host_reads(lambda: agg.aggregate(ups)).total == 3
    set_default(monkeypatch, "cpu", reads="call")
    assert count_host_reads(lambda: agg.aggregate(ups)).total == 1


def test_patching_the_table_changes_the_eigensolver_route(monkeypatch):
    import fraq._eigen as eigen

    monkeypatch.setattr(eigen, "_cupy_import_error", lambda: None)
    set_default(monkeypatch, "cuda", eigensolver="device")
    assert resolve("auto", CUDA) == "device"
    set_default(monkeypatch, "cuda", eigensolver="host")
    assert resolve("auto", CUDA) == "host"
    set_default(monkeypatch, "cpu", eigensolver="host")  # the host is the CPU's device
    assert resolve("auto", CPU) == "device"
    monkeypatch.setattr(eigen, "_say_no_cupy", lambda: None)
    monkeypatch.setattr(eigen, "_cupy_import_error", lambda: "absent")
    set_default(monkeypatch, "cuda", eigensolver="cupy")
    assert resolve("auto", CUDA) == "device"  # CuPy's route needs CuPy


def test_the_per_option_names_are_live_read_only_views(monkeypatch):
    views = {"backend": DEVICE_DEFAULTS, "pipeline": PIPELINE_DEFAULTS, "reads": READS_DEFAULTS}
    for field, view in views.items():
        assert dict(view) == {t: getattr(e, field) for t, e in DEFAULTS.items()}
        with pytest.raises(TypeError):
            view["cpu"] = "x"  # type: ignore[index]
    set_default(monkeypatch, "cpu", backend="cholesky", pipeline="static", reads="call")
    assert (DEVICE_DEFAULTS["cpu"], PIPELINE_DEFAULTS["cpu"], READS_DEFAULTS["cpu"]) == ("cholesky", "static", "call")
    assert READS_DEFAULTS.get("meta", "group") == "group"


def test_an_entry_a_resolver_cannot_run_is_refused_by_name():
    good = dict(backend="householder", pipeline="stepwise", reads="group", eigensolver="device")
    for field, bad in [("backend", "auto"), ("backend", ""), ("pipeline", "auto"), ("reads", "once"),
                       ("eigensolver", "lapack")]:
        with pytest.raises(ValueError, match=rf"{field}\(={bad!r}\)"):
            DeviceDefaults(**{**good, field: bad})
    with pytest.raises(ValueError, match=r"field\(='tau'\)"):
        Column("tau")


def test_the_library_docs_show_the_table():
    """docs/library.md's table of what ``"auto"`` runs is the committed table, row for row."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "library.md").read_text()
    entries = {**COMMITTED, "any other": UNMEASURED}
    rows = {}
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and len(cells) == 5 and cells[0] in entries:
            rows[cells[0]] = tuple(c.split("`")[0].split(" (")[0].strip() for c in cells[1:])
    assert rows == {t: (e.backend, e.pipeline, e.reads, e.eigensolver) for t, e in entries.items()}
