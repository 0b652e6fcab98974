"""Analytic FLOP models (:func:`fraq.aggregators.analytic_flops`, ``model="full"``) against the FLOPs
counted from the operators each call runs (:func:`benchmarks.measure.count_flops`, LAPACK at LAWN 41's
counts), for every row of Tables 1-3 on a kernel (each peer at its best) and the published paths that
had no model: FLoRG (``eigh`` and ``gram``, with and without the Procrustes step), FedSVD and
FedMomentum (``dense`` and ``fraq``), FlexLoRA's ``rsvd`` and ``fraq`` kernels, FLoRIST's ``qr``, with
FRAQ and FLoRIST at their published thresholds beside them (each shape group at its largest output
rank, at which the batched call runs: the rule Tables 1-3 count by); and peft's svd merge (``peft-svd``, ``peft-svd-thin``: :func:`fraq.flops.peft_svd_flops`).

Tolerance: the counter rounds each LAPACK call's count to an integer (``benchmarks.measure.flops``),
so a sum of c calls is within c / 2 FLOPs of the model's real-valued sum: :data:`ROUNDING` allows
c = 32 calls (these aggregations run at most a dozen batched ones), and nothing else may differ
beyond 1e-9 of the count. Elementwise work (scaling, masking, square roots) is counted by neither side.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.measure import count_flops
from benchmarks.measure.methods import default_path
from fraq.aggregators import ClientUpdate, analytic_flops, get_aggregator
from fraq.flops import TABLE5_METHODS, florg_flops, peft_svd_flops
from fraq.synthetic import lora_clients

REL = 1e-9
"""Counted over modelled, beyond :data:`ROUNDING`: float summation only."""

ROUNDING = 16
"""FLOPs: half a FLOP for each of up to 32 LAPACK calls, each count rounded to an integer."""

SHAPES = [(60, 90), (90, 60), (128, 128), (40, 200)]

ROWS = [("florist", {"kernel": "qr", "tau": 0.9}), ("flexlora", {"kernel": "rsvd"}), ("flexlora", {"kernel": "fraq"}),
        ("florg", {"kernel": "gram"}), ("florg", {}), ("fedsvd", {"kernel": "fraq"}), ("fedsvd", {}),
        ("fedmomentum", {"kernel": "fraq"}), ("fedmomentum", {}), ("fraq", {"tau": 0.9}), ("florist", {"tau": 0.9})]


def _uploads(agg, shapes, ranks, seed=0):
    """Uploads of two modules per shape (a batched group each), as the method's clients send them:
    FLoRG's A_k (r x min(m, n)), FedSVD's B_k on one shared A, the others' own (B_k, A_k)."""
    g = torch.Generator().manual_seed(seed)
    per_client = [{} for _ in ranks]
    for i, (m, n) in enumerate(shapes):
        for j in range(2):
            name = f"layers.{j}.{i}"
            Bs, As = lora_clients(m, n, ranks, seed=seed + 10 * i + j)
            for k, r in enumerate(ranks):
                if agg.single_matrix:
                    per_client[k][name] = (None, torch.randn(r, min(m, n), generator=g))
                elif agg.name == "fedsvd":
                    per_client[k][name] = (Bs[k], As[0])
                else:
                    per_client[k][name] = (Bs[k], As[k])
    return [ClientUpdate(mods, scale=2.0, weight=w) for mods, w in zip(per_client, [3, 1, 2])]


def _modelled(name, opts, ups, res, shapes, ranks):
    """The model at each module's shape and the stacked rank, as Tables 1-3 sum it
    (``benchmarks.experiments.tables123``): a per-client tuple of ranks counts as its largest, and
    each module at the largest rank of its shape group, at which the batched call runs."""
    kernel = {"kernel": opts["kernel"]} if "kernel" in opts else {}
    total = 0.0
    for i, (m, n) in enumerate(shapes):
        own = [res.ranks[f"layers.{j}.{i}"] for j in range(2)]
        p = max(max(q) if isinstance(q, tuple) else int(q) for q in own)
        p = min(p, sum(ranks), m, n)
        path = default_path(m, n, sum(ranks), p) if name == "fraq" else {}  # the path recompress takes
        total += 2 * analytic_flops(name, m, n, sum(ranks), p, **kernel, **path)
    return total


@pytest.mark.parametrize("name,opts", ROWS, ids=[f"{n}-{o.get('kernel', 'published')}" for n, o in ROWS])
@pytest.mark.parametrize("shapes", [SHAPES[:2], SHAPES[2:]], ids=["60x90+90x60", "128x128+40x200"])
def test_counted_equals_model(name, opts, shapes):
    """Every module of two shape groups, a steady-state round (FLoRG aligns to a previous A, as
    Tables 1-3 time it); equal client ranks where the method needs them, mixed elsewhere."""
    agg = get_aggregator(name, **opts)
    ranks = [4, 4, 4] if not agg.heterogeneous_ranks else [2, 4, 6]
    ups = _uploads(agg, shapes, ranks)
    state = agg.aggregate(ups).state if agg.partial_first_round else None
    res = agg.aggregate(ups, state)
    counted = count_flops(lambda: agg.aggregate(ups, state))
    assert counted.uncounted == ()
    assert counted.total == pytest.approx(_modelled(name, opts, ups, res, shapes, ranks), rel=REL, abs=ROUNDING)


@pytest.mark.parametrize("kernel", ["eigh", "gram"])
def test_florg_first_round_has_no_procrustes_step(kernel):
    """Round 1 (no previous A) counts as ``aligned=False``; the step's own count is the difference."""
    agg = get_aggregator("florg", kernel=kernel)
    m, n, ranks = 50, 80, [3, 3, 3]
    ups = _uploads(agg, [(m, n)], ranks)
    first = count_flops(lambda: agg.aggregate(ups)).total
    assert first == pytest.approx(2 * florg_flops(50, 9, 3, kernel=kernel, aligned=False), rel=REL, abs=ROUNDING)
    state = agg.aggregate(ups).state
    aligned = count_flops(lambda: agg.aggregate(ups, state)).total
    assert aligned - first == pytest.approx(2 * (2 * 2 * 3 * 50 * 3 + 28 * 27 / 3 + 2 * 27), rel=REL, abs=ROUNDING)


def test_florg_gram_kernel_is_cheaper_where_the_stack_is_short():
    """O(R^2 k + R^3) against O(k^3): at R = 64 rows of k = 768 the Gram kernel does < 5% of the work
    (the Gram 2 R^2 k and eigh 14 R^3 / 3 against 2 R k^2 and 14 k^3 / 3)."""
    gram, eigh = (analytic_flops("florg", 768, 768, 64, 16, kernel=k) for k in ("gram", "eigh"))
    assert gram < 0.05 * eigh


@pytest.mark.parametrize("name", ["florg", "fedsvd", "fedmomentum"])
def test_no_table5_row_is_refused_by_name(name):
    assert name not in TABLE5_METHODS
    with pytest.raises(ValueError, match="Table 5 has no row"):
        analytic_flops(name, 64, 64, 8, 4, model="table5")
    with pytest.raises(ValueError, match=r"kernel\(='nope'\)"):
        analytic_flops(name, 64, 64, 8, 4, kernel="nope")


def test_peft_svd_flops_refuses_bad_input():
    with pytest.raises(ValueError, match=r"p\(=9\)"):
        peft_svd_flops(8, 4, 3, 9)
    with pytest.raises(ValueError, match=r"r\(=-1\)"):
        peft_svd_flops(8, 4, -1, 2)
    # the full SVD costs more than the thin one on a non-square matrix, the same on a square one
    assert peft_svd_flops(40, 200, 12, 4) > peft_svd_flops(40, 200, 12, 4, full_matrices=False)
    assert peft_svd_flops(64, 64, 12, 4) == peft_svd_flops(64, 64, 12, 4, full_matrices=False)


@pytest.mark.parametrize("merge", ["peft-svd", "peft-svd-thin"])
def test_counted_peft_svd_merge_equals_model(merge):
    """peft's own ``add_weighted_adapter`` on a tiny BERT (modules 32 x 32, 37 x 32, 32 x 37;
    clients of ranks 4, 8, 2): the counted call equals the model summed over its modules."""
    pytest.importorskip("peft")
    pytest.importorskip("transformers")
    from benchmarks.peft_merge import AdapterMerge, build_clients

    clients = build_clients("tiny-bert")
    r = sum(clients.model.peft_config[a].r for a in clients.adapters)
    model = 0.0
    for layer in clients.layers.values():
        m, n = layer.lora_B[clients.adapters[0]].weight.shape[0], layer.lora_A[clients.adapters[0]].weight.shape[1]
        model += peft_svd_flops(m, n, r, 4, full_matrices=merge == "peft-svd")
    counted = count_flops(lambda: AdapterMerge(merge, rank=4)(clients))
    assert counted.uncounted == ()
    assert counted.total == pytest.approx(model, rel=REL, abs=ROUNDING)
