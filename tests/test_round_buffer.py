"""The round buffer: uploads added one client at a time aggregate as the list of them does.

References: the list path (``agg.aggregate(updates)``, a separate implementation of the
stacking) and float64 dense aggregates (:func:`fraq.reference.dense_aggregate`).
Tolerances are eps of the dtype times a stated factor.
"""

from __future__ import annotations

import dataclasses
import doctest
import gc
import itertools
import math
import weakref

import pytest
import torch

from conftest import eps
from fraq.aggregators import AGGREGATORS, ClientUpdate, Layout, RoundBuffer, get_aggregator
from fraq.reference import dense_aggregate
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64

# Two shape blocks, one of two modules; a third shape in its own block.
MODULES = {"layers.0.q": (20, 30), "layers.1.q": (20, 30), "layers.0.o": (40, 12)}
MIXED = [2, 5, 3]
UNIFORM = [3, 3, 3]
WEIGHTS = [120.0, 30.0, 75.0]
SCALES = [2.0, 0.5, 1.0]

# The buffer hands a method the same values as the list path; only a summation order may
# differ (a view's strides pick another BLAS path for a dense product), each a few eps,
# amplified by sigma_1 / gap of the rank cut (the synthetic spectra decay by 0.85 per
# component, so a gap is about 15% of sigma_i: a factor under 10). 64 covers it.
SAME_FACTOR = 64
# A product of inner dimension R carries about sqrt(R) eps relative error, the stacks one
# rounding per factor; 8 sqrt(R) eps covers a float32 result against float64.
EXACT_FACTOR = 8


def _uploads(method: str, ranks=None, *, modules=MODULES, scales=SCALES, weights=WEIGHTS, dtype=F32, seed=0):
    """Per method, K uploads it accepts: FLoRG's (None, A_k), LoRA-A^2's round one (a
    shared A), uniform ranks for the methods that average factors, mixed ranks else."""
    cls = AGGREGATORS[method]
    ranks = ranks or (MIXED if cls.heterogeneous_ranks else UNIFORM)
    if not cls.heterogeneous_ranks:
        scales = [scales[0]] * len(ranks)
    data = {name: lora_clients(m, n, ranks, seed=seed + i, dtype=dtype) for i, (name, (m, n)) in
            enumerate(modules.items())}
    ups = []
    for k in range(len(ranks)):
        f = {}
        for name, (m, n) in modules.items():
            B, A = data[name][0][k], data[name][1][k]
            if cls.single_matrix:
                f[name] = (None, A if n <= m else B.mT.contiguous())
            elif method == "lora-a2":
                f[name] = (B, data[name][1][0])
            else:
                f[name] = (B, A)
        ups.append(ClientUpdate(f, scale=scales[k], weight=weights[k]))
    return ups, ranks


def _buffer(agg, ups, ranks, *, order=None, modules=MODULES):
    buf = agg.open_round(modules, clients=len(ups), ranks=ranks, dtype=ups[0].factors[next(iter(modules))][1].dtype)
    for k in (order or range(len(ups))):
        assert buf.add(ups[k], client=k) == k
    return buf


def _product(down) -> torch.Tensor:
    """What a downlink adds, in float64: B A (or FLoRG's A^T A, its Gram) summed over merge and start."""
    terms = list(down.merge) + ([down.start] if down.start is not None else [])
    return sum(f.scale * (f.A.double().mT @ f.A.double() if f.B is None else f.B.double() @ f.A.double())
               for f in terms)


def _assert_same_result(got, want, K, dtype=F32, factor=SAME_FACTOR):
    assert got.ranks == want.ranks
    assert got.method == want.method and got.client_init == want.client_init
    for k in range(K):
        assert got.downlinks[k].keys() == want.downlinks[k].keys()
        for name in want.downlinks[k]:
            g, w = _product(got.downlinks[k][name]), _product(want.downlinks[k][name])
            assert torch.linalg.norm(g - w) <= factor * eps(dtype) * torch.linalg.norm(w), (k, name)
            assert [t.shape for t in got.downlinks[k][name].sent] == [t.shape for t in want.downlinks[k][name].sent]


@pytest.mark.parametrize("method", list(AGGREGATORS))
def test_every_method_aggregates_as_the_list_path(method):
    agg = get_aggregator(method)
    ups, ranks = _uploads(method)
    buf = _buffer(agg, ups, ranks, order=[2, 0, 1])
    _assert_same_result(buf.aggregate(), agg.aggregate(ups), len(ups))


def test_lora_a2_second_round_with_state():
    agg = get_aggregator("lora-a2")
    ups, ranks = _uploads("lora-a2")
    first = agg.aggregate(ups)
    # An A round: every client holds the global B and uploads its trained A.
    round2 = [ClientUpdate({n: (first.state.adapters[n][0], u.factors[n][1] * (1 + k)) for n in MODULES},
                           scale=u.scale, weight=u.weight) for k, u in enumerate(ups)]
    want = agg.aggregate(round2, first.state)
    got = _buffer(agg, round2, ranks).aggregate(first.state)
    _assert_same_result(got, want, len(ups))
    for n in MODULES:
        assert all(torch.equal(x, y) for x, y in zip(got.state.adapters[n], want.state.adapters[n]))


@pytest.mark.parametrize("method", ["fraq", "flora", "florist"])
def test_stacking_methods_against_a_float64_dense_aggregate(method):
    """tau = 1 keeps every component above rounding: the product is the exact weighted aggregate."""
    agg = get_aggregator(method, **({} if method == "flora" else {"tau": 1.0}))
    ups, ranks = _uploads(method)
    res = _buffer(agg, ups, ranks, order=[1, 2, 0]).aggregate()
    R = sum(ranks)
    for name in MODULES:
        ref = dense_aggregate([u.factors[name][0] for u in ups], [u.factors[name][1] for u in ups], WEIGHTS, SCALES)
        got = res.downlinks[0][name].delta()
        tol = EXACT_FACTOR * math.sqrt(R) * eps(F32) * torch.linalg.norm(ref)
        assert torch.linalg.norm(got - ref) <= tol, name


@pytest.mark.parametrize("dtype", [F32, F64, torch.bfloat16])
@pytest.mark.parametrize("method", ["fraq", "flora"])
def test_stacks_are_the_list_paths_bit_for_bit(method, dtype):
    """The buffer weights its stacks by the list path's own multiply after an exact copy
    (half precision included: both multiply in float32 and round once)."""
    agg = get_aggregator(method)
    ups, ranks = _uploads(method, dtype=dtype)
    got, want = _buffer(agg, ups, ranks, order=[2, 1, 0]).aggregate(), agg.aggregate(ups)
    for name in MODULES:
        assert all(torch.equal(x, y) for x, y in zip(got.downlinks[0][name].sent, want.downlinks[0][name].sent))


@pytest.mark.parametrize("method", ["fraq", "flexlora"])
def test_arrival_order_changes_nothing_and_client_order_only_rounding(method):
    agg = get_aggregator(method, **({"tau": 1.0} if method == "fraq" else {}))
    ups, ranks = _uploads(method)
    first = _buffer(agg, ups, ranks).aggregate()
    for order in itertools.permutations(range(3)):
        again = _buffer(agg, ups, ranks, order=list(order)).aggregate()
        for name in MODULES:
            assert all(torch.equal(_product(again.downlinks[k][name]), _product(first.downlinks[k][name]))
                       for k in range(3))
    perm = [2, 0, 1]
    moved = _buffer(agg, [ups[k] for k in perm], [ranks[k] for k in perm]).aggregate()
    for name in MODULES:
        for new, old in enumerate(perm):  # client `old` is now at index `new`
            g, w = _product(moved.downlinks[new][name]), _product(first.downlinks[old][name])
            assert torch.linalg.norm(g - w) <= SAME_FACTOR * eps(F32) * torch.linalg.norm(w)


@pytest.mark.parametrize("method", ["fraq", "fedit"])
def test_flat_uploads_aggregate_as_client_updates(method):
    agg = get_aggregator(method)
    ups, ranks = _uploads(method)
    want = _buffer(agg, ups, ranks).aggregate()
    buf = agg.open_round(MODULES, clients=3, ranks=ranks)
    for k in (1, 0, 2):
        flat = buf.layout_of(k).pack(ups[k])
        assert flat.dim() == 1 and flat.numel() == sum((m + n) * ranks[k] for m, n in MODULES.values())
        buf.add(flat, client=k, weight=ups[k].weight, scale=ups[k].scale)
    got = buf.aggregate()
    for name in MODULES:
        assert torch.equal(_product(got.downlinks[0][name]), _product(want.downlinks[0][name]))


def test_pack_unpack_round_trip_is_exact_and_unpack_makes_views():
    ups, ranks = _uploads("fraq", modules={**MODULES, "layers.1.o": (40, 12), "mlp": (7, 50)})
    buf = get_aggregator("fraq").open_round({**MODULES, "layers.1.o": (40, 12), "mlp": (7, 50)}, clients=3,
                                            ranks=ranks)
    for k, u in enumerate(ups):
        layout = buf.layout_of(k)
        flat = layout.pack(u)
        back = layout.unpack(flat, scale=u.scale, weight=u.weight)
        assert list(back.factors) == list(u.factors)
        lo, hi = flat.data_ptr(), flat.data_ptr() + flat.numel() * flat.element_size()
        for name, (B, A) in u.factors.items():
            B2, A2 = back.factors[name]
            assert torch.equal(B2, B) and torch.equal(A2, A)
            assert lo <= B2.data_ptr() < hi and lo <= A2.data_ptr() < hi  # views, not copies
        assert torch.equal(layout.pack(back), flat)
        assert (back.scale, back.weight) == (u.scale, u.weight)
    assert [b.names for b in buf.layout_of(0).blocks] == [("layers.0.q", "layers.1.q"), ("layers.0.o", "layers.1.o"),
                                                         ("mlp",)]


def test_single_matrix_layout_round_trip():
    ups, ranks = _uploads("florg")
    layout = get_aggregator("florg").open_round(MODULES, clients=3, ranks=ranks).layout
    flat = layout.pack(ups[1])
    assert flat.numel() == sum(3 * min(m, n) for m, n in MODULES.values())
    back = layout.unpack(flat)
    assert all(back.factors[n][0] is None and torch.equal(back.factors[n][1], ups[1].factors[n][1]) for n in MODULES)


def test_layout_needs_a_client_when_ranks_differ():
    buf = get_aggregator("fraq").open_round(MODULES, clients=3, ranks=MIXED)
    with pytest.raises(ValueError, match="layout_of"):
        buf.layout
    assert isinstance(buf.layout_of(1), Layout) and buf.layout_of(1) != buf.layout_of(0)


def test_per_module_ranks_and_scales_that_split_a_block():
    """A client whose LoRA scale differs between same-shape modules: the list path groups them
    apart; so does the buffer, by a view (adjacent modules) or a copy (the middle one apart)."""
    modules = {"a": (16, 24), "b": (16, 24), "c": (16, 24), "d": (24, 10)}
    ranks = {"a": [2, 4], "b": [2, 4], "c": [2, 4], "d": 3}
    data = {name: lora_clients(m, n, [ranks[name]] * 2 if isinstance(ranks[name], int) else ranks[name], seed=i)
            for i, (name, (m, n)) in enumerate(modules.items())}
    scales = [{"a": 1.0, "b": 3.0, "c": 1.0, "d": 2.0}, 0.5]
    ups = [ClientUpdate({n: (data[n][0][k], data[n][1][k]) for n in modules}, scale=scales[k], weight=[1, 3][k])
           for k in range(2)]
    agg = get_aggregator("fraq", tau=1.0)
    buf = agg.open_round(modules, clients=2, ranks=ranks)
    for k in (1, 0):
        buf.add(ups[k], client=k)
    got = buf.aggregate()
    _assert_same_result(got, agg.aggregate(ups), 2)
    for n in modules:
        ref = dense_aggregate([u.factors[n][0] for u in ups], [u.factors[n][1] for u in ups], [1, 3],
                              [u.scale_of(n) for u in ups])
        R = data[n][1][0].shape[0] + data[n][1][1].shape[0]
        assert torch.linalg.norm(got.downlinks[0][n].delta() - ref) <= \
            EXACT_FACTOR * math.sqrt(R) * eps(F32) * torch.linalg.norm(ref)


@pytest.mark.parametrize("method", ["fraq", "flora"])
def test_a_stacking_buffer_holds_its_stacks_and_no_upload(method):
    """Peak memory is the stacks plus the upload in flight: after add, nothing of the upload is kept."""
    agg = get_aggregator(method)
    ups, ranks = _uploads(method)
    buf = agg.open_round(MODULES, clients=3, ranks=ranks)
    watched = []
    for k in range(3):
        u = ClientUpdate({n: (B.clone(), A.clone()) for n, (B, A) in ups[k].factors.items()}, scale=ups[k].scale,
                         weight=ups[k].weight)
        watched += [weakref.ref(t) for pair in u.factors.values() for t in pair]
        buf.add(u)
        del u
    gc.collect()
    assert not any(w() is not None for w in watched)
    assert len(buf.storage) == 2 * 2  # (B^T, A) per block, two blocks
    assert sum(t.numel() for t in buf.storage) == sum((m + n) * sum(ranks) for m, n in MODULES.values())


def _snapshot(buf):
    return [t.clone().view(torch.uint8) for t in buf.storage]  # bytes: the empty storage may hold NaN


def _unchanged(buf, snap):
    return all(torch.equal(t.view(torch.uint8), s) for t, s in zip(buf.storage, snap))


def _bad(ups, k, name, which, value):
    f = dict(ups[k].factors)
    pair = list(f[name])
    pair[which] = value
    f[name] = tuple(pair)
    return dataclasses.replace(ups[k], factors=f)


@pytest.mark.parametrize("method", ["fraq", "florist"])
def test_a_refused_upload_changes_nothing(method):
    agg = get_aggregator(method)
    ups, ranks = _uploads(method)
    want = _buffer(agg, ups, ranks).aggregate()
    buf = agg.open_round(MODULES, clients=3, ranks=ranks)
    buf.add(ups[0])
    buf.add(ups[1])
    nan = ups[2].factors["layers.0.o"][1].clone()
    nan[1, 2] = float("nan")
    B = ups[2].factors["layers.0.o"][0]
    cases = [
        (_bad(ups, 2, "layers.0.o", 1, nan), ValueError, r"client 2, module 'layers.0.o', A .*nan"),
        (_bad(ups, 2, "layers.0.o", 0, B[:, :-1]), ValueError, r"client 2, module 'layers.0.o': B has shape"),
        (_bad(ups, 2, "layers.0.o", 0, B.double()), TypeError, r"client 2, module 'layers.0.o': B has dtype"),
        (dataclasses.replace(ups[2], factors={n: ups[2].factors[n] for n in list(MODULES)[:2]}), ValueError,
         r"client 2 .*missing \['layers.0.o'\]"),
        (dataclasses.replace(ups[2], weight=-1.0), ValueError, r"client 2's weight\(=-1.0\)"),
        (dataclasses.replace(ups[2], scale={"layers.0.q": 1.0}), ValueError, r"client 2's scale has no entry"),
        (dataclasses.replace(ups[2], scale=0.0), ValueError, r"client 2's scale\(=0.0\)"),
        (buf.layout_of(2).pack(_bad(ups, 2, "layers.0.o", 1, nan)), ValueError,
         r"client 2, module 'layers.0.o', A .*nan"),
        (torch.zeros(5), ValueError, r"client 2's flat upload must be a dense 1-D tensor of"),
        ("weights", TypeError, r"client 2: an upload must be"),
    ]
    snap = _snapshot(buf)
    for bad, kind, msg in cases:
        with pytest.raises(kind, match=msg):
            buf.add(bad)
        assert _unchanged(buf, snap) and buf.missing == (2,)
    with pytest.raises(ValueError, match=r"clients \[2\] have not uploaded"):
        buf.aggregate()
    buf.add(ups[2])
    got = buf.aggregate()
    for name in MODULES:
        assert torch.equal(_product(got.downlinks[0][name]), _product(want.downlinks[0][name]))


def test_a_client_twice_too_many_and_a_second_aggregate_are_refused():
    ups, ranks = _uploads("fraq")
    buf = get_aggregator("fraq").open_round(MODULES, clients=3, ranks=ranks)
    buf.add(ups[1], client=1)
    with pytest.raises(ValueError, match="client 1 was already added"):
        buf.add(ups[1], client=1)
    with pytest.raises(ValueError, match=r"client\(=3\) must be an int in \[0, 3\)"):
        buf.add(ups[0], client=3)
    assert buf.add(ups[0]) == 0 and buf.add(ups[2]) == 2
    with pytest.raises(ValueError, match="all 3 clients of this round are in"):
        buf.add(ups[2])
    with pytest.raises(TypeError, match="carries its own weight"):
        get_aggregator("fraq").open_round(MODULES, clients=3, ranks=ranks).add(ups[0], weight=2.0)
    buf.aggregate()
    with pytest.raises(ValueError, match="already aggregated"):
        buf.aggregate()


@pytest.mark.parametrize("kwargs, kind, msg", [
    ({"shapes": {}}, ValueError, r"shapes\(=\{\}\) must be a non-empty mapping"),
    ({"shapes": {"q": (20, 0)}}, ValueError, r"shapes\['q'\]\(=\(20, 0\)\) must be \(m, n\)"),
    ({"clients": 0}, ValueError, r"clients\(=0\) must be an int >= 1"),
    ({"ranks": [2, 3]}, ValueError, r"ranks\(=\[2, 3\]\) must give one rank per client: 3 ints"),
    ({"ranks": 0}, ValueError, r"ranks\(=0\) must be an int >= 1"),
    ({"ranks": {"layers.0.q": 2}}, ValueError, r"missing \['layers.1.q', 'layers.0.o'\]"),
    ({"dtype": torch.int32}, TypeError, r"dtype\(=torch.int32\) must be a real floating"),
    ({"device": "nowhere"}, ValueError, r"device\(='nowhere'\) is not a torch device"),
])
def test_open_round_refuses_bad_arguments(kwargs, kind, msg):
    args = {"shapes": MODULES, "clients": 3, "ranks": MIXED, **kwargs}
    with pytest.raises(kind, match=msg):
        get_aggregator("fraq").open_round(args.pop("shapes"), **args)


def test_a_method_that_averages_factors_refuses_mixed_ranks_at_open():
    with pytest.raises(ValueError, match=r"fedit averages factors.*\[2, 5, 3\]"):
        get_aggregator("fedit").open_round(MODULES, clients=3, ranks=MIXED)


def test_every_aggregator_opens_a_round_buffer():
    for name, cls in AGGREGATORS.items():
        buf = get_aggregator(name).open_round(MODULES, clients=2, ranks=2)
        assert isinstance(buf, RoundBuffer) and buf.missing == (0, 1)
        assert (len(buf.storage) == 4) if cls.from_stacks else (len(buf.storage) == 2)


def test_the_class_example_runs():
    import fraq.aggregators.round_buffer as module

    tests = [t for t in doctest.DocTestFinder().find(RoundBuffer, "RoundBuffer", module=module, globs={})
             if t.examples]
    assert tests
    runner = doctest.DocTestRunner()
    for t in tests:
        runner.run(t)
    assert runner.failures == 0


# --- the round buffer under the rank-cap rule, and layouts sent before the round ----------

@pytest.mark.parametrize("method,options", [("fraq", {"rank": 5}), ("fraq", {"tau": 0.9}), ("flora", {}),
                                            ("flexlora", {}), ("fedit", {})])
def test_capped_round_equals_capped_aggregate_bit_for_bit(method, options):
    """fraq:rank=5 over ranks (2, 4): module "head" (3 x 12, limit 3) gets another cap than
    the others (limit 5 = rank), so the round splits into two buffers; every other case is
    one buffer. Flat and ClientUpdate uploads, out of order, give capped_aggregate's result."""
    from fraq.aggregators.capping import SplitRound, capped_aggregate, capped_layouts, open_capped_round

    shapes = {"q": (16, 12), "head": (3, 12), "v": (16, 12)}
    ranks, scales = ([3, 3], (2.0, 2.0)) if method == "fedit" else ([2, 4], (2.0, 0.5))  # FedIT: one rank, scale
    g = torch.Generator().manual_seed(0)
    ups = [ClientUpdate({m: (torch.randn(a, r, generator=g, dtype=F64), torch.randn(r, b, generator=g, dtype=F64))
                         for m, (a, b) in shapes.items()}, scale=s, weight=w)
           for r, s, w in zip(ranks, scales, (10.0, 30.0))]
    agg = get_aggregator(method, **options)
    want = capped_aggregate(agg, ups)
    buf = open_capped_round(agg, shapes, clients=2, ranks=ranks, dtype=F64)
    assert isinstance(buf, SplitRound) == (options == {"rank": 5})
    layouts = capped_layouts(agg, shapes, clients=2, ranks=ranks)
    assert layouts == tuple(buf.layout_of(k) for k in range(2))
    assert all(Layout.from_record(lay.to_record()) == lay for lay in layouts)
    buf.add(layouts[1].pack(ups[1]), client=1, weight=30.0, scale=scales[1])
    buf.add(ups[0], client=0)
    got = buf.aggregate()
    assert got.ranks == want.ranks and list(got.downlinks[0]) == list(want.downlinks[0])
    for k, m in itertools.product(range(2), shapes):
        assert torch.equal(got.downlinks[k][m].delta(), want.downlinks[k][m].delta()), (k, m)


def test_split_round_refuses_a_bad_upload_before_copying_any_of_it():
    """A NaN in the second cap's module is found before the first cap's buffer takes anything."""
    from fraq.aggregators.capping import open_capped_round

    shapes = {"q": (16, 12), "head": (3, 12)}
    buf = open_capped_round(get_aggregator("fraq", rank=5), shapes, clients=2, ranks=[2, 4], dtype=F64)
    up = ClientUpdate({m: (torch.ones(a, 2, dtype=F64), torch.ones(2, b, dtype=F64)) for m, (a, b) in shapes.items()})
    up.factors["head"][1][0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"client 0, module 'head', A contains a non-finite value"):
        buf.add(up, client=0)
    with pytest.raises(ValueError, match=r"client 1's flat upload must be a dense 1-D tensor of 172 entries"):
        buf.add(torch.ones(5, dtype=F64), client=1)
    assert buf.missing == (0, 1)


def test_layout_record_is_checked():
    with pytest.raises(ValueError, match="not each of names"):
        Layout.from_record({"names": ["q", "k"], "blocks": [[["q"], 4, 3, 2]]})
    with pytest.raises(ValueError, match=r"must be \[names, m or None, n, rank\]"):
        Layout.from_record({"names": ["q"], "blocks": [[["q"], 4, 3, 0]]})
    lay = Layout.from_record({"names": ["q"], "blocks": [[["q"], None, 3, 2]]})  # single-matrix: A alone
    assert lay.numel == 6 and lay.shape_of("q") == (None, (2, 3))


@pytest.mark.parametrize("method", ["fraq", "flora", "flexlora", "fedit"])
def test_uploads_so_far_read_back_bit_for_bit_as_views(method):
    """A server that turns to the list path mid-round reads back what it added: the copies
    in are exact, so the views are the uploads, and they cost no memory of their own."""
    agg = get_aggregator(method)
    ups, ranks = _uploads(method)
    buf = agg.open_round(MODULES, clients=3, ranks=ranks)
    for k in (2, 0):
        buf.add(ups[k], client=k)
    got = buf.uploads()
    assert sorted(got) == [0, 2]
    held = {t.untyped_storage().data_ptr() for t in buf.storage}
    for k, u in got.items():
        assert (u.weight, u.scale, u.upload_rank) == (ups[k].weight, ups[k].scale, ups[k].upload_rank)
        assert list(u.factors) == list(MODULES)
        for name in MODULES:
            for x, y in zip(u.factors[name], ups[k].factors[name]):
                assert torch.equal(x, y) and x.untyped_storage().data_ptr() in held, (k, name)
    buf.add(ups[1], client=1)
    buf.aggregate()
    with pytest.raises(ValueError, match="already aggregated"):
        buf.uploads()


def test_split_round_uploads_join_its_buffers():
    from fraq.aggregators.capping import SplitRound, open_capped_round

    shapes = {"q": (16, 12), "head": (3, 12), "v": (16, 12)}
    g = torch.Generator().manual_seed(0)
    ups = [ClientUpdate({m: (torch.randn(a, r, generator=g), torch.randn(r, b, generator=g))
                         for m, (a, b) in shapes.items()}, scale={"q": 2.0, "head": 1.0, "v": 0.5}, weight=w)
           for r, w in zip([2, 4], (10.0, 30.0))]
    buf = open_capped_round(get_aggregator("fraq", rank=5), shapes, clients=2, ranks=[2, 4])
    assert isinstance(buf, SplitRound)
    buf.add(ups[1], client=1)
    got = buf.uploads()
    assert list(got) == [1] and list(got[1].factors) == list(shapes)
    assert {m: got[1].scale_of(m) for m in shapes} == ups[1].scale and got[1].weight == 30.0
    assert all(torch.equal(x, y) for m in shapes for x, y in zip(got[1].factors[m], ups[1].factors[m]))
