"""FRAQ's ``reads="call"``: every shape group's static pass queued before one host read per
call, against the per-group reads and against float64.

What must hold: the same ranks and bit-identical downlinks as ``reads="group"`` (the same
operations on the same stacks, only the read moved), on friendly uploads and on uploads
whose verdicts fail in one group (clients rescaled against each other by 1e23: that group
takes the stepwise pipeline on its own stacks); exactly one host read per call where every
group passes; a NaN named by client and module as the per-group reads name it; and each
module's product within the float32 rounding of the Eckart-Young optimum of its float64
aggregate.

Bound for the last: with M the float64 aggregate and p the module's rank,
||M - B_g A_g||_F <= ||M - M_p||_F + 64 s eps32 ||M||_F, s = min(d, r): the first-order
error of a float32 method whose basis keeps float32 orthogonality (the static pass's
Cholesky verdict) carries a few s eps32 of ||M||_F from the two float32 GEMMs of each side
and the basis; 64 leaves a margin of 8 over the static tests' own 8 s eps32 between the
two pipelines.
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.measure.host_reads import count_host_reads
from fraq.aggregators import ClientUpdate, get_aggregator
from fraq.aggregators.fraq import READS, READS_DEFAULTS
from fraq.methods import MethodSpec
from fraq.synthetic import lora_clients

EPS32 = torch.finfo(torch.float32).eps
SHAPES = {"q": (48, 40), "up": (64, 40), "down": (40, 64)}
"""Three shape groups, two modules each; every stacked rank (9) below half the smaller side,
so each group takes the static pass."""

CUDA_LIKE = dict(backend="cholesky", pipeline="static")
"""The CUDA configuration's basis and pipeline, run here on the CPU."""


def _uploads(seed: int = 0, ranks=(2, 3, 4)) -> list[ClientUpdate]:
    factors = [{} for _ in ranks]
    for i, (kind, (m, n)) in enumerate(SHAPES.items()):
        for layer in range(2):
            Bs, As = lora_clients(m, n, list(ranks), seed=seed + 10 * i + layer)
            for k in range(len(ranks)):
                factors[k][f"layers.{layer}.{kind}"] = (Bs[k], As[k])
    return [ClientUpdate(f, weight=float(k + 1), scale=2.0) for k, f in enumerate(factors)]


def _both(updates, **kw):
    return {reads: get_aggregator("fraq", **CUDA_LIKE, reads=reads, **kw).aggregate(updates)
            for reads in ("group", "call")}


def _assert_identical(a, b):
    assert a.ranks == b.ranks
    for name in a.ranks:
        for x, y in zip(a.downlinks[0][name].sent, b.downlinks[0][name].sent):
            assert x.shape == y.shape and torch.equal(x, y), name


@pytest.mark.parametrize("kw", [dict(tau=0.95), dict(tau=0.999), dict(tau=1.0), dict(rank=3)])
def test_same_result_as_per_group_reads(kw):
    out = _both(_uploads(), **kw)
    _assert_identical(out["group"], out["call"])


def test_one_host_read_per_call():
    ups = _uploads()
    reads = {}
    for mode in ("group", "call"):
        agg = get_aggregator("fraq", **CUDA_LIKE, reads=mode)
        reads[mode] = count_host_reads(lambda: agg.aggregate(ups)).total
    assert reads == {"group": len(SHAPES), "call": 1}


def test_a_group_whose_verdicts_fail_takes_the_stepwise_pipeline_alone():
    """Client 1's factors of one group rescaled by 1e23 / 1e-23 (the product unchanged): the
    static pass's range verdict fails there, that group runs stepwise, the others stay static;
    the result equals the per-group reads' exactly."""
    ups = _uploads()
    f = dict(ups[1].factors)
    for layer in range(2):
        B, A = f[f"layers.{layer}.up"]
        f[f"layers.{layer}.up"] = (B * 1e23, A * 1e-23)
    ups[1] = ClientUpdate(f, weight=ups[1].weight, scale=ups[1].scale)
    out = _both(ups, tau=0.95)
    _assert_identical(out["group"], out["call"])


def test_products_within_rounding_of_the_float64_optimum():
    ups = _uploads(seed=3)
    res = get_aggregator("fraq", **CUDA_LIKE, reads="call", tau=0.95).aggregate(ups)
    weights = [u.weight for u in ups]
    total = sum(weights)
    for name, p in res.ranks.items():
        M = sum((w / total) * u.scale * (u.factors[name][0].double() @ u.factors[name][1].double())
                for w, u in zip(weights, ups))
        sv = torch.linalg.svdvals(M)
        B, A = res.downlinks[0][name].sent
        err = float(torch.linalg.matrix_norm(M - B.double() @ A.double()))
        optimum = float(sv[p:].square().sum().sqrt())
        norm = float(sv.square().sum().sqrt())
        s = min(*M.shape, sum(u.factors[name][1].shape[0] for u in ups))
        assert err <= optimum + 64 * s * EPS32 * norm, (name, err, optimum)
        # the energy rule on the float64 spectrum: p is the fewest components holding tau
        energy = sv.square().cumsum(0) / sv.square().sum()
        assert float(energy[p - 1]) >= 0.95 - 64 * s * EPS32 and (p == 1 or float(energy[p - 2]) < 0.95 + 64 * s * EPS32)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_named_by_client_and_module(bad):
    ups = _uploads()
    f = dict(ups[2].factors)
    B = f["layers.1.down"][0].clone()
    B[0, 0] = bad
    f["layers.1.down"] = (B, f["layers.1.down"][1])
    ups[2] = ClientUpdate(f, weight=ups[2].weight, scale=ups[2].scale)
    messages = []
    for mode in ("group", "call"):
        with pytest.raises(ValueError, match=r"client 2, module 'layers.1.down', B contains a non-finite") as e:
            get_aggregator("fraq", **CUDA_LIKE, reads=mode).aggregate(ups)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_reads_option_checked_and_spelled_in_the_method_grammar():
    with pytest.raises(ValueError, match=r"reads\(='once'\) must be one of"):
        get_aggregator("fraq", reads="once")
    assert get_aggregator("fraq", **MethodSpec.parse("fraq:tau=0.8,reads=call").kwargs).reads == "call"
    assert get_aggregator("fraq", rank=5, reads="call").capped(2).reads == "call"
    assert set(READS) == {"auto", "group", "call"} and set(READS_DEFAULTS.values()) <= {"group", "call"}


def test_auto_is_per_group_where_no_device_has_measured_call():
    """``"auto"`` reads per group on the CPU (a read costs nothing there; ``"call"`` holds
    every group's stacks until the one read)."""
    ups = _uploads()
    agg = get_aggregator("fraq", **CUDA_LIKE)
    assert count_host_reads(lambda: agg.aggregate(ups)).total == len(SHAPES)
    assert math.isfinite(sum(agg.aggregate(ups).ranks.values()))


# ----------------------------------------------------------------------------- one r x r stage per call

def _mixed_uploads(shapes: dict, ranks: dict, seed: int = 0) -> list[ClientUpdate]:
    """Uploads of three clients whose client ranks differ by module kind (``ranks[kind]``)."""
    K = len(next(iter(ranks.values())))
    factors = [{} for _ in range(K)]
    for i, (kind, (m, n)) in enumerate(shapes.items()):
        Bs, As = lora_clients(m, n, list(ranks[kind]), seed=seed + i)
        for k in range(K):
            factors[k][f"layers.0.{kind}"] = (Bs[k], As[k])
    return [ClientUpdate(f, weight=float(k + 1), scale=2.0) for k, f in enumerate(factors)]


def _eigh_batches(monkeypatch, agg, ups):
    """The aggregate, and the batch size of every eigenproblem call the static pass made."""
    import fraq._static

    seen = []
    real = fraq._static.eigh

    def spy(G, *a, **k):
        seen.append(G.shape[0])
        return real(G, *a, **k)

    monkeypatch.setattr(fraq._static, "eigh", spy)
    return agg.aggregate(ups), seen


@pytest.mark.parametrize("kw", [dict(tau=0.95), dict(tau=1.0), dict(rank=2)])
def test_groups_sharing_the_stacked_rank_share_one_eigenproblem(monkeypatch, kw):
    """Three shape groups of stacked rank 9 (floor constant 9 each): one eigenproblem call
    of all 6 matrices under ``"call"``, one per group under ``"group"``; the same result."""
    ups = _uploads()
    out = {}
    for reads, want in (("group", [2, 2, 2]), ("call", [6])):
        out[reads], seen = _eigh_batches(monkeypatch, get_aggregator("fraq", **CUDA_LIKE, reads=reads, **kw), ups)
        assert seen == want, (reads, seen)
    _assert_identical(out["group"], out["call"])


def test_groups_with_another_rank_or_floor_constant_get_their_own_stage(monkeypatch):
    """The r x r stage is shared only where every constant of it is: groups of another
    stacked rank (3 against 9), or of the same rank but another noise-floor constant
    k = max(min(d, r), sqrt(d + r)) (r = 3: k = sqrt(43) at d = 40, sqrt(83) at d = 80),
    each get their own; the results equal the per-group reads' exactly."""
    shapes = {"q": (48, 40), "up": (64, 40), "wide": (96, 80), "down": (40, 64)}
    ranks = {"q": (2, 3, 4), "up": (1, 1, 1), "wide": (1, 1, 1), "down": (2, 3, 4)}
    ups = _mixed_uploads(shapes, ranks)
    out = {}
    for reads in ("group", "call"):
        out[reads], seen = _eigh_batches(monkeypatch, get_aggregator("fraq", **CUDA_LIKE, reads=reads, tau=0.95), ups)
        if reads == "call":  # q and down (r = 9) together; up (r = 3, d = 40); wide (r = 3, d = 80)
            assert sorted(seen) == [1, 1, 2], seen
    _assert_identical(out["group"], out["call"])
    assert out["call"].ranks["layers.0.up"] <= 3 and out["call"].ranks["layers.0.q"] <= 9


@pytest.mark.parametrize("c", [1e20, 1e23])
def test_a_failed_verdict_in_a_shared_stage_leaves_the_other_groups_static(c):
    """Client 1's 'up' factors rescaled against each other by c (the product unchanged).
    The group is oriented along its short side n, so Y = B^T: at 1e20 its Gram is finite and
    the shared stage's row-Gram verdict (||y_k||^2 ~ 1e35, above float32's max eps) fails
    for that group's matrix only; at 1e23 its float32 Y Y^T overflows and its Gram is not
    finite, so the joint eigenproblem is refused and each group is started alone. Either way that group runs stepwise, the other two stay
    static, and each result equals its own call's exactly."""
    import fraq
    from fraq._plan import check_options
    from fraq._recompress import finish_started, read_started, start_checked_all

    ups = _uploads()
    f = dict(ups[1].factors)
    B, A = f["layers.0.up"]
    f["layers.0.up"] = (B * c, A / c)
    ups[1] = ClientUpdate(f, weight=ups[1].weight, scale=ups[1].scale)
    options = check_options(tau=0.95, rank=None, **CUDA_LIKE)
    pairs = [fraq.stack([u.factors[f"layers.0.{kind}"][0] for u in ups],
                        [u.factors[f"layers.0.{kind}"][1] for u in ups]) for kind in SHAPES]
    started = start_checked_all(options, pairs)
    shared = {id(st.static.rows) for st in started if st.static is not None and st.static.rows is not None}
    assert len(shared) == (1 if c == 1e20 else 0)
    results = [finish_started(st, h) for st, h in zip(started, read_started(started))]
    assert [res.info["pipeline"] for res in results] == ["static", "stepwise", "static"]
    for (B, A), res in zip(pairs, results):
        alone = fraq.recompress(B, A, tau=0.95, **CUDA_LIKE)
        assert res.rank == alone.rank and torch.equal(res.B, alone.B) and torch.equal(res.A, alone.A)
