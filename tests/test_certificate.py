"""The exactness certificate (``AggregationResult.certificate``) against float64 dense matrices.

Reference of record: the exact aggregate S = sum_k a_k s_k B_k A_k and the certified update
G (every term of a client's Downlink) formed as m x n float64 matrices, ||S - G||_F / ||S||_F.
FLoRG's reference is the m x n update s L Q R with float64 projections.

Bounds used (fraq.aggregators.certificate's docstring derives them; u = 2^-53):
- the true relative error never exceeds ``bound`` (rigorous; the dense reference's own
  rounding, about R u N_S / ||S|| <= 1e-13 here, is far below the 1e-9 slack allowed);
- the computed error agrees with the dense one as |error^2 - dense^2| <= 2 resolution^2
  (1 + dense^2): delta / ||S||^2 = resolution^2 bounds the squared-distance error, delta_S
  <= delta the norm's, and the factor 2 covers the dense reference's own rounding.
Flag margins: on inputs every method aggregates exactly (a shared column space of rank r),
each method's own result is within 100 eps32 (1.2e-5; resolution <= 1e-5 at these sizes); a
mis-scaled (x2) update has relative error exactly 1, a transposed one on a square module
||S - S^T|| / ||S|| (computed in float64 and asserted > 0.5 for the seeded data), a
one-client-dropped one > 0.1 (computed likewise); each is asserted above 0.05, four orders
above the resolution.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from fraq.aggregators import AGGREGATORS, AggregationResult, ClientUpdate, Downlink, Factors, get_aggregator
from fraq.aggregators.florg import projections
from fraq._stack import normalized_weights

F32, F64 = torch.float32, torch.float64
METHODS = [name for name in AGGREGATORS if AGGREGATORS[name].__module__.startswith("fraq.aggregators.")]
SQUARE = {"sq": (12, 12), "tall": (20, 9)}
EXACT_BOUND = 100 * torch.finfo(F32).eps  # a method exact on the data, float32 outputs (FLoRG's eigh: ~3 eps)
SLACK = 1e-9  # relative slack on `bound` for the dense reference's own rounding (<= 1e-13 here)


def _agg(name):
    cls = AGGREGATORS[name]
    return get_aggregator(name, tau=1.0) if cls.energy_rule else get_aggregator(name)


def _uploads(name, *, exact: bool, K=3, r=3, dtype=F32, seed=0, modules=SQUARE):
    """Per method, uploads its aggregator accepts. ``exact``: every client's B_k = B C_k and a
    shared A (FLoRG: A_k = C_k A_0), so the aggregate has rank r and every method is exact
    on it (up to its float32 outputs' rounding); else independent random factors (mixed ranks where the method takes them)."""
    cls = AGGREGATORS[name]
    g = torch.Generator().manual_seed(seed)
    ranks = [r] * K if (exact or not cls.heterogeneous_ranks) else [r + k for k in range(K)]
    scales = [2.0] * K if not cls.heterogeneous_ranks else [2.0 / (1 + k) for k in range(K)]
    weights = [3.0, 1.0, 2.0, 5.0][:K]
    ups_f: list[dict] = [{} for _ in range(K)]
    for name_m, (m, n) in modules.items():
        if cls.single_matrix:
            d = min(m, n)
            A0 = torch.randn(r, d, generator=g, dtype=F64)
            for k in range(K):
                A = torch.randn(r, r, generator=g, dtype=F64) @ A0 if exact else torch.randn(r, d, generator=g, dtype=F64)
                ups_f[k][name_m] = (None, A.to(dtype))
            continue
        B0 = torch.randn(m, r, generator=g, dtype=F64)
        A0 = torch.randn(r, n, generator=g, dtype=F64)
        for k in range(K):
            if exact or cls.alternating_freeze:
                B = B0 @ torch.randn(r, r, generator=g, dtype=F64) if exact else torch.randn(m, r, generator=g, dtype=F64)
                A = A0
            else:
                B = torch.randn(m, ranks[k], generator=g, dtype=F64)
                A = torch.randn(ranks[k], n, generator=g, dtype=F64)
            ups_f[k][name_m] = (B.to(dtype), A.to(dtype))
    return [ClientUpdate(ups_f[k], scale=scales[k], weight=weights[k]) for k in range(K)]


def _dense_exact(ups, name):
    a = normalized_weights([u.weight for u in ups], len(ups))
    B0, A0 = ups[0].factors[name]
    if B0 is None:
        return _florg_dense(sum(a[k] * u.scale_of(name) * (lambda A: A.mT @ A)(u.factors[name][1].double())
                                for k, u in enumerate(ups)), name)
    return sum(a[k] * u.scale_of(name) * (u.factors[name][0].double() @ u.factors[name][1].double())
               for k, u in enumerate(ups))


def _florg_dense(Q, name):
    m, n = SQUARE[name]
    L, R = projections(m, n, dtype=F64)
    return L @ Q @ R


def _dense_update(down: Downlink, name):
    terms = list(down.merge) + ([down.start] if down.start is not None else [])
    if terms and terms[0].B is None:
        return _florg_dense(sum(f.scale * f.A.double().mT @ f.A.double() for f in terms), name)
    return down.delta(F64)


def _dense_rel(ups, result, name, client=0):
    S = _dense_exact(ups, name)
    G = _dense_update(result.downlinks[client][name], name)
    return float(torch.linalg.matrix_norm(S - G) / torch.linalg.matrix_norm(S))


def _tampered(result: AggregationResult, change, only=None) -> AggregationResult:
    """``result`` with every Downlink's factors (of module ``only``, or all) passed through
    ``change(Factors) -> Factors``."""
    def down(d):
        return Downlink(sent=d.sent, merge=tuple(change(f) for f in d.merge),
                        start=None if d.start is None else change(d.start))
    return dataclasses.replace(result, downlinks=tuple({n: down(d) if only in (None, n) else d for n, d in c.items()}
                                                       for c in result.downlinks))


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("exact", [True, False])
def test_certificate_matches_float64_dense(name, exact):
    """error agrees with the dense float64 relative error to 2 resolution^2 (1 + dense^2) in
    the squares, and the dense error never exceeds ``bound`` (module docstring bounds)."""
    ups = _uploads(name, exact=exact)
    res = _agg(name).aggregate(ups)
    cert = res.certificate(ups)
    assert list(cert) == list(SQUARE)
    for mod, c in cert.items():
        clients = [c.client] if c.client is not None else [0]
        dense = _dense_rel(ups, res, mod, clients[0])
        assert dense <= c.bound * (1 + SLACK), (name, mod, dense, c)
        assert abs(c.error ** 2 - dense ** 2) <= 2 * c.resolution ** 2 * (1 + dense ** 2), (name, mod, dense, c)
        assert c.resolution < 1e-5
        if c.client is not None:  # the worst client: no other client's update is further off
            worst = max(_dense_rel(ups, res, mod, k) for k in range(res.clients))
            assert dense >= worst - 2 * c.resolution
        if exact:  # float32 outputs: at most EXACT_BOUND, whether resolved or at the rounding level
            assert c.bound < EXACT_BOUND, (name, mod, c)
        assert str(c).startswith("<=") == c.at_rounding_level


@pytest.mark.parametrize("name", METHODS)
def test_certificate_flags_scaled_transposed_and_dropped_updates(name):
    """On inputs every method aggregates exactly, its own result is at the rounding level
    and three broken ones are not: x2 (relative error exactly 1), transposed (square
    module, > 0.5 by the float64 reference), one client dropped (> 0.1 likewise)."""
    cls = AGGREGATORS[name]
    ups = _uploads(name, exact=True)
    res = _agg(name).aggregate(ups)
    assert all(c.bound < EXACT_BOUND for c in res.certificate(ups).values())

    doubled = _tampered(res, lambda f: dataclasses.replace(f, scale=2 * f.scale))
    c = doubled.certificate(ups)["sq"]
    assert not c.at_rounding_level and abs(c.error - 1.0) < 1e-5, (name, c)

    if not cls.single_matrix:  # FLoRG's update L A^T A R has a symmetric core: no transpose to get wrong
        flip = lambda f: Factors(f.A.mT, f.B.mT, f.scale)  # noqa: E731
        with pytest.raises(ValueError, match=r"multiplies out to \(9, 20\)"):  # a tall module: by shape
            _tampered(res, flip, "tall").certificate(ups)
        flipped = _tampered(res, flip, "sq")
        dense = _dense_rel(ups, flipped, "sq")
        c = flipped.certificate(ups)["sq"]
        assert dense > 0.5 and not c.at_rounding_level and abs(c.error - dense) < 1e-5, (name, dense, c)

    dropped = _agg(name).aggregate(ups[:-1])
    dropped = dataclasses.replace(dropped, downlinks=dropped.downlinks[:1] * len(ups))
    dense = _dense_rel(ups, dropped, "sq")
    c = dropped.certificate(ups)["sq"]
    assert dense > 0.1 and not c.at_rounding_level and abs(c.error - dense) < 1e-5, (name, dense, c)


@pytest.mark.parametrize("name", ["fedit", "fraq", "flexlora"])
@pytest.mark.parametrize("c", [1e-3, 1e3])
def test_certificate_is_invariant_to_rescaled_factors(name, c):
    """B_k * c, A_k / c leaves S, every N_S term and so the certificate unchanged up to
    rounding (float64 factors: the rescaling itself rounds by one u per entry)."""
    ups = _uploads(name, exact=False, dtype=F64)
    res = _agg(name).aggregate(ups)
    scaled = [ClientUpdate({n: (B * c, A / c) for n, (B, A) in u.factors.items()}, scale=u.scale, weight=u.weight)
              for u in ups]
    one, two = res.certificate(ups), res.certificate(scaled)
    for mod in one:
        assert abs(one[mod].error - two[mod].error) <= one[mod].resolution + two[mod].resolution
        assert math.isclose(one[mod].resolution, two[mod].resolution, rel_tol=1e-6)


def test_cancelling_clients_keep_the_bound_honest():
    """Two clients that nearly cancel (A_2 = -A_1 + 1e-6 E): ||S|| is 1e-6 of the factors'
    N_S, so the resolution grows by 1e6 and the dense error still lies under ``bound``;
    exactly cancelling clients (S = 0) give no relative claim (bound inf)."""
    g = torch.Generator().manual_seed(3)
    B = torch.randn(12, 3, generator=g, dtype=F64)
    A = torch.randn(3, 12, generator=g, dtype=F64)
    E = torch.randn(3, 12, generator=g, dtype=F64)
    near = [ClientUpdate({"sq": (B, A)}), ClientUpdate({"sq": (B, -A + 1e-6 * E)})]
    fedit = _agg("fedit").aggregate(near)
    c = fedit.certificate(near)["sq"]
    assert _dense_rel(near, fedit, "sq") <= c.bound * (1 + SLACK)
    assert c.resolution > 1e3 * _agg("fedit").aggregate([near[0]]).certificate([near[0]])["sq"].resolution
    gone = [ClientUpdate({"sq": (B, A)}), ClientUpdate({"sq": (B, -A)})]
    c = _agg("flora").aggregate(gone).certificate(gone)["sq"]
    assert c.bound == math.inf and c.at_rounding_level


def test_worst_and_summary_name_the_worst_module():
    ups = _uploads("fedit", exact=False)
    cert = _agg("fedit").aggregate(ups).certificate(ups)
    name, worst = cert.worst
    assert worst.bound == max(c.bound for c in cert.values())
    s = cert.summary()
    assert s["certificate_module"] == name and s["certificate_bound"] == worst.bound
    assert s["certificate_error"] == worst.error and s["certificate_rounding_level"] is worst.at_rounding_level


def test_certificate_refuses_uploads_that_are_not_the_results():
    ups = _uploads("fraq", exact=False)
    res = _agg("fraq").aggregate(ups)
    with pytest.raises(ValueError, match="updates has 2 clients, the result 3"):
        res.certificate(ups[:2])
    other = [ClientUpdate({"sq": u.factors["sq"]}, scale=u.scale, weight=u.weight) for u in ups]
    with pytest.raises(ValueError, match="differ from the result's"):
        res.certificate(other)
    wide = [ClientUpdate({n: (B[:, :], A) if n == "sq" else (B[:9], A) for n, (B, A) in u.factors.items()},
                         scale=u.scale, weight=u.weight) for u in ups]
    with pytest.raises(ValueError, match=r"multiplies out to \(20, 9\).*\(9, 9\)"):
        res.certificate(wide)
    with pytest.raises(TypeError, match="AggregationResult"):
        from fraq.aggregators import certify
        certify(ups, "not a result")


def test_certificate_reads_the_host_once():
    """The whole model's certificate is one host read (counted on the CPU as on CUDA:
    benchmarks.measure.host_reads), so a GPU run pays one synchronisation for it; the
    aggregate itself computes none of it."""
    from benchmarks.measure.host_reads import count_host_reads

    ups = _uploads("fraq", exact=False, modules={**SQUARE, "wide": (9, 20), "sq2": (12, 12)})
    res = _agg("fraq").aggregate(ups)
    assert count_host_reads(lambda: res.certificate(ups)).total == 1


RANGE_ENDS = [2.0 ** -520, 2.0 ** 520, 1e-160, 1e160]


def _scaled_uploads(ups, c, *, split: bool):
    """Every B_k times c (``split``: B_k and A_k each times sqrt(c)), float64: the aggregate
    times c, near the ends of float64's range that fraq.recompress handles."""
    f = math.sqrt(c) if split else c
    return [ClientUpdate({n: (B * f, A * (f if split else 1.0)) for n, (B, A) in u.factors.items()},
                         scale=u.scale, weight=u.weight) for u in ups]


@pytest.mark.parametrize("c", RANGE_ENDS)
@pytest.mark.parametrize("tau", [1.0, 0.9])
@pytest.mark.parametrize("split", [False, True])
def test_certificate_holds_at_the_ends_of_float64s_range(c, tau, split):
    """FRAQ on float64 uploads whose aggregate is scaled by c (about 1e-157 to 1e160)
    certifies the unscaled uploads' relative error, to the two resolutions, and its bound
    holds against the float64 dense error of the unscaled uploads (the scaled adapter
    divided by c: exact for a power of two, one rounding per entry for 1e+-160, far below
    SLACK). ``exact_norm`` is ||S|| times c to rounding. Grams of unscaled factors would
    square c (1e-320 underflows, 1e320 overflows)."""
    ups = _uploads("fraq", exact=False, dtype=F64)
    big = _scaled_uploads(ups, c, split=split)
    agg = get_aggregator("fraq", tau=tau)
    one, res = agg.aggregate(ups).certificate(ups), agg.aggregate(big)
    cert = res.certificate(big)
    for mod, cc in cert.items():
        S = _dense_exact(ups, mod)
        G = res.downlinks[0][mod].delta(F64) / c
        dense = float(torch.linalg.matrix_norm(S - G) / torch.linalg.matrix_norm(S))
        assert math.isfinite(cc.bound) and dense <= cc.bound * (1 + SLACK), (c, mod, dense, cc)
        assert cc.at_rounding_level == one[mod].at_rounding_level, (c, mod, one[mod], cc)
        assert abs(cc.error - one[mod].error) <= cc.resolution + one[mod].resolution, (c, mod, one[mod], cc)
        assert math.isclose(cc.exact_norm, c * one[mod].exact_norm, rel_tol=1e-12), (c, mod)
        if tau == 1.0:
            assert cc.bound < 1e-5, (c, mod, cc)


@pytest.mark.parametrize("at_rounding_level", [False, True])
def test_printed_bound_is_never_below_the_bound(at_rounding_level):
    """The bound in a certificate's line is rounded up: read back as a decimal it is >= the
    float it prints (exact Decimal comparison), and within one unit of its last digit.
    Rounded to nearest, 0.0026129710... printed as 2.61e-03, below itself."""
    from decimal import Decimal

    from fraq.aggregators import ModuleCertificate

    g = torch.Generator().manual_seed(5)
    values = [0.0026129710352310194, 0.009996, 1.25e-7, 1.0] + (10.0 ** (-12 * torch.rand(200, generator=g, dtype=F64))).tolist()
    for b in values:
        c = ModuleCertificate(error=b / 2, bound=b, resolution=1e-9, at_rounding_level=at_rounding_level, exact_norm=1.0)
        printed = str(c).split("<= ")[1].split(")")[0].split(" ")[0]
        digits = 1 if at_rounding_level else 2
        assert Decimal(printed) >= Decimal(b), (b, str(c))
        assert Decimal(printed) - Decimal(b) <= Decimal(f"1e{int(printed.split('e')[1]) - digits}"), (b, str(c))


# ----------------------------------------------------------------------------- the scaling skipped

def _gram_both_paths(monkeypatch, ups, res):
    """The Gram certificate as it runs (scaling skipped where the inputs allow) and with the
    scaling forced on every module, and which modules skipped it."""
    import fraq.aggregators.certificate as cm

    skipped = []
    real = cm.unscaled

    def spy(exact, downs):
        skipped.append(real(exact, downs))
        return skipped[-1]

    monkeypatch.setattr(cm, "unscaled", spy)
    fast = res.certificate(ups)
    monkeypatch.setattr(cm, "unscaled", lambda *a: False)
    return fast, res.certificate(ups), skipped


def _cert_fields(cert):
    return {name: (c.error, c.bound, c.resolution, c.exact_norm, c.at_rounding_level, c.client)
            for name, c in cert.items()}


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("exact", [True, False])
def test_skipping_the_scaling_changes_no_number(monkeypatch, name, exact):
    """Float32 uploads, weights and scales near 1: every module skips the powers of two, and
    the certificate's numbers are bit for bit the scaled ones (each computed number the
    scaled one times the powers of two it took out; the bound's underflow allowance
    c^3 2^-1074 is far below either's last digit)."""
    ups = _uploads(name, exact=exact)
    res = _agg(name).aggregate(ups)
    fast, scaled, skipped = _gram_both_paths(monkeypatch, ups, res)
    assert skipped and all(skipped)
    assert _cert_fields(fast) == _cert_fields(scaled)


@pytest.mark.parametrize("case", ["float64 uploads", "tiny weight", "huge scale"])
def test_the_scaling_runs_where_the_range_could_break(monkeypatch, case):
    """Float64 uploads, a client weight 2^-90 of the total, or a scale 2^45: every module takes
    the powers of two."""
    ups = _uploads("fraq", exact=False, dtype=torch.float64 if case == "float64 uploads" else F32)
    if case == "tiny weight":
        ups[1] = dataclasses.replace(ups[1], weight=ups[1].weight * 2.0 ** -92)
    if case == "huge scale":
        ups[0] = dataclasses.replace(ups[0], scale=2.0 ** 45)
    res = _agg("fraq").aggregate(ups)
    fast, scaled, skipped = _gram_both_paths(monkeypatch, ups, res)
    assert skipped and not any(skipped), case
    assert _cert_fields(fast) == _cert_fields(scaled)
