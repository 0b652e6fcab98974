"""The probe certificate (``result.certificate(updates, method="probe")``) against float64 dense matrices.

Reference of record: the exact aggregate S = sum_k a_k s_k B_k A_k and the certified update
G (every term of a client's Downlink) formed as m x n float64 matrices, ||S - G||_F / ||S||_F.

What is asserted (fraq.aggregators.probe_certificate's docstring derives it):
- the dense relative error never exceeds ``bound`` (a claim with probability 1 - delta per
  module; the seeds here are fixed, so a case either holds or fails every run);
- the reverse direction from the same two tails, estimate >= dense / sqrt(x_hi / x_lo)
  (8.66 at k = 8, delta = 1e-3): a wrong adapter (x2: relative error exactly 1;
  transposed, > 0.5; one client dropped, > 0.1, both by the dense reference) is reported at
  least 0.1 / 8.66 = 0.012 off, three orders above the resolution (< 1e-6 here);
- the failure frequency over 200 seeds on a rank-one error at delta = 0.05, and the
  distribution of T_E / ||E||^2 (chi2(k) / k for a rank-one E) at a quartile, each with a
  binomial tolerance stated where it is used;
- the tails' Chernoff points lie outside the rank-one case's exact quantiles (scipy), and
  other spectra's tails, sampled, stay within delta / 2;
- counted FLOPs: exactly 2 k (m + n)(R + p), and at most 10% of FRAQ's aggregate at
  RoBERTa-base's 768 x 768 with 10 clients of rank 8.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from fraq.aggregators import AGGREGATORS, ClientUpdate, Factors, ProbeCertificate, get_aggregator
from fraq.aggregators.probe_certificate import certify_probe, tail_points
from fraq._stack import normalized_weights

F32, F64 = torch.float32, torch.float64
ADAPTERS = [name for name, cls in AGGREGATORS.items()
            if cls.__module__.startswith("fraq.aggregators.") and cls.not_an_adapter is None]
SHAPES = {"sq": (12, 12), "tall": (20, 9), "wide": (7, 16)}


def _agg(name):
    return get_aggregator(name, tau=1.0) if AGGREGATORS[name].energy_rule else get_aggregator(name)


def _uploads(name, *, exact: bool, K=3, r=3, dtype=F32, seed=0):
    """``exact``: B_k = B_0 C_k and a shared A, so the aggregate has rank r and every method
    is exact on it; else independent factors, mixed ranks where the method takes them."""
    cls = AGGREGATORS[name]
    g = torch.Generator().manual_seed(seed)
    ranks = [r] * K if exact or not cls.heterogeneous_ranks else [r + k for k in range(K)]
    scales = [2.0] * K if not cls.heterogeneous_ranks else [2.0 / (1 + k) for k in range(K)]
    factors: list[dict] = [{} for _ in range(K)]
    for mod, (m, n) in SHAPES.items():
        B0, A0 = torch.randn(m, r, generator=g, dtype=F64), torch.randn(r, n, generator=g, dtype=F64)
        for k in range(K):
            if exact:
                B, A = B0 @ torch.randn(r, r, generator=g, dtype=F64), A0
            else:
                B, A = torch.randn(m, ranks[k], generator=g, dtype=F64), torch.randn(ranks[k], n, generator=g, dtype=F64)
            factors[k][mod] = (B.to(dtype), A.to(dtype))
    return [ClientUpdate(factors[k], scale=scales[k], weight=[3.0, 1.0, 2.0][k]) for k in range(K)]


def _dense_rel(ups, result, mod, client=0):
    a = normalized_weights([u.weight for u in ups], len(ups))
    S = sum(a[k] * u.scale_of(mod) * (u.factors[mod][0].double() @ u.factors[mod][1].double())
            for k, u in enumerate(ups))
    G = result.downlinks[client][mod].delta(F64)
    return float(torch.linalg.matrix_norm(S - G) / torch.linalg.matrix_norm(S))


def _tampered(result, change, only=None):
    def down(d):
        return dataclasses.replace(d, merge=tuple(change(f) for f in d.merge),
                                   start=None if d.start is None else change(d.start))
    return dataclasses.replace(result, downlinks=tuple({n: down(d) if only in (None, n) else d for n, d in c.items()}
                                                       for c in result.downlinks))


@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("dtype", [F64, F32])
def test_probe_bound_covers_the_float64_dense_error(name, exact, dtype):
    """Every module of every adapter-making method: dense <= bound, estimate >= dense / 8.66,
    and an exact method's bound is small: its float32 outputs' error (under 100 eps32, the
    Gram certificate's test) times the factor 8.66, in float64 probes; float32 probes add
    their rounding bound, c u N / ||S|| with c about 60, u = 2^-24, N / ||S|| < 10 here."""
    ups = _uploads(name, exact=exact)
    res = _agg(name).aggregate(ups)
    cert = res.certificate(ups, method="probe", dtype=dtype)
    assert isinstance(cert, ProbeCertificate) and list(cert) == list(SHAPES)
    lo, hi = tail_points(8, 1e-3)
    for mod, c in cert.items():
        dense = _dense_rel(ups, res, mod, c.client or 0)
        assert dense <= c.bound, (name, mod, dense, c)
        assert c.error >= dense * math.sqrt(lo / hi) or c.at_rounding_level, (name, mod, dense, c)
        if c.client is not None:  # the worst bound of the clients': each client's dense error is under it
            assert all(_dense_rel(ups, res, mod, k) <= c.bound for k in range(res.clients))
        if exact:
            assert c.bound < (100 * torch.finfo(F32).eps * math.sqrt(hi / lo) if dtype == F64 else 1e-3), (name, mod, c)
        assert str(c).endswith("(rounding level)") == c.at_rounding_level
        assert "with probability 0.999" in str(c) and c.bound <= float(c.verdict.split()[1]) <= c.bound * 1.01


@pytest.mark.parametrize("name", ADAPTERS)
def test_probe_certificate_flags_doubled_transposed_and_dropped_adapters(name):
    """On inputs every method aggregates exactly, three broken adapters are reported far from
    S: x2 (dense 1), transposed on the square module (dense > 0.5), one client dropped (dense
    > 0.1); each estimate is above 0.01 and the dense error under the bound."""
    ups = _uploads(name, exact=True)
    res = _agg(name).aggregate(ups)
    doubled = _tampered(res, lambda f: dataclasses.replace(f, scale=2 * f.scale))
    flipped = _tampered(res, lambda f: Factors(f.A.mT, f.B.mT, f.scale), "sq")
    dropped = _agg(name).aggregate(ups[:-1])
    dropped = dataclasses.replace(dropped, downlinks=dropped.downlinks[:1] * len(ups))
    for wrong, least in ((doubled, 0.99), (flipped, 0.5), (dropped, 0.1)):
        dense = _dense_rel(ups, wrong, "sq")
        c = wrong.certificate(ups, method="probe")["sq"]
        assert dense > least and not c.at_rounding_level, (name, dense, c)
        assert c.error > 0.01 > 1e4 * c.resolution and dense <= c.bound, (name, dense, c)


def _rank_one_error(seed_data=0):
    """One client with B (10, 2), A (2, 14); the adapter keeps only its first rank-one term,
    so E = s b_2 a_2^T is rank one. Returns (uploads, result, ||E||_F, ||S||_F) in float64."""
    g = torch.Generator().manual_seed(seed_data)
    B, A = torch.randn(10, 2, generator=g, dtype=F64), torch.randn(2, 14, generator=g, dtype=F64)
    ups = [ClientUpdate({"q": (B, A)}, scale=1.5)]
    res = get_aggregator("fedit").aggregate(ups)
    res = _tampered(res, lambda f: Factors(f.B[:, :1], f.A[:1], f.scale))
    E = 1.5 * torch.outer(B[:, 1], A[1])
    return ups, res, float(torch.linalg.matrix_norm(E)), float(torch.linalg.matrix_norm(1.5 * B @ A))


def test_failure_frequency_on_a_rank_one_error_is_within_delta():
    """200 seeds at delta = 0.05: the bound fails on at most 20 (Bin(200, 0.05) exceeds 20
    with probability 0.0014), and T_E / ||E||^2 = chi2(8) / 8 exactly for a rank-one E: the
    fraction of seeds below its 0.25 quantile is 0.25 within 4 binomial sigmas (0.031)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    ups, res, e_norm, s_norm = _rank_one_error()
    q25 = scipy_stats.chi2.ppf(0.25, 8) / 8
    fails = below = 0
    for seed in range(200):
        c = certify_probe(ups, res, delta=0.05, seed=seed)["q"]
        assert c.seed == seed and c.probes == 8 and c.delta == 0.05
        fails += c.bound < e_norm / s_norm
        below += (c.error * c.exact_norm) ** 2 / e_norm ** 2 <= q25
    assert fails <= 20, fails
    assert abs(below / 200 - 0.25) <= 4 * math.sqrt(0.25 * 0.75 / 200), below


@pytest.mark.parametrize("k", [2, 8, 16])
@pytest.mark.parametrize("delta", [1e-3, 0.05])
def test_tail_points_are_chernoff_points_outside_the_rank_one_quantiles(k, delta):
    """(x e^{1-x})^{k/2} = delta / 2 at both points, and they lie outside chi2(k) / k's exact
    delta / 2 and 1 - delta / 2 quantiles (a Chernoff bound is never below the probability)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    lo, hi = tail_points(k, delta)
    for x in (lo, hi):
        assert math.isclose((x * math.exp(1 - x)) ** (k / 2), delta / 2, rel_tol=1e-9)
    assert 0 < lo < scipy_stats.chi2.ppf(delta / 2, k) / k < 1 < scipy_stats.chi2.ppf(1 - delta / 2, k) / k < hi


@pytest.mark.parametrize("weights", [[1.0], [0.5, 0.5], [1.0] * 8, [2.0 ** -i for i in range(6)], [0.9, 0.1]])
def test_other_spectra_stay_within_the_tails(weights):
    """Q = sum_i w_i chi2_8,i / 8 (sum w = 1), 200,000 samples in float64: P(Q <= x_lo) and
    P(Q >= x_hi) at delta = 0.05 are each within delta / 2 = 0.025 (the sampled frequencies
    of these spectra are below 0.006; 4 sigmas of 200,000 samples at 0.025 are 0.0014)."""
    g = torch.Generator().manual_seed(1)
    w = torch.tensor(weights, dtype=F64)
    w = w / w.sum()
    lo, hi = tail_points(8, 0.05)
    Q = (torch.randn(200_000, 8, len(weights), generator=g, dtype=F64) ** 2).mean(1) @ w
    assert float((Q <= lo).double().mean()) <= 0.025 and float((Q >= hi).double().mean()) <= 0.025


def test_probe_flops_are_a_tenth_of_fraqs_aggregate():
    """Counted (benchmarks.measure.count_flops): exactly 2 k (m + n)(R + p) for k = 8 probes,
    and at most 10% of FRAQ's own aggregate at 768 x 768, 10 clients of rank 8 (R = 80)."""
    from benchmarks.measure import count_flops

    g = torch.Generator().manual_seed(0)
    ups = [ClientUpdate({"q": (torch.randn(768, 8, generator=g), torch.randn(8, 768, generator=g))}, scale=2.0,
                        weight=1.0 + k) for k in range(10)]
    for tau in (None, 1.0):
        agg = get_aggregator("fraq") if tau is None else get_aggregator("fraq", tau=tau)
        fraq_flops = count_flops(lambda: agg.aggregate(ups)).total
        res = agg.aggregate(ups)
        probe = count_flops(lambda: res.certificate(ups, method="probe"))
        p = res.ranks["q"]
        assert probe.total == 2 * 8 * (768 + 768) * (80 + p) and not probe.uncounted, (probe, p)
        assert probe.total <= 0.10 * fraq_flops, (probe.total, fraq_flops)


def test_zero_aggregate_cannot_be_judged_in_strict_json():
    """Clients that cancel exactly: no relative claim (bound inf), said in words; strict JSON."""
    g = torch.Generator().manual_seed(3)
    B, A = torch.randn(12, 3, generator=g), torch.randn(3, 12, generator=g)
    gone = [ClientUpdate({"sq": (B, A)}), ClientUpdate({"sq": (B, -A)})]
    cert = get_aggregator("flora").aggregate(gone).certificate(gone, method="probe")
    c = cert["sq"]
    assert c.bound == math.inf and c.at_rounding_level and c.note.startswith("cannot judge")
    assert str(c) == c.note == c.verdict
    doc = json.loads(json.dumps(c.to_json(), allow_nan=False))
    assert doc["bound"] is None and doc["verdict"] == c.note and doc["probability"] == 0.999
    s = json.loads(json.dumps(cert.summary(), allow_nan=False))
    assert s["certificate_bound"] is None and s["certificate_verdict"] == c.note and s["certificate_probes"] == 8


def test_seed_and_probes_are_recorded_and_reproducible():
    ups = _uploads("fedit", exact=False)
    res = _agg("fedit").aggregate(ups)
    one, same, other = (res.certificate(ups, method="probe", seed=s, probes=12) for s in (5, 5, 6))
    assert [c.to_json() for c in one.values()] == [c.to_json() for c in same.values()]
    assert one["sq"].error != other["sq"].error
    doc = one["sq"].to_json()
    assert doc["seed"] == 5 and doc["probes"] == 12 and doc["delta"] == 1e-3
    assert one.summary()["certificate_seed"] == 5 and one.seed == 5 and one.probes == 12


def test_probe_options_are_checked_with_their_values():
    ups = _uploads("fraq", exact=False)
    res = _agg("fraq").aggregate(ups)
    for kw, err, words in (({"probes": 1}, ValueError, r"probes\(=1\) must be at least 2"),
                           ({"probes": 8.0}, TypeError, r"probes\(=8.0\) must be an int"),
                           ({"delta": 0.0}, ValueError, r"delta\(=0.0\) must be in \(0, 1\)"),
                           ({"delta": 1}, ValueError, r"delta\(=1\) must be in \(0, 1\)"),
                           ({"seed": -1}, ValueError, r"seed\(=-1\) must be >= 0"),
                           ({"dtype": torch.float16}, TypeError, r"dtype\(=torch.float16\) must be")):
        with pytest.raises(err, match=words):
            res.certificate(ups, method="probe", **kw)
    with pytest.raises(ValueError, match=r"method\(='dense'\) must be 'gram' or 'probe'"):
        res.certificate(ups, method="dense")
    with pytest.raises(TypeError, match="seed apply to method='probe'"):
        res.certificate(ups, seed=1)
    with pytest.raises(ValueError, match="updates has 2 clients, the result 3"):
        res.certificate(ups[:2], method="probe")


def test_probe_certificate_reads_the_host_once():
    from benchmarks.measure.host_reads import count_host_reads

    ups = _uploads("flexlora", exact=False)
    res = _agg("flexlora").aggregate(ups)
    assert count_host_reads(lambda: res.certificate(ups, method="probe")).total == 1


@pytest.mark.parametrize("c", [2.0 ** -520, 2.0 ** 520, 1e-160, 1e160])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_probe_certificate_holds_at_the_ends_of_float64s_range(c, dtype):
    """FRAQ on float64 uploads whose aggregate is scaled by c: the same probes (same seed)
    give the unscaled uploads' estimate to rounding (100 eps of the probes' dtype, the
    casts and products of a unit-scale computation), and the bound holds against the
    float64 dense error of the unscaled uploads (the scaled adapter divided by c). Unscaled,
    S z underflows or overflows (float32 probes cannot even hold the factors)."""
    ups = _uploads("fraq", exact=False, dtype=F64)
    big = [ClientUpdate({n: (B * c, A) for n, (B, A) in u.factors.items()}, scale=u.scale, weight=u.weight)
           for u in ups]
    agg = get_aggregator("fraq", tau=0.9)
    one = certify_probe(ups, agg.aggregate(ups), dtype=dtype)
    res = agg.aggregate(big)
    cert = certify_probe(big, res, dtype=dtype)
    eps = torch.finfo(dtype).eps
    for mod, cc in cert.items():
        a = normalized_weights([u.weight for u in ups], len(ups))
        S = sum(a[k] * u.scale_of(mod) * (u.factors[mod][0].double() @ u.factors[mod][1].double())
                for k, u in enumerate(ups))
        G = res.downlinks[0][mod].delta(F64) / c
        dense = float(torch.linalg.matrix_norm(S - G) / torch.linalg.matrix_norm(S))
        assert math.isfinite(cc.bound) and dense <= cc.bound, (c, mod, dense, cc)
        assert math.isclose(cc.error, one[mod].error, rel_tol=100 * eps), (c, mod, one[mod], cc)
        assert math.isclose(cc.exact_norm, c * one[mod].exact_norm, rel_tol=100 * eps), (c, mod)


# ----------------------------------------------------------------------------- the scaling skipped

def _fields(cert):
    return {name: (c.error, c.bound, c.resolution, c.exact_norm, c.at_rounding_level, c.client)
            for name, c in cert.items()}


_FACTOR = math.sqrt(tail_points(8, 1e-3)[1] / tail_points(8, 1e-3)[0])  # 8.66: the bound over the estimate


def _agree(fast, scaled):
    """The two routes of the module docstring compute every ||S z_j|| and ||E z_j|| within
    rho_S ||z_j||, rho_E ||z_j|| of the exact norms (the same probes), so within twice that
    of each other: summed over the probes (the triangle inequality in l2), the estimates
    differ by at most 2 resolution (1 + error), ``exact_norm`` by 2 resolution of itself,
    the bound by 8.66 times 2 resolution (1 + bound / 8.66) (0.5% more for the quotient's
    second-order terms); ``resolution`` (from N_S, N_G: norms and sums of at most
    m + n + R + p + 9 float64 roundings, < 2000 u = 2.2e-13 here) within 1e-12 relative;
    the rounding verdict and the client the same (every error here is far from its
    rounding bound)."""
    assert fast.keys() == scaled.keys()
    for name in fast:
        f, s = fast[name], scaled[name]
        res = 1.005 * 2 * max(f.resolution, s.resolution)
        assert abs(f.error - s.error) <= res * (1 + s.error), (name, f, s)
        assert abs(f.exact_norm - s.exact_norm) <= res * s.exact_norm, (name, f, s)
        assert abs(f.bound - s.bound) <= res * (_FACTOR + s.bound), (name, f, s)
        assert math.isclose(f.resolution, s.resolution, rel_tol=1e-12), (name, f, s)
        assert (f.at_rounding_level, f.client) == (s.at_rounding_level, s.client), (name, f, s)


def _both_paths(monkeypatch, ups, res, source=None, **options):
    """The probe certificate as it runs (scaling skipped where the inputs allow) and with
    the scaling forced (:func:`fraq.aggregators.certificate.unit_scaled` on every module),
    and which modules skipped it."""
    import fraq.aggregators.probe_certificate as pc

    skipped = []
    real = pc._unscaled

    def spy(exact, downs, dtype):
        skipped.append(real(exact, downs, dtype))
        return skipped[-1]

    monkeypatch.setattr(pc, "_unscaled", spy)
    fast = res.certificate(source if source is not None else ups, method="probe", **options)
    monkeypatch.setattr(pc, "_unscaled", lambda *a: False)
    scaled = res.certificate(source if source is not None else ups, method="probe", **options)
    return fast, scaled, skipped


@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("exact", [True, False])
def test_the_unscaled_route_agrees_with_the_scaled_one(monkeypatch, name, exact):
    """Float32 uploads, weights and scales near 1: every module skips the powers of two and
    takes the stack's parts as they are (coefficients applied to Z^T Y^T), and every number
    of the certificate agrees with the scaled route's within the rounding both are bounded
    by (:func:`_agree`), and both bound the float64 dense error."""
    ups = _uploads(name, exact=exact)
    res = _agg(name).aggregate(ups)
    fast, scaled, skipped = _both_paths(monkeypatch, ups, res)
    assert skipped and all(skipped)
    _agree(fast, scaled)
    for mod in SHAPES:
        worst = max(_dense_rel(ups, res, mod, k) for k in range(len(ups)))
        assert worst <= fast[mod].bound and worst <= scaled[mod].bound, (mod, worst, fast[mod], scaled[mod])


def test_the_unscaled_route_from_the_round_buffer(monkeypatch):
    """The round buffer's float32 stacks (their rounding's slack w in the bound) skip it too,
    and agree with the scaled probes within rounding."""
    ups = _uploads("fraq", exact=False)
    agg = get_aggregator("fraq", tau=0.9)
    shapes = {mod: tuple(ups[0].factors[mod][0].shape[:1]) + tuple(ups[0].factors[mod][1].shape[1:])
              for mod in SHAPES}
    buf = agg.open_round(shapes, clients=len(ups), ranks=[u.factors["sq"][1].shape[0] for u in ups])
    for u in ups:
        buf.add(u)
    res = buf.aggregate()
    fast, scaled, skipped = _both_paths(monkeypatch, ups, res, source=buf)
    assert skipped and all(skipped)
    _agree(fast, scaled)
    for mod in SHAPES:
        assert _dense_rel(ups, res, mod) <= fast[mod].bound, mod


def test_the_unscaled_route_uses_the_parts_and_shares_probes_by_column_count(monkeypatch):
    """The parts route runs (no weighted float64 stack is formed: ExactFactors is never
    made), and modules of the same n see the same probes: two identical modules give
    identical certificates, and the probes are drawn once per column count, in module
    order ((k, 10) for "a" and "b", then (k, 11) for "c")."""
    import fraq.aggregators.certificate as cm

    g = torch.Generator().manual_seed(4)

    def client():
        B, A = torch.randn(12, 3, generator=g), torch.randn(3, 10, generator=g)
        return {"a": (B, A), "b": (B.clone(), A.clone()),
                "c": (torch.randn(12, 3, generator=g), torch.randn(3, 11, generator=g))}

    ups = [ClientUpdate(client(), scale=1.0, weight=1.0), ClientUpdate(client(), scale=0.5, weight=2.0)]
    res = get_aggregator("fraq", tau=0.9).aggregate(ups)
    real, randn, draws = cm.ExactFactors, torch.randn, []
    monkeypatch.setattr(cm, "ExactFactors", lambda *a, **k: pytest.fail("the weighted stack was formed"))
    monkeypatch.setattr(torch, "randn", lambda *a, **k: draws.append(a) or randn(*a, **k))
    cert = res.certificate(ups, method="probe")
    monkeypatch.setattr(cm, "ExactFactors", real)
    monkeypatch.setattr(torch, "randn", randn)
    assert draws == [(8, 10), (8, 11)]
    assert _fields({"x": cert["a"]}) == _fields({"x": cert["b"]})
    for mod in "abc":
        assert _dense_rel(ups, res, mod) <= cert[mod].bound, mod


@pytest.mark.parametrize("case", ["float64 uploads", "tiny weight", "huge scale", "float32 probes", "float64 downlink"])
def test_the_scaling_runs_where_the_range_could_break(monkeypatch, case):
    """Outside NARROW's bounds every module takes the powers of two: float64 uploads (any
    exponent), a client weight 2^-90 of the total (sqrt 2^-45 < 2^-40), a scale 2^45,
    float32 probes, or a downlink whose factors are float64."""
    ups = _uploads("fraq", exact=False, dtype=F64 if case == "float64 uploads" else F32)
    if case == "tiny weight":
        ups[1] = dataclasses.replace(ups[1], weight=ups[1].weight * 2.0 ** -92)
    if case == "huge scale":
        ups[0] = dataclasses.replace(ups[0], scale=2.0 ** 45)
    res = _agg("fraq").aggregate(ups)
    if case == "float64 downlink":
        res = _tampered(res, lambda f: Factors(f.B.double(), f.A.double(), f.scale))
    options = {"dtype": F32} if case == "float32 probes" else {}
    fast, scaled, skipped = _both_paths(monkeypatch, ups, res, **options)
    assert skipped and not any(skipped), case
    assert _fields(fast) == _fields(scaled)


@pytest.mark.parametrize("bexp,aexp", [(100, -100), (-100, 100), (-60, -60), (60, 0)])
def test_skipping_the_scaling_at_the_ends_of_float32s_range(monkeypatch, bexp, aexp):
    """Float32 uploads with B times 2^bexp and A times 2^aexp (entries from about 2^-100 to
    2^100, products from 2^-120 up): still NARROW, so the scaling is skipped, and both
    certificates agree with the scaled ones (the probe one within rounding, the Gram one
    field for field); the probe bound holds against the float64 dense error."""
    import fraq.aggregators.certificate as cm

    ups = [dataclasses.replace(u, factors={m: (B * 2.0 ** bexp, A * 2.0 ** aexp) for m, (B, A) in u.factors.items()})
           for u in _uploads("fraq", exact=False)]
    res = get_aggregator("fraq", tau=0.9).aggregate(ups)
    fast, scaled, skipped = _both_paths(monkeypatch, ups, res)
    assert skipped and all(skipped)
    _agree(fast, scaled)
    for mod, c in fast.items():
        assert _dense_rel(ups, res, mod) <= c.bound, mod
    monkeypatch.undo()
    gram_fast = res.certificate(ups)
    monkeypatch.setattr(cm, "unscaled", lambda *a: False)
    assert _fields(gram_fast) == _fields(res.certificate(ups))


def test_the_unscaled_route_with_per_module_scales_and_a_negative_downlink_term(monkeypatch):
    """Scales given per module, spanning 2^-1..2^1 and 1.5 (the coefficients a_k s_k differ
    module to module, so no coefficient vector is shared across them), and a downlink whose
    merged term carries a negative scale beside the start adapter (G = -B A + B0 A0: the
    term's norm counted by magnitude in N_G): the parts route agrees with the scaled one
    within rounding and bounds the float64 dense error, on FRAQ below full rank and on
    FLoRA (exact: its error at float32's rounding, far above the probes' float64 one)."""
    base = _uploads("fraq", exact=False)
    ups = [dataclasses.replace(u, scale={"sq": 1.5 if k == 1 else 0.5, "tall": 2.0 ** (k - 1), "wide": 3.0})
           for k, u in enumerate(base)]
    for agg in (get_aggregator("fraq", tau=0.9), get_aggregator("flora")):
        res = agg.aggregate(ups)
        fast, scaled, skipped = _both_paths(monkeypatch, ups, res)
        monkeypatch.undo()
        assert skipped and all(skipped)
        _agree(fast, scaled)
        for mod in SHAPES:
            assert _dense_rel(ups, res, mod) <= fast[mod].bound, (agg.name, mod)
    res = get_aggregator("fraq", tau=0.9).aggregate(ups)
    flipped = dataclasses.replace(res, downlinks=tuple(
        {n: dataclasses.replace(d, merge=tuple(Factors(f.B, f.A, -f.scale) for f in d.merge),
                                start=Factors(ups[0].factors[n][0], ups[0].factors[n][1], 0.25))
         for n, d in c.items()} for c in res.downlinks))
    fast, scaled, skipped = _both_paths(monkeypatch, ups, flipped)
    assert skipped and all(skipped)
    _agree(fast, scaled)
    for mod in SHAPES:
        assert _dense_rel(ups, flipped, mod) <= fast[mod].bound, mod
        assert fast[mod].error > 1.0, mod  # -G + B0 A0 / 4 is no aggregate: an O(1) error


def test_float32_probes_refuse_a_module_too_large_for_their_rounding_bound():
    """c u <= 1e-3 keeps the bound's 1.01 honest (module docstring): at float32's u = 2^-24
    a module with m + n + R + p + 9 > 16,777 is refused with its name and the remedy, and
    float64 probes certify it (the bound holds against the float64 dense error)."""
    g = torch.Generator().manual_seed(5)
    ups = [ClientUpdate({"small": (torch.randn(6, 2, generator=g), torch.randn(2, 5, generator=g)),
                         "long": (torch.randn(16_800, 2, generator=g), torch.randn(2, 4, generator=g))},
                        scale=1.0, weight=1.0 + k) for k in range(2)]
    res = get_aggregator("fraq", tau=0.9).aggregate(ups)
    with pytest.raises(ValueError, match=r"dtype\(=torch.float32\) rounds too coarsely for module 'long'.*"
                                         r"pass dtype=torch.float64"):
        res.certificate(ups, method="probe", dtype=F32)
    cert = res.certificate(ups, method="probe")
    for mod in ("small", "long"):
        assert _dense_rel(ups, res, mod) <= cert[mod].bound, mod
