"""The per-kernel roofs (benchmarks.measure.kernels): what they see, that timing them changes
nothing the call computes, that their FLOPs are the counter's, and that the roof is a limit."""

from __future__ import annotations

import json

import pytest
import torch

import fraq
from benchmarks.measure import count_flops, threads
from benchmarks.measure.kernels import LADDER, RateTable, copy_bandwidth, kernel_roofs
from fraq.synthetic import lora_clients

GEMM = 1e11  # a stated GEMM rate, so these tests do not measure one


@pytest.mark.integration
def test_each_kernel_is_seen_with_its_flops_and_bytes():
    a, b, c = torch.randn(64, 32), torch.randn(32, 48), torch.randn(64, 48)

    def call():
        x = a @ b            # mm: 2 * 64 * 32 * 48 FLOPs, reads a and b, writes x
        x.add_(c)            # in place: reads x and c, writes x
        return x.t()         # a view: no kernel

    r = kernel_roofs(call, table=RateTable(), gemm_rate=GEMM)
    ops = [k.op for k in r.kernels]
    assert ops == ["aten.mm", "aten.add_"]
    assert r.views == 1
    mm, add = r.kernels
    assert mm.flops == 2 * 64 * 32 * 48
    assert mm.bytes == 4 * (64 * 32 + 32 * 48 + 64 * 48)
    assert add.flops == 0 and add.bytes == 4 * (64 * 48 * 2)  # x read and written once, c read
    assert add.flop_term == 0.0 and add.bytes_term > 0.0
    assert mm.flop_term == mm.seconds > 0.0
    assert r.roof == pytest.approx(sum(max(k.flop_term, k.bytes_term) for k in r.kernels))
    assert r.gemm_bound == pytest.approx(r.flops / GEMM)


@pytest.mark.integration
def test_timing_the_kernels_changes_nothing_the_call_computes():
    """In-place ops are replayed on copies and random ops with their generators restored: the
    call's outputs are bit for bit those of the same call without the recorder."""
    def call():
        torch.manual_seed(3)
        x = torch.randn(40, 40)
        y = torch.randn(40, 40, generator=torch.Generator().manual_seed(5))
        x.mul_(2.0).add_(y)
        q, _ = torch.linalg.qr(x)
        return q, torch.rand(3)

    want = call()
    state = torch.random.get_rng_state()
    seen = []
    r = kernel_roofs(lambda: seen.append(call()), table=RateTable(), gemm_rate=GEMM)
    assert all(torch.equal(w, g) for w, g in zip(want, seen[0]))
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator left where the call leaves it
    assert len(r.kernels) >= 5


@pytest.mark.integration
def test_flops_are_the_counters_on_a_recompression():
    """The roofs' FLOPs are the dispatch counter's (the same formulas on the same ops): a
    check of the plumbing, the formulas being checked in test_routine_flops."""
    B, A = fraq.stack(*lora_clients(96, 80, [4, 4, 6], batch=(3,), seed=0))
    with threads(1):
        call = lambda: fraq.recompress(B, A, tau=0.9)  # noqa: E731
        call()
        r = kernel_roofs(call, table=RateTable(), gemm_rate=GEMM)
        c = count_flops(call)
    assert r.flops == pytest.approx(c.total, rel=1e-9, abs=len(r.kernels))
    assert {k.op for k in r.kernels} >= {"aten.geqrf", "aten._linalg_eigh"}


def test_copy_bandwidth_never_falls_as_the_working_set_shrinks():
    table = RateTable()
    rates = [copy_bandwidth(s, table=table) for s in LADDER[:5]]
    assert all(x >= y for x, y in zip(rates, rates[1:]))
    assert copy_bandwidth(1, table=table) == rates[0]  # below the ladder: its first rung


def test_the_table_keeps_the_best_time_and_swaps_its_file_in_whole(tmp_path):
    path = tmp_path / "k" / "machine.json"
    t = RateTable(path)
    assert t.put("a", 2.0) == 2.0 and t.put("a", 3.0) == 2.0 and t.put("a", 1.0) == 1.0
    t.save()
    assert json.loads(path.read_text()) == {"best": {"a": 1.0}}
    assert [p.name for p in path.parent.iterdir() if not p.name.endswith(".lock")] == ["machine.json"]
    assert RateTable(path).get("a") == 1.0
    path.write_text("{not json")
    assert RateTable(path).best == {}  # a table only holds floors: an unreadable one starts afresh


WRITER = """
import sys
from benchmarks.measure.kernels import RateTable
path, who = sys.argv[1], sys.argv[2]
for i in range(40):
    t = RateTable(path)
    t.put(f"{who}|{i}", 1e-5 + i * 1e-7)
    t.save()
"""


def test_two_processes_saving_at_once_lose_no_entry(tmp_path):
    """Each of two processes loads, adds its own entry and saves, 40 times, at the same
    time: every one of the 80 entries is in the file at the end (merged under a lock)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    path = tmp_path / "machine.json"
    env = dict(os.environ, PYTHONPATH=str(root))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who], env=env) for who in ("a", "b")]
    assert all(p.wait(120) == 0 for p in procs)
    assert len(RateTable(path).best) == 80


def test_a_linked_table_is_written_through_its_link(tmp_path):
    real = tmp_path / "shared" / "machine.json"
    real.parent.mkdir()
    link = tmp_path / "machine.json"
    link.symlink_to(real)
    t = RateTable(link)
    t.put("a", 1e-5)
    t.save()
    assert link.is_symlink() and RateTable(real).get("a") == 1e-5


@pytest.mark.parametrize("bad", [1e-9 * 2e-5, 0.0, -1.0, float("nan"), float("inf"), 1e308])
def test_an_impossible_entry_is_discarded_on_reading_naming_the_file(tmp_path, capsys, bad):
    """A time that cannot be a kernel's (scaled by a unit slip, zero, negative, NaN, absurd)
    is dropped with one line naming the file, so it is measured again instead of giving a roof
    of 1e-13 s, dividing by zero or lasting for ever (the table keeps minima)."""
    path = tmp_path / "machine.json"
    path.write_text(json.dumps({"best": {"aten.mm|x": bad, "aten.mm|y": 2e-5, "copy|4096|cpu|1": 1e-6}}))
    t = RateTable(path)
    assert t.best == {"aten.mm|y": 2e-5, "copy|4096|cpu|1": 1e-6}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "1 impossible" in err


def test_a_copy_faster_than_any_memory_is_discarded(tmp_path, capsys):
    path = tmp_path / "machine.json"
    path.write_text(json.dumps({"best": {"copy|268435456|cpu|1": 1e-6}}))  # 256 MiB in a microsecond: 5e14 B/s
    assert RateTable(path).best == {}
    assert "impossible" in capsys.readouterr().err


@pytest.mark.slow
def test_the_roof_is_below_the_call():
    """Each kernel alone, warm, at its own shapes, is no slower than inside the call, so the
    roof stays under the call's best time: for FRAQ, FLoRIST and a dense SVD of the product.
    The margin 5% allows a kernel whose lone samples all met a busy moment."""
    from benchmarks.measure import timed
    from fraq.aggregators.florist import florist_recompress

    B, A = fraq.stack(*lora_clients(384, 512, [8] * 6, batch=(8,), seed=0))
    calls = {"fraq": lambda: fraq.recompress(B, A, tau=0.95),
             "florist": lambda: florist_recompress(B, A, tau=0.95),
             "dense": lambda: torch.linalg.svd(B @ A, full_matrices=False)}
    with threads(1):
        for name, call in calls.items():
            call()
            r = kernel_roofs(call, table=RateTable(), gemm_rate=GEMM)
            best = timed(call, repeats=7, warmup=1).min
            assert r.roof <= 1.05 * best, (name, r.roof, best)
            assert r.flop_roof > 0 and r.bytes_roof > 0


def test_an_unwritable_default_table_falls_back_to_a_temporary_one_saying_so(tmp_path, monkeypatch, capsys):
    """A home where the table cannot go (here a file in its place): a temporary table, one warning."""
    from benchmarks.measure import kernels

    home = tmp_path / "home"
    home.write_text("not a folder")
    monkeypatch.delenv("FRAQ_KERNEL_TABLE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(kernels.tempfile, "tempdir", None)  # TMPDIR read again
    kernels._writable_or_fallback.cache_clear(), kernels._fallback.cache_clear()
    path = kernels.table_path("cpu")
    assert path.parent.parent == tmp_path / "tmp" and path.parent.name.startswith("fraq-kernels-")
    table = RateTable(path)
    table.put("k", 1e-3)
    table.save()
    assert RateTable(kernels.table_path("cpu")).get("k") == 1e-3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the kernel table directory {home / '.cache' / 'fraq' / 'kernels'} " \
                                   f"(FRAQ_KERNEL_TABLE unset) cannot be created" in err
    kernels._writable_or_fallback.cache_clear(), kernels._fallback.cache_clear()


def test_once_times_each_distinct_kernel_once_per_table(monkeypatch, tmp_path):
    """With ``once``, a kernel repeated in a call (the same op, shapes and strides) and a kernel
    an earlier call timed on the same table object are taken from the table: 2 distinct kernels
    in 5 are timed twice in all, and a second call times none, its kernels the table's times.
    Entries read from the table's file were not timed by this object: timed again."""
    from benchmarks.measure import kernels

    timed = []
    real = kernels._Recorder._time
    monkeypatch.setattr(kernels._Recorder, "_time", lambda self, f, a, k: timed.append(str(f)) or real(self, f, a, k))
    a, b, c = torch.randn(24, 16), torch.randn(16, 20), torch.randn(20, 8)

    def call():
        for _ in range(4):
            x = a @ b
        return x @ c

    table = RateTable()
    first = kernel_roofs(call, table=table, gemm_rate=GEMM, once=True)
    assert [k.op for k in first.kernels] == ["aten.mm"] * 5 and timed == ["aten.mm.default"] * 2
    second = kernel_roofs(call, table=table, gemm_rate=GEMM, once=True)
    mm = {k: v for k, v in table.best.items() if k.startswith("aten.mm")}
    assert len(timed) == 2 and set(mm) <= table.timed and len(mm) == 2
    assert {k.seconds for k in second.kernels} == set(mm.values())  # the table's times, the repeated one's alike
    assert len({k.seconds for k in second.kernels[:4]}) == 1
    kernel_roofs(call, table=table, gemm_rate=GEMM)  # without once: every kernel timed again
    assert len(timed) == 7
    table.path = tmp_path / "t.json"
    table.save()
    fresh = RateTable(tmp_path / "t.json")
    assert fresh.timed == set() and set(mm) <= set(fresh.best)
    kernel_roofs(call, table=fresh, gemm_rate=GEMM, once=True)
    assert len(timed) == 9


def test_samples_are_checked_and_no_gemm_is_measured_when_not_wanted(monkeypatch):
    from benchmarks.measure import timing

    ran = []
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=rf"samples\(={bad!r}\) must be an integer >= 1"):
            kernel_roofs(lambda: ran.append(1), table=RateTable(), samples=bad)
    assert ran == []  # refused before the call ran
    monkeypatch.setattr(timing, "gemm_rate", lambda *a, **k: pytest.fail("a GEMM was measured"))
    x = torch.randn(8, 8)
    r = kernel_roofs(lambda: x @ x, table=RateTable(), samples=1, gemm=False)
    assert len(r.kernels) == 1 and r.roof > 0 and torch.isnan(torch.tensor([r.gemm_rate, r.gemm_bound])).all()
