"""The host's budgets of one whole-model aggregate: host reads and non-view ops per shape group.

A host read is a device synchronisation (:mod:`benchmarks.measure.host_reads`), a non-view
op at least one kernel launch (:mod:`benchmarks.measure.ops`); both are counted on the CPU
in CUDA's configuration (``backend="cholesky"``, ``pipeline="static"``) and in the stepwise
pipeline it hands failed batches to, on the presets' module and client
structures at reduced sides (:func:`benchmarks.measure.overhead.counted_preset`). The
budgets fail when a count grows, so a regression shows on any CPU before a GPU sees it;
the project's targets (docs/performance.md, "Host reads and launches"): the one host
read is met, the op count is held in a non-strict xfail until the pipeline meets it. Nothing here asserts on a timing.
"""

import numpy as np
import pytest
import torch

from benchmarks.measure.host_reads import HostReadCounter, count_host_reads
from benchmarks.measure.ops import OpCounter
from benchmarks.measure.overhead import CUDA_CONFIGURATION, counted_preset, per_group, python_preset, shape_groups
from fraq.aggregators import get_aggregator

# Today's counts of one aggregate, per shape group, in two configurations:
# * "cuda": CUDA's defaults, get_aggregator("fraq", backend="cholesky", pipeline="static"):
#   the pass's one packed read (.numpy()); the stacking's 6 ops (two buffers, one copy and
#   one broadcast multiply per stack) and the pass's 54.
# * "stepwise": the stepwise pipeline on the same basis, which the static one hands a failed
#   batch to: the packed read, four host-made tensors sent back (the rank mask, ranks,
#   energies, singular values); 85 ops.
# Raise only with a reason.
# * "call": CUDA's configuration with reads="call": every group's pass queued, then one read
#   per call (LLaMA's 4 groups: 1/4 per group); the groups share one r x r stage (one
#   eigenproblem, rule and verdict table for all 4, 5 ops to join their r x r parts), 118
#   ops for LLaMA's 4 groups.
CONFIGS = {"cuda": dict(CUDA_CONFIGURATION),
           "stepwise": dict(backend="cholesky", pipeline="stepwise"),
           "call": dict(CUDA_CONFIGURATION, reads="call")}
HOST_READS_PER_GROUP = {("cuda", "roberta-base"): 1, ("cuda", "llama-3.2-3b"): 1,
                        ("stepwise", "roberta-base"): 5, ("stepwise", "llama-3.2-3b"): 5,
                        ("call", "roberta-base"): 1, ("call", "llama-3.2-3b"): 0.25}
OPS_PER_GROUP = {("cuda", "roberta-base"): 60, ("cuda", "llama-3.2-3b"): 60,
                 ("stepwise", "roberta-base"): 85, ("stepwise", "llama-3.2-3b"): 85,
                 ("call", "roberta-base"): 60, ("call", "llama-3.2-3b"): 29.5}
OPS_SLACK = 4  # a reordering of the checks may add an op or two; a step added per client or module will not fit

# The project's targets (docs/performance.md), for CUDA's configuration: the ranks' one read,
# and about ten kernels of math plus the fused energy rule and checks.
TARGET_HOST_READS_PER_GROUP = 1
TARGET_OPS_PER_GROUP = 35

PRESETS = ("roberta-base", "llama-3.2-3b")
CASES = [(c, p) for c in CONFIGS for p in PRESETS]


@pytest.fixture(scope="module")
def counts():
    return {(c, p): per_group(get_aggregator("fraq", **CONFIGS[c]), p) for c, p in CASES}


# ----------------------------------------------------------------------------- the counters count


@pytest.mark.parametrize("read", [
    ("Tensor.item", lambda t: t[0].item()),
    ("Tensor.__bool__", lambda t: bool(t[0] > 0)),
    ("Tensor.__bool__", lambda t: 1 if t.any() else 0),
    ("Tensor.tolist", lambda t: t.tolist()),
    ("Tensor.numpy", lambda t: t.numpy()),
    ("Tensor.cpu", lambda t: t.cpu()),
    ("torch.tensor", lambda t: torch.tensor([1.0, 2.0])),
    ("torch.as_tensor", lambda t: torch.as_tensor(np.ones(3))),
    ("torch.from_numpy", lambda t: torch.from_numpy(np.ones(3))),
    ("aten._local_scalar_dense", lambda t: float(t[0])),
    ("aten.nonzero", lambda t: t.nonzero()),
    ("aten.index", lambda t: t[t > 2]),
], ids=lambda r: r[0] if isinstance(r, tuple) else None)
def test_each_kind_of_read_is_one(read):
    kind, fn = read
    t = torch.arange(6.0)
    with HostReadCounter() as c:
        fn(t)
    assert dict(c.reads) == {kind: 1}


def test_tolist_is_one_read_however_long():
    t = torch.arange(1000.0)
    with HostReadCounter() as c:
        t.tolist()
        t.reshape(10, 100).tolist()
    assert c.total == 2


def test_device_work_and_free_reads_are_not_counted():
    t = torch.arange(6.0)
    with HostReadCounter() as c:
        u = (t * 2).sum(0, keepdim=True).exp()
        torch.as_tensor(u)  # already a tensor: no host data
        torch.zeros(3)  # no host data
        h = t.cpu()
        h.numpy(), h.tolist()  # already on the host
    assert dict(c.reads) == {"Tensor.cpu": 1}


def test_counter_restores_torch():
    before = (torch.tensor, torch.from_numpy, torch.Tensor.item, "__bool__" in vars(torch.Tensor))
    with HostReadCounter():
        assert torch.tensor is not before[0]
    assert (torch.tensor, torch.from_numpy, torch.Tensor.item, "__bool__" in vars(torch.Tensor)) == before
    assert bool(torch.ones(())) and torch.ones(2).tolist() == [1.0, 1.0]


def test_count_host_reads_counts_the_warm_call():
    t = torch.arange(4.0)
    calls = []
    c = count_host_reads(lambda: calls.append(t.sum().item()))
    assert len(calls) == 2 and c.total == 1


def test_views_are_excluded():
    with OpCounter() as c:
        x = torch.ones(4, 6)
        y = x.reshape(-1)[:5].unsqueeze(0).t()  # views
        y.add_(1)
        (x @ x.mT).sum()
    assert c.total > c.non_view_total
    assert set(c.non_view) == {"aten.ones", "aten.add_", "aten.mm", "aten.sum"}
    assert c.non_view_total == 4


# ----------------------------------------------------------------------------- the presets' structures


def test_structures_keep_modules_and_shape_groups():
    for name in PRESETS:
        small = counted_preset(name)
        assert small.modules == _preset(name).modules and small.ranks == _preset(name).ranks
        assert shape_groups(small) == len({(g.m, g.n) for g in _preset(name).groups})
        assert all(min(g.m, g.n) >= 2 * sum(small.ranks) for g in small.groups)
        assert {(g.m, g.n) for g in python_preset(name).groups} == {(16, 16)}
        assert python_preset(name).modules == _preset(name).modules


def _preset(name):
    from fraq.presets import get_preset

    return get_preset(name)


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_counted_as_cuda_runs_it(counts, case):
    """One pass per group, as on CUDA: one eigenproblem per shape group, no CPU chunks
    (each of which would repeat the pass's ops and its host read); under ``reads="call"``
    one eigenproblem per call, every group's matrices in its batch (the presets' groups
    share the stacked rank)."""
    c = counts[case]
    assert c.groups == shape_groups(counted_preset(case[1]))
    per_call = case[0] == "call" and c.groups > 1
    assert c.ops_by_name.get("aten._linalg_eigh") == (1 if per_call else c.groups), c.ops_by_name


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_host_reads_within_budget(counts, case):
    c = counts[case]
    print(f"{case}: {c.host_reads_per_group:g} host reads per shape group ({c.groups} groups): {c.reads_by_kind}")
    assert c.host_reads_per_group <= HOST_READS_PER_GROUP[case], c.reads_by_kind


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_non_view_ops_within_budget(counts, case):
    c = counts[case]
    print(f"{case}: {c.ops_per_group:g} non-view ops per shape group ({c.groups} groups)")
    assert c.ops_per_group <= OPS_PER_GROUP[case] + OPS_SLACK, sorted(c.ops_by_name.items(), key=lambda kv: -kv[1])


@pytest.mark.parametrize("name", PRESETS)
def test_host_read_target(counts, name):
    """CUDA's configuration reads the host once per shape group: the ranks, with every verdict."""
    c = counts[("cuda", name)]
    assert c.host_reads_per_group <= TARGET_HOST_READS_PER_GROUP, c.reads_by_kind


def test_cuda_configuration_is_the_cuda_default():
    """What is counted as "cuda" is the static pipeline on the Cholesky basis, as ``"auto"``
    resolves on CUDA, read per shape group (CUDA's entry of fraq._defaults.DEFAULTS: no GPU has
    measured ``"call"`` yet)."""
    assert CONFIGS["cuda"] == {"backend": "cholesky", "pipeline": "static", "reads": "group"}


@pytest.mark.xfail(strict=False, reason="the static pass runs about 54 ops: the energy rule and checks are not yet fused")
@pytest.mark.parametrize("name", PRESETS)
def test_ops_target(counts, name):
    c = counts[("cuda", name)]
    assert c.ops_per_group <= TARGET_OPS_PER_GROUP, c.ops_by_name
