"""The host budget of a round through the round buffer: per client, per shape group, per call.

Every count is exact and machine-independent (:mod:`benchmarks.measure.round_host`): Python
calls (the host-time proxy), aten ops (all and non-view) and host reads, of every client's
flat upload added (``buf.add``) and of the one ``buf.aggregate``. Three kinds of check:

* the counters count what their rules say, on code whose counts are derived by hand;
* regression budgets: today's counts (below), which fail when a count grows;
* the project's targets (docs/performance.md, "The host budget of a round"); a target not
  met today is a non-strict xfail whose reason gives today's counts, never a pass that
  hides it. Nothing here is timed.
"""

import gc
import sys

import pytest

from benchmarks.measure.python_calls import PythonCallCounter
from benchmarks.measure.round_host import CLIENTS, CONFIGURATIONS, STRUCTURES, aggregator, round_counts, structure

PRESETS = ("roberta-base", "llama-3.2-3b")
CASES = [(label, name, kind) for kind in STRUCTURES for name in PRESETS for label in CONFIGURATIONS]

# Today's counts, (config, preset, structure) -> (adds, call), each (Python calls, aten ops,
# non-view ops, host reads); "adds" is every client's add together (16x16: 8 clients,
# reduced: RoBERTa 10, LLaMA 8). Raise only with a reason: the static pass's B_p product written
# column-major (fraq._layout.tall_product) adds three views and a call per shape group.
_ADDS_16 = (748, 88, 40, 8)
TODAY = {
    ("fraq-cuda", "roberta-base", "16x16"): (_ADDS_16, (712, 38, 17, 5)),
    ("fraq-cpu", "roberta-base", "16x16"): (_ADDS_16, (709, 38, 17, 5)),
    ("fraq-call", "roberta-base", "16x16"): (_ADDS_16, (712, 38, 17, 5)),
    ("flora", "roberta-base", "16x16"): (_ADDS_16, (435, 7, 2, 0)),
    ("fraq-cuda", "llama-3.2-3b", "16x16"): (_ADDS_16, (1832, 38, 17, 5)),
    ("fraq-cpu", "llama-3.2-3b", "16x16"): (_ADDS_16, (1829, 38, 17, 5)),
    ("fraq-call", "llama-3.2-3b", "16x16"): (_ADDS_16, (1832, 38, 17, 5)),
    ("flora", "llama-3.2-3b", "16x16"): (_ADDS_16, (1555, 7, 2, 0)),
    ("fraq-cuda", "roberta-base", "reduced"): ((945, 110, 50, 10), (702, 103, 56, 1)),
    ("fraq-cpu", "roberta-base", "reduced"): ((945, 110, 50, 10), (762, 47, 23, 5)),
    ("fraq-call", "roberta-base", "reduced"): ((945, 110, 50, 10), (702, 103, 56, 1)),
    ("flora", "roberta-base", "reduced"): ((945, 110, 50, 10), (465, 7, 2, 0)),
    ("fraq-cuda", "llama-3.2-3b", "reduced"): ((1156, 280, 88, 8), (2706, 416, 224, 4)),
    ("fraq-cpu", "llama-3.2-3b", "reduced"): ((1156, 280, 88, 8), (2886, 192, 92, 20)),
    ("fraq-call", "llama-3.2-3b", "reduced"): ((1156, 280, 88, 8), (2601, 264, 118, 1)),
    ("flora", "llama-3.2-3b", "reduced"): ((1156, 280, 88, 8), (1714, 28, 8, 0)),
}
FIELDS = ("python_calls", "aten_ops", "non_view_ops", "host_reads")
# Slack above today's counts: less than one more call per client (K >= 8) in the adds, and
# per module (36 or more) in the call, so work added per client or per module always fails;
# a reordering of checks may add an op or two; host reads have none.
SLACK = {("adds", "python_calls"): 4, ("call", "python_calls"): 16, ("adds", "aten_ops"): 4,
         ("call", "aten_ops"): 4, ("adds", "non_view_ops"): 4, ("call", "non_view_ops"): 4,
         ("adds", "host_reads"): 0, ("call", "host_reads"): 0}

# The targets (docs/performance.md): FRAQ's call through the buffer at 16 x 16.
TARGET_GROWTH = 1.3  # Python calls at 196 modules over 36, equal clients and shape groups
TARGET_OVER_FLORA = 1.3  # FRAQ's Python calls over FLoRA's through the same buffer
TARGET_READS_PER_CALL = 1
TARGET_OPS_PER_GROUP, TARGET_OPS_PER_CALL = 35, 40  # non-view ops <= 35 groups + 40


@pytest.fixture(scope="module")
def counts():
    cache = {}

    def get(label, name, kind):
        if (label, name, kind) not in cache:
            cache[label, name, kind] = round_counts(aggregator(label), structure(name, kind))
        return cache[label, name, kind]

    return get


# ----------------------------------------------------------------------------- the counter counts


def _walk(n):
    return [len(str(i)) for i in range(n)]  # a list comprehension is inlined in 3.12, a frame in 3.11


def test_python_calls_counted_by_hand():
    """``_walk(n)``: 1 Python call, its comprehension's frame on 3.11 (1), and 2 builtins
    (``len``, ``str`` is a type: not counted) per item; ``sum`` of a generator over n
    items: n + 1 entries and 1 builtin."""
    comprehension = 1 if sys.version_info < (3, 12) else 0
    for n in (0, 1, 7):
        with PythonCallCounter() as c:
            _walk(n)
        assert (c.python, c.builtin) == (1 + comprehension, n)
        with PythonCallCounter() as c:
            sum(i for i in range(n))
        assert (c.python, c.builtin) == (n + 1, 1)
    with PythonCallCounter() as c:
        pass
    assert c.total == 0


def test_python_call_counter_restores_the_profiler_and_gc():
    seen = []

    def outer(frame, event, arg):
        seen.append(frame.f_code.co_name)

    was = gc.isenabled()
    sys.setprofile(outer)
    try:
        with PythonCallCounter() as c:
            assert not gc.isenabled()
            _walk(2)
        assert sys.getprofile() is outer and c.python >= 1
    finally:
        sys.setprofile(None)
    assert gc.isenabled() == was
    assert "_walk" not in seen  # nothing inside the block reached the outer profiler


# ----------------------------------------------------------------------------- the structures


@pytest.mark.parametrize("name", PRESETS)
def test_structures(name):
    """16x16: the preset's modules, one shape group, CLIENTS clients in both presets;
    reduced: the preset's modules, shape groups and clients."""
    from fraq.presets import get_preset

    full = get_preset(name)
    flat, small = structure(name, "16x16"), structure(name, "reduced")
    assert flat.modules == small.modules == full.modules
    assert {(g.m, g.n) for g in flat.groups} == {(16, 16)} and flat.clients == CLIENTS
    assert small.clients == full.clients
    assert len({(g.m, g.n) for g in small.groups}) == len({(g.m, g.n) for g in full.groups})


# ----------------------------------------------------------------------------- regression budgets


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_counts_within_budget(counts, case):
    c = counts(*case)
    for part, today in zip(("adds", "call"), TODAY[case]):
        got = getattr(c, part)
        for field, budget in zip(FIELDS, today):
            value = getattr(got, field)
            print(f"{case} {part} {field}: {value} (budget {budget})")
            assert value <= budget + SLACK[part, field], (part, field, value, got.reads_by_kind,
                                                          sorted(got.non_view_by_name.items(), key=lambda kv: -kv[1]))


@pytest.mark.parametrize("label", list(CONFIGURATIONS))
def test_adds_are_per_client_not_per_module(counts, label):
    """Adding a flat upload costs the same at 36 and 196 modules of one shape (one block
    each), equal clients: the upload is checked and copied per shape group, never per
    module; one host read per client (the finiteness total)."""
    a, b = (counts(label, name, "16x16").adds for name in PRESETS)
    assert (a.python_calls, a.aten_ops, a.host_reads) == (b.python_calls, b.aten_ops, b.host_reads)
    assert a.host_reads == CLIENTS


# ----------------------------------------------------------------------------- the targets

_GROWTH = "FRAQ's call makes {} Python calls at 36 modules and {} at 196 ({:.1f}x): about 460 fixed (the r x r " \
          "stage, its verdicts and energy rule) and 7 per module, as FLoRA's (each module's Downlink and factors " \
          "objects, its dict and list entries), where 1.3x allows less than 3"


@pytest.mark.parametrize("label", [
    pytest.param("fraq-cuda", marks=pytest.mark.xfail(strict=False, reason=_GROWTH.format(712, 1832, 1832 / 712))),
    pytest.param("fraq-cpu", marks=pytest.mark.xfail(strict=False, reason=_GROWTH.format(709, 1829, 1829 / 709))),
])
def test_growth_target(counts, label):
    """FRAQ's host work per call grows at most 1.3x from 36 to 196 modules (16 x 16, equal
    clients and shape groups)."""
    a, b = (counts(label, name, "16x16").call.python_calls for name in PRESETS)
    assert b <= TARGET_GROWTH * a, (a, b)


_RATIO = "FRAQ's call makes {} Python calls to FLoRA's {} ({:.3f}x): a fixed ~460 to FLoRA's ~180 (the " \
         "recompression's r x r stage, verdicts, energy rule), and 7 per module as FLoRA's: at 196 modules within " \
         "the target, at 36 not"


@pytest.mark.parametrize("label,name", [
    pytest.param("fraq-cuda", "roberta-base", marks=pytest.mark.xfail(strict=False,
                                                                       reason=_RATIO.format(712, 435, 712 / 435))),
    pytest.param("fraq-cpu", "roberta-base", marks=pytest.mark.xfail(strict=False,
                                                                      reason=_RATIO.format(709, 435, 709 / 435))),
    ("fraq-cuda", "llama-3.2-3b"),
    ("fraq-cpu", "llama-3.2-3b"),
])
def test_over_flora_target(counts, label, name):
    """FRAQ's host work per call at most 1.3x FLoRA's through the same buffer (16 x 16)."""
    fraq, flora = (counts(m, name, "16x16").call.python_calls for m in (label, "flora"))
    assert fraq <= TARGET_OVER_FLORA * flora, (fraq, flora)


_STEPWISE = "5 reads: the general-rank route (stacked rank 64 > 16) reads as the stepwise pipeline, its packed " \
            "verdicts then 4 tensors made on the host from them"


@pytest.mark.parametrize("name,kind", [
    pytest.param("roberta-base", "16x16", marks=pytest.mark.xfail(strict=False, reason=_STEPWISE)),
    pytest.param("llama-3.2-3b", "16x16", marks=pytest.mark.xfail(strict=False, reason=_STEPWISE)),
    ("roberta-base", "reduced"),
    pytest.param("llama-3.2-3b", "reduced", marks=pytest.mark.xfail(
        strict=False, reason="4 reads, one per shape group: CUDA reads per group until a GPU has timed "
                             "reads='call', which makes it 1 (fraq-call's budget)")),
])
def test_host_read_target(counts, name, kind):
    """At most one host read per aggregate call, in CUDA's configuration."""
    c = counts("fraq-cuda", name, kind).call
    assert c.host_reads <= TARGET_READS_PER_CALL, c.reads_by_kind


@pytest.mark.parametrize("label,name,kind", [
    ("fraq-cuda", "roberta-base", "16x16"),
    ("fraq-cuda", "llama-3.2-3b", "16x16"),
    ("fraq-cuda", "roberta-base", "reduced"),
    pytest.param("fraq-cuda", "llama-3.2-3b", "reduced", marks=pytest.mark.xfail(
        strict=False, reason="224 non-view ops for 4 groups (budget 180): 56 per group, 2 of them the stacks' "
                             "weighting in place and 54 the static pass, whose energy rule and checks are not "
                             "yet fused")),
    ("fraq-call", "llama-3.2-3b", "reduced"),  # the r x r stage once per call: 118 for 4 groups
])
def test_ops_target(counts, label, name, kind):
    """At most 35 non-view ops per shape group plus 40 per call."""
    c = counts(label, name, kind)
    assert c.call.non_view_ops <= TARGET_OPS_PER_GROUP * c.groups + TARGET_OPS_PER_CALL, c.call.non_view_by_name


def test_asv_tracks_every_structure_and_configuration():
    """benchmarks/bench_host.py spells its parameters out (the suite imports nothing new at
    import time, for benchmarks.regress); they must be these."""
    from benchmarks.bench_host import PRESETS as TRACKED, RoundHost

    assert RoundHost.params == [list(STRUCTURES), list(TRACKED), list(CONFIGURATIONS)]
    assert list(TRACKED) == list(PRESETS)
