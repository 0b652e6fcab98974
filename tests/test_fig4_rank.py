"""Fig. 4's rank sweep: a nested method (FlexLoRA's truncated dense SVD) decomposes once per
group and is cut to every p, bit for bit the result of calling it at that p."""

from __future__ import annotations

from benchmarks.experiments import fig4_rank
from benchmarks.measure import fidelity
from benchmarks.measure.methods import get_method, traits


def test_one_decomposition_per_group_gives_every_rank_bit_for_bit(monkeypatch):
    assert traits("flexlora").nested
    points = [c for c in fig4_rank.points("tiny")]
    c0 = points[0]
    group = c0["group"]
    Bs, As, B, A, ref, _, _ = fig4_rank._modules(c0["preset"], c0["size_layers"])[group]
    calls = []
    real = get_method("flexlora")

    def counted(*args, **kw):
        calls.append(kw["rank"])
        return real(*args, **kw)

    monkeypatch.setattr("benchmarks.measure.methods.get_method", lambda name: counted)
    fig4_rank._largest.cache_clear()
    ranks = sorted({c["p"] for c in points})
    for p in ranks:
        config = dict(c0, method="flexlora", p=p, p_max=max(ranks))
        got = fig4_rank.measure(config)
        Bg, Ag, rank = real(Bs, As, rank=p)  # the method called at p itself
        want = fidelity(B, A, Bg, Ag, rank, reference=ref)
        assert got["relative_error"] == want.relative_error.tolist(), p
        assert got["optimal_error"] == want.optimal_error.tolist(), p
        assert got["orthogonality"] == want.orthogonality.tolist(), p
        assert got["sin_left"] == want.first.sin_left.tolist() or p == max(ranks), p
    assert calls == [max(ranks)]  # one decomposition for the whole sweep
