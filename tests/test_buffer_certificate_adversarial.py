"""Round-buffer certificates on inputs chosen to break them: weights across six decades,
factors rescaled by 1e3 and 1e-3 (B c, A / c), clients that nearly or exactly cancel, half
precision stacks, tau near 1, one client.

Reference: the true relative error ||S - G||_F / ||S||_F of the returned adapter, formed
densely in float64 from the raw uploads (a_k = n_k / sum_j n_j, each term a_k s_k B_k A_k)
and the downlink's factors, never from fraq's stacks or certificate. Its own rounding is at
most about (m + n + R + 8) u_64 N_S / ||S|| (N_S = sum_k a_k |s_k| ||B_k|| ||A_k||, Higham
Eq. 3.5), which every certified bound exceeds by orders: a Gram bound carries at least
sqrt(delta) / ||S'|| >= sqrt(c u_64) N_S / ||S||, a probe bound its rho_S and rho_E of the
same order, a stored stack's w >= 8 u_d N_S. So the checks are ``bound >= reference`` with
nothing subtracted, and the same for the bound as printed (rounded up, never down).
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from fraq.aggregators import ClientUpdate, get_aggregator

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
SHAPES = {"q": (24, 18), "o": (10, 30)}
METHODS = [("fraq", {"tau": 1.0}), ("fraq", {"tau": 1.0 - 1e-9}), ("fraq", {"tau": 0.999}), ("fraq", {"rank": 1}),
           ("flora", {})]


def _factors(g, m, n, r, dtype, c=1.0, base=None, sign=1.0, eps=0.0):
    """(B c, A / c) rounded to ``dtype``; with ``base``, (base's B, sign * base's A + eps N)
    before the rescaling (a client that nearly cancels ``base``'s)."""
    if base is None:
        B, A = torch.randn(m, r, generator=g, dtype=F64), torch.randn(r, n, generator=g, dtype=F64)
    else:
        B, A = base
        A = sign * A + eps * torch.randn(A.shape, generator=g, dtype=F64)
    return (B * c).to(dtype), (A / c).to(dtype)


def _true_error(ups, down, name) -> float:
    """||S - G||_F / ||S||_F in float64 from the raw uploads (inf for S = 0 and G != 0, nan for both 0)."""
    total = math.fsum(u.weight for u in ups)
    S = sum((u.weight / total) * u.scale_of(name) * (u.factors[name][0].double() @ u.factors[name][1].double())
            for u in ups)
    terms = list(down.merge) + ([down.start] if down.start is not None else [])
    G = sum((f.scale * f.B.double() @ f.A.double() for f in terms), torch.zeros_like(S))
    num, den = float(torch.linalg.norm(S - G)), float(torch.linalg.norm(S))
    return num / den if den > 0 else (math.nan if num == 0 else math.inf)


def _printed_bound(c) -> float:
    """The bound a certificate's words state: inf when it says it cannot judge."""
    text = str(c)
    if text.startswith("cannot judge"):
        return math.inf
    return float(re.search(r"<= ([0-9.e+-]+)", text).group(1))


def _check(ups, res, cert, ref_of=None):
    """Every module's certified and printed bounds at least the true error; the words
    consistent with the numbers."""
    for name, c in cert.items():
        ref = _true_error(ups, res.downlinks[c.client or 0][name], name)
        if math.isnan(ref):  # S = G = 0: no relative error exists; the certificate must not judge
            assert c.bound == math.inf and c.note is not None, (name, c)
            continue
        assert c.bound >= ref, (name, c, ref)
        assert _printed_bound(c) >= ref, (name, str(c), ref)
        if c.at_rounding_level and math.isfinite(c.bound):
            assert "rounding level" in str(c), (name, str(c))
        if not math.isfinite(c.bound):
            assert c.note is not None and str(c).startswith("cannot judge"), (name, str(c))
        else:
            assert c.note is None, (name, c)


def _round(method, options, ups, dtype):
    agg = get_aggregator(method, **options)
    ranks = [u.factors["q"][0].shape[1] for u in ups]
    buf = agg.open_round(SHAPES, clients=len(ups), ranks=ranks, dtype=dtype)
    for k in reversed(range(len(ups))):
        buf.add(ups[k], client=k)
    return buf, buf.aggregate()


def _run(method, options, ups, dtype):
    buf, res = _round(method, options, ups, dtype)
    for kind in ("gram", "probe"):
        for seed in ((0,) if kind == "gram" else (0, 1, 2)):
            cert = res.certificate(buf) if kind == "gram" else res.certificate(buf, "probe", seed=seed)
            _check(ups, res, cert)
    return buf, res


DTYPES = [F64, F32, F16, BF16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method,options", METHODS)
def test_weights_across_six_decades_and_rescaled_factors(method, options, dtype):
    """Weights 1e-6 .. 1 with factors rescaled by 1e-3 and 1e3: the weighted stacks span
    about 1e-9 .. 1e3 in the entries, half precision's subnormals included (w's eta part)."""
    g = torch.Generator().manual_seed(1)
    weights, cs, scales = [1e-6, 1e-4, 1e-2, 1.0, 0.3], [1e3, 1e-3, 1.0, 1e-3, 1e3], [2.0, 0.5, 1.0, 16.0, 0.125]
    ranks = [2, 3, 1, 2, 2] if method == "fraq" or method == "flora" else [2] * 5
    ups = [ClientUpdate({name: _factors(g, m, n, r, dtype, c) for name, (m, n) in SHAPES.items()}, scale=s,
                        weight=w) for w, c, s, r in zip(weights, cs, scales, ranks)]
    _run(method, options, ups, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [0.0, 1e-9, 1e-6, 1e-3])
@pytest.mark.parametrize("method,options", [("fraq", {"tau": 1.0}), ("fraq", {"tau": 0.999}), ("flora", {})])
def test_clients_that_nearly_cancel(method, options, dtype, eps):
    """Two clients of the same B and A, -A + eps N, one weighted and scaled so a_1 s_1 = a_2 s_2
    exactly (3 * 1 = 1 * 3) though the stacks' sqrt(a_k), sqrt(a_k) s_k differ: S is eps
    times the factors' size, below the stacks' rounding for small eps, and exactly 0 at
    eps = 0 while the stored S' is not. A third client of weight 1e-6 adds a little. The
    bound must hold or the certificate must say it cannot judge."""
    g = torch.Generator().manual_seed(2)
    ups = []
    for name, (m, n) in SHAPES.items():
        first = _factors(g, m, n, 3, F64)
        second = _factors(g, m, n, 3, F64, base=first, sign=-1.0, eps=eps)
        third = _factors(g, m, n, 1, F64)
        for k, f in enumerate((first, second, third)):
            if len(ups) <= k:
                ups.append({})
            ups[k][name] = tuple(t.to(dtype) for t in f)
    weights, scales = [1.0, 3.0, 1e-6 if eps else 0.0], [3.0, 1.0, 1.0]
    ups = [ClientUpdate(f, scale=s, weight=w) for f, s, w in zip(ups, scales, weights)]
    buf, res = _run(method, options, ups, dtype)
    if eps == 0.0:  # S = 0 exactly: no relative error exists, whatever S' the stacks hold
        for kind in ("gram", "probe"):
            cert = res.certificate(buf, kind)
            for name, c in cert.items():
                assert c.bound == math.inf and str(c).startswith("cannot judge"), (kind, name, str(c))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method,options", METHODS)
def test_one_client(method, options, dtype):
    g = torch.Generator().manual_seed(3)
    ups = [ClientUpdate({name: _factors(g, m, n, 4, dtype, 1e3) for name, (m, n) in SHAPES.items()}, scale=1e3,
                        weight=1e-6)]
    _run(method, options, ups, dtype)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_wrong_adapter_beside_a_tiny_aggregate_is_never_at_rounding_level(dtype):
    """A result that drops the nearly cancelling pair's difference (the third client's
    adapter alone, true error near 1): however large w is against ||S||, the certificate
    never calls it rounding level with a finite bound below the true error."""
    g = torch.Generator().manual_seed(4)
    ups = []
    for eps in (1e-2, 1e-5, 1e-8):
        f = {}
        for name, (m, n) in SHAPES.items():
            first = _factors(g, m, n, 2, F64)
            f[name] = (first, _factors(g, m, n, 2, F64, base=first, sign=-1.0, eps=eps))
        ups = [ClientUpdate({name: tuple(t.to(dtype) for t in f[name][k]) for name in SHAPES}, scale=s, weight=w)
               for k, (s, w) in enumerate(((3.0, 1.0), (1.0, 3.0)))]
        buf, res = _round("fraq", {"tau": 1.0}, ups, dtype)
        alone = [dataclasses.replace(u, weight=0.0 if k else 1.0) for k, u in enumerate(ups)]
        wrong = get_aggregator("fraq", tau=1.0).aggregate(alone)  # client 0 alone: error ~ ||B A|| / ||S||
        for kind in ("gram", "probe"):
            cert = wrong.certificate(buf, kind)
            for name, c in cert.items():
                ref = _true_error(ups, wrong.downlinks[0][name], name)
                assert ref > 1.0 and c.bound >= ref and _printed_bound(c) >= ref, (kind, eps, name, str(c), ref)
                assert not c.at_rounding_level, (kind, eps, name, str(c))


@pytest.mark.parametrize("source", ["uploads", "buffer"])
def test_an_overflowed_update_is_the_worst_module_and_not_called_a_zero_aggregate(source):
    """Float16 uploads whose weighted A (s_k A_k near 4e6) overflows: the round is refused
    (no adapter with an inf goes out). An adapter that holds an inf all the same (here one
    written into a good round's result) is certified with bound inf (never nan, which
    max() would pass over for a finite module's), so it is the certificate's worst, and the
    words name a non-finite value rather than a zero aggregate (the aggregate is not zero)."""
    g = torch.Generator().manual_seed(5)
    shapes = {"a": (8, 6), "q": (8, 6)}
    f = {"a": (torch.randn(8, 2, generator=g).half(), torch.randn(2, 6, generator=g).half()),
         "q": (torch.randn(8, 2, generator=g).half(), (1e3 * torch.randn(2, 6, generator=g)).half())}
    ups = [ClientUpdate(f, scale=1e3 if k else 1e-3, weight=1.0) for k in range(2)]
    buf = get_aggregator("flora").open_round(shapes, clients=2, ranks=[2, 2], dtype=F16)
    for u in ups:
        buf.add(u)
    with pytest.raises(ValueError, match="float32"):
        buf.aggregate()
    ups = [ClientUpdate(f, scale=1.0, weight=1.0) for _ in range(2)]
    buf = get_aggregator("flora").open_round(shapes, clients=2, ranks=[2, 2], dtype=F16)
    for u in ups:
        buf.add(u)
    res = buf.aggregate()
    res.downlinks[0]["q"].sent[1][0, 0] = math.inf  # the adapter as sent (shared by every client)
    cert = res.certificate(ups if source == "uploads" else buf)
    assert cert["q"].bound == math.inf and cert.worst[0] == "q", cert
    assert "non-finite" in cert["q"].note and "zero" not in cert["q"].note, cert["q"].note
    assert cert.summary()["certificate_bound"] is None
