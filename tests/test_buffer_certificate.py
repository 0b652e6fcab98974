"""Certificates read from a round buffer: no upload kept, the same verdict as the uploads'.

References: the relative error ||S - G||_F / ||S||_F formed densely in float64 from the
uploads (:func:`fraq.reference.dense_aggregate`) and the downlinks, independent of both
certificates; and the list-based certificate on the same uploads.

Tolerances, from the certificates' own stated bounds. A Gram certificate's computed error
e, with resolution r = (sqrt(delta) + w) / ||S'||, satisfies |e - ref| <= r (1 + ref): its
numerator is within r ||S'|| of ||S - G|| and its denominator within r ||S'|| of ||S||
(:mod:`fraq.aggregators.certificate`). The dense reference's own float64 rounding,
(m + n + R) u N_S, lies below sqrt(delta) >= sqrt(c u) N_S by a factor sqrt(c u) < 1e-6,
covered by a factor 1.01. Two probe certificates with the same probes differ per probe by
at most the sum of their rounding terms, so their estimates of ||E|| and ||S|| differ by at
most res_1 ||S||_1 + res_2 ||S||_2 (:mod:`fraq.aggregators.probe_certificate`).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from fraq.aggregators import AGGREGATORS, ClientUpdate, Factors, get_aggregator
from fraq.aggregators.capping import SplitRound, open_capped_round
from fraq.reference import dense_aggregate
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64
MODULES = {"layers.0.q": (20, 30), "layers.1.q": (20, 30), "layers.0.o": (40, 12)}
MIXED, UNIFORM = [2, 5, 3], [3, 3, 3]
WEIGHTS = [120.0, 30.0, 75.0]
SCALES = [2.0, 0.5, 1.0]
SLACK = 1.01  # the dense reference's float64 rounding, relative to the resolution (module docstring)


def _uploads(method: str, *, dtype=F32, gain: float = 1.0, modules=MODULES, seed=0):
    """K uploads ``method`` accepts (FLoRG's (None, A_k); one rank and scale for the methods
    that average factors), every factor times ``gain``."""
    cls = AGGREGATORS[method]
    ranks = MIXED if cls.heterogeneous_ranks else UNIFORM
    scales = SCALES if cls.heterogeneous_ranks else [SCALES[0]] * 3
    data = {name: lora_clients(m, n, ranks, seed=seed + i, dtype=F64) for i, (name, (m, n)) in
            enumerate(modules.items())}
    ups = []
    for k in range(3):
        f = {}
        for name, (m, n) in modules.items():
            B, A = (gain * t for t in (data[name][0][k], data[name][1][k]))
            if cls.single_matrix:
                f[name] = (None, (A if n <= m else B.mT).contiguous().to(dtype))
            elif method == "lora-a2":
                f[name] = (B.to(dtype), (gain * data[name][1][0]).to(dtype))
            else:
                f[name] = (B.to(dtype), A.to(dtype))
        ups.append(ClientUpdate(f, scale=scales[k], weight=WEIGHTS[k]))
    return ups, ranks


def _round(agg, ups, ranks, *, modules=MODULES, order=(2, 0, 1)):
    """(buffer, result): the uploads added out of order, each released by the caller's list only."""
    dtype = next(iter(ups[0].factors.values()))[1].dtype
    buf = agg.open_round(modules, clients=len(ups), ranks=ranks, dtype=dtype)
    for k in order:
        buf.add(ups[k], client=k)
    return buf, buf.aggregate()


def _dense_error(ups, down, name, gain: float = 1.0) -> float:
    """||S - G||_F / ||S||_F in float64, S from the uploads, G what ``down`` adds, every
    factor divided by ``gain`` (a power of two: exact) so that the products stay in range."""
    S = dense_aggregate([u.factors[name][0].double() / gain for u in ups],
                        [u.factors[name][1].double() / gain for u in ups],
                        [u.weight for u in ups], [u.scale_of(name) for u in ups])
    terms = list(down.merge) + ([down.start] if down.start is not None else [])
    G = sum(f.scale * (f.B.double() / gain) @ (f.A.double() / gain) for f in terms)
    return float(torch.linalg.norm(S - G) / torch.linalg.norm(S))


def _ref(ups, res, name, client, gain: float = 1.0) -> float:
    return _dense_error(ups, res.downlinks[client or 0][name], name, gain)


STACKING = [("fraq", {"tau": 1.0}), ("fraq", {}), ("fraq", {"rank": 2}), ("flora", {})]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("method,options", STACKING)
def test_gram_certificate_from_the_stacks_against_a_float64_dense_error(method, options, dtype):
    agg = get_aggregator(method, **options)
    ups, ranks = _uploads(method, dtype=dtype)
    buf, res = _round(agg, ups, ranks)
    got, want = res.certificate(buf), res.certificate(ups)
    for name in MODULES:
        c, w = got[name], want[name]
        ref = _ref(ups, res, name, c.client)
        assert c.bound >= ref, name
        assert abs(c.error - ref) <= SLACK * c.resolution * (1 + ref), (name, c.error, ref, c.resolution)
        # the uploads' certificate obeys the same rule, so the two agree within both resolutions
        assert abs(c.error - w.error) <= SLACK * (c.resolution + w.resolution) * (1 + ref), name
        if options == {"tau": 1.0} or method == "flora":  # exact methods: at the rounding level, both ways
            assert c.at_rounding_level and w.at_rounding_level, name
        if options == {"rank": 2}:  # a rank cut shows its error
            assert not c.at_rounding_level and c.error > 1e3 * c.resolution, name


@pytest.mark.parametrize("method,options", STACKING)
def test_probe_certificate_from_the_stacks_agrees_with_the_uploads_one(method, options):
    agg = get_aggregator(method, **options)
    ups, ranks = _uploads(method)
    buf, res = _round(agg, ups, ranks)
    got = res.certificate(buf, "probe", seed=7, probes=8)
    want = res.certificate(ups, "probe", seed=7, probes=8)
    assert (got.seed, got.probes, got.delta) == (7, 8, want.delta)
    for name in MODULES:
        c, w = got[name], want[name]
        assert c.bound >= _ref(ups, res, name, c.client), name  # probability >= 1 - delta; this seed holds
        allowed = SLACK * (c.resolution * c.exact_norm + w.resolution * w.exact_norm)
        assert abs(c.exact_norm - w.exact_norm) <= allowed, name  # the same probes: S z within the roundings
        assert abs(c.error * c.exact_norm - w.error * w.exact_norm) <= allowed, name


@pytest.mark.parametrize("method", [m for m, cls in AGGREGATORS.items() if not cls.from_stacks])
@pytest.mark.parametrize("kind", ["gram", "probe"])
def test_a_method_on_the_list_path_certifies_its_uploads_exactly(method, kind):
    """The buffer keeps such a method's uploads as flat tensors: its certificate is the list
    one. The Gram one field for field; the probe one within its rounding (the flats hold
    B^T, the uploads B: the same numbers in another layout, which a BLAS may sum in another
    order): the same probes, every ||S z_j||, ||E z_j|| within rho ||z_j|| of the exact
    norm, so the estimates within twice the resolution (0.5% for second-order terms)."""
    agg = get_aggregator(method)
    ups, ranks = _uploads(method)
    buf, res = _round(agg, ups, ranks)
    got, want = res.certificate(buf, kind), res.certificate(ups, kind)
    if kind == "gram":
        assert {n: c.to_json() for n, c in got.items()} == {n: c.to_json() for n, c in want.items()}
        return
    assert got.keys() == want.keys()
    for name, c in got.items():
        w = want[name]
        res2 = 1.005 * 2 * max(c.resolution, w.resolution)
        assert abs(c.error - w.error) <= res2 * (1 + w.error), name
        assert abs(c.exact_norm - w.exact_norm) <= res2 * w.exact_norm, name
        assert (c.client, c.at_rounding_level) == (w.client, w.at_rounding_level), name
        if not AGGREGATORS[method].single_matrix:
            assert c.bound >= _ref(ups, res, name, c.client), name


@pytest.mark.parametrize("dtype,gain", [(F32, 2.0 ** -50), (F32, 2.0 ** 50), (F64, 2.0 ** -500),
                                        (torch.bfloat16, 1.0)])
def test_badly_scaled_and_half_precision_stacks_still_bound_the_error(dtype, gain):
    """Float32 factors near 2^-50 (products near 2^-100, what FRAQ still takes in float32), float64
    near 2^-500 need the certificate's unit scaling, bfloat16 rounds the stacks by 2^-9: the
    stated w covers each, so the bound holds and the error is within the resolution."""
    agg = get_aggregator("fraq", tau=1.0)
    ups, ranks = _uploads("fraq", dtype=dtype, gain=gain)
    buf, res = _round(agg, ups, ranks)
    for kind in ("gram", "probe"):
        cert = res.certificate(buf, kind)
        for name in MODULES:
            ref = _ref(ups, res, name, None, gain)
            assert math.isfinite(cert[name].bound) and cert[name].bound >= ref, (kind, name)
    gram = res.certificate(buf)
    for name in MODULES:
        ref = _ref(ups, res, name, None, gain)
        assert abs(gram[name].error - ref) <= SLACK * gram[name].resolution * (1 + ref), name


@pytest.mark.parametrize("kind", ["gram", "probe"])
def test_a_wrong_adapter_is_flagged_from_the_buffer(kind):
    """A doubled, a transposed-and-cut and a one-client-dropped global adapter: each is far
    from the exact aggregate, and the buffer's certificate says so (error near 1 or above,
    the bound below that would need the probes to fail)."""
    agg = get_aggregator("fraq", tau=1.0)
    ups, ranks = _uploads("fraq")
    buf, res = _round(agg, ups, ranks)
    dropped = agg.aggregate([dataclasses.replace(u, weight=0.0 if k == 1 else u.weight) for k, u in enumerate(ups)])

    def edited(fn):
        down = {n: dataclasses.replace(d, merge=(fn(n, d.merge[0]),), start=None)
                for n, d in res.downlinks[0].items()}
        return dataclasses.replace(res, downlinks=(down,) * 3)

    doubled = edited(lambda n, f: Factors(f.B, f.A, 2.0 * f.scale))
    flipped = edited(lambda n, f: Factors(f.B.flip(0), f.A, f.scale))
    for wrong in (doubled, flipped, dropped):
        cert = wrong.certificate(buf, kind)
        for name in MODULES:
            ref = _ref(ups, wrong, name, None)
            assert ref > 0.1 and cert[name].bound >= ref and not cert[name].at_rounding_level, name
            assert cert[name].error > 0.05, name


@pytest.mark.parametrize("dtype", [F64, F32])
def test_split_round_certifies_every_module_from_its_buffers(monkeypatch, dtype):
    """fraq:rank=5 splits the round (one module's limit is 3): the joined certificate is
    each module's, against the dense float64 error. Float64 buffers take the powers-of-two
    scaling; float32 ones (NARROW) skip it, and the probe certificate reads each buffer's
    stacks as held (no weighted float64 stack formed)."""
    import fraq.aggregators.certificate as cm
    import fraq.aggregators.probe_certificate as pc

    shapes = {"q": (16, 12), "head": (3, 12), "v": (16, 12)}
    g = torch.Generator().manual_seed(0)
    ranks = [2, 4]
    ups = [ClientUpdate({m: (torch.randn(a, r, generator=g, dtype=F64).to(dtype),
                             torch.randn(r, b, generator=g, dtype=F64).to(dtype))
                         for m, (a, b) in shapes.items()}, scale=s, weight=w)
           for r, s, w in zip(ranks, (2.0, 0.5), (10.0, 30.0))]
    buf = open_capped_round(get_aggregator("fraq", rank=5), shapes, clients=2, ranks=ranks, dtype=dtype)
    assert isinstance(buf, SplitRound)
    for k in (1, 0):
        buf.add(ups[k], client=k)
    res = buf.aggregate()
    routes = []
    real_unscaled, real_parted = cm.unscaled, pc._parted_rows
    monkeypatch.setattr(cm, "unscaled", lambda *a: routes.append("gram unscaled" if real_unscaled(*a) else
                                                                  "gram scaled") or real_unscaled(*a))
    monkeypatch.setattr(pc, "_parted_rows", lambda *a: routes.append("probe parts") or real_parted(*a))
    want = ["gram scaled"] * 3 if dtype == F64 else ["gram unscaled"] * 3 + ["probe parts"] * 3
    for kind in ("gram", "probe"):
        cert = buf.certificate(res, kind)
        assert list(cert) == list(shapes)
        for name in shapes:
            ref = _dense_error(ups, res.downlinks[0][name], name)
            assert cert[name].bound >= ref, (kind, name)
            if kind == "gram":
                assert abs(cert[name].error - ref) <= SLACK * cert[name].resolution * (1 + ref), name
    assert routes == want


def test_certificate_from_a_buffer_refuses_before_any_work():
    agg = get_aggregator("fraq")
    ups, ranks = _uploads("fraq")
    buf = agg.open_round(MODULES, clients=3, ranks=ranks)
    for u in ups:
        buf.add(u)
    other = agg.aggregate(ups)
    with pytest.raises(ValueError, match=r"only once aggregate\(\) has run"):
        other.certificate(buf)
    res = buf.aggregate()
    with pytest.raises(ValueError, match=r"method\(='dense'\)"):
        res.certificate(buf, "dense")
    with pytest.raises(ValueError, match=r"probes\(=1\)"):
        res.certificate(buf, "probe", probes=1)
    with pytest.raises(TypeError, match="apply to method='probe'"):
        res.certificate(buf, seed=3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        res.certificate(buf, "probe", sead=3)
    small = agg.aggregate([ClientUpdate({n: u.factors[n] for n in list(MODULES)[:2]}, u.scale, u.weight)
                           for u in ups])
    with pytest.raises(ValueError, match="the modules of the round buffer"):
        small.certificate(buf)
    two = agg.aggregate(ups[:2])
    with pytest.raises(ValueError, match="the round buffer has 3 clients, the result 2"):
        two.certificate(buf)
