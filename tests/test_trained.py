"""Tables 1-3 on trained adapters (benchmarks.experiments.trained): the exact aggregate is
formed from the uploads alone in float64, each row is judged against every client's upload
(a row aggregated from a dropped client shows an O(1) error and FLoRA's downlink count
changes), and the committed BANKING77 round gives the exact methods float32 rounding and
FRAQ's output to FLoRIST at its best at each threshold.

Bounds: an exact method in float32 (FLoRA's stack) differs from the float64 aggregate by the
rounding of its factors' products, at most c u sum_i |s_k| ||b_i|| ||a_i|| with u = 2^-24 and
c = 8 R: a dot product of length R (Higham, Eq. 3.5: R u), each factor rounded once more when
its sqrt(a_k) and s_k are applied in float32 (2 u a term), with a factor 4 of margin over that
first-order count; relative to ||S||_F.
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.experiments import trained
from fraq.aggregators import ClientUpdate

pytest.importorskip("safetensors")

U32 = torch.finfo(torch.float32).eps / 2


def _uploads(K=4, m=24, n=20, r=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    ups = []
    for k in range(K):
        f = {mod: (torch.randn(m, r, generator=g), torch.randn(r, n, generator=g)) for mod in ("q", "v")}
        ups.append(ClientUpdate(f, scale=2.0 / (k + 1), weight=10.0 * (k + 1)))
    return ups


def test_the_exact_aggregate_is_the_weighted_sum_formed_in_float64():
    ups = _uploads()
    S = trained.exact_aggregate(ups, "q")
    total = sum(10.0 * (k + 1) for k in range(4))
    hand = sum((10.0 * (k + 1) / total) * (2.0 / (k + 1)) * (u.factors["q"][0].double() @ u.factors["q"][1].double())
               for k, u in enumerate(ups))
    assert S.dtype == torch.float64 and torch.allclose(S, hand, rtol=1e-14, atol=0)
    single = [ClientUpdate({"q": (None, u.factors["q"][1])}, scale=u.scale, weight=u.weight) for u in ups]
    core = sum((10.0 * (k + 1) / total) * (2.0 / (k + 1)) * (u.factors["q"][1].double().mT @ u.factors["q"][1].double())
               for k, u in enumerate(ups))
    assert torch.allclose(trained.exact_aggregate(single, "q"), core, rtol=1e-14, atol=0)


@pytest.fixture
def saved(tmp_path, monkeypatch):
    """Synthetic uploads saved as the harness saves a round, as the experiment's folder."""
    from fraq.federated.adapters import save_client_adapters

    ups = _uploads()
    save_client_adapters(tmp_path / "flora.safetensors", ups, {"method": "flora", "round": 1, "model": "test",
                                                                "alphas": [2.0 * 3 / (k + 1) for k in range(4)]})
    monkeypatch.setattr(trained, "UPLOADS", tmp_path)
    return ups


def _rows(result):
    return {r["spec"]: r for r in result["rows"]}


def test_rows_are_judged_against_every_clients_upload(saved, monkeypatch):
    """FLoRA's exact stack: exactness at float32 rounding and downlink (m + n) sum r_k per
    module, counted by hand; the same row aggregated without the last client: an O(1) error
    and another downlink, so neither column can come from the wrong uploads."""
    from benchmarks.experiments import table_rows

    rows = _rows(trained.measure(trained.points("tiny")[0]))
    flora = rows["flora"]
    m, n, R = 24, 20, 12
    assert flora["downlink_params"] == 2 * (m + n) * R and flora["downlink_pct"] == 100.0
    N = max(float(sum(u.factors[mod][0].double().norm(dim=0) @ u.factors[mod][1].double().norm(dim=1)
                      * abs(u.scale) for u in saved)) / float(trained.exact_aggregate(saved, mod).norm())
            for mod in ("q", "v"))
    assert flora["exactness_max"] <= 8 * R * U32 * N
    assert "fedsvd" not in rows or rows["fedsvd"].get("skipped")

    real = table_rows.row_aggregator

    class Dropping:
        def __init__(self, agg):
            self.agg = agg

        def aggregate(self, ups, state=None):
            res = self.agg.aggregate(ups[:-1], state)
            return type(res)(res.method, res.downlinks + res.downlinks[-1:], res.client_init, res.ranks,
                             res.state, res.info)

    monkeypatch.setattr(table_rows, "row_aggregator", lambda row: Dropping(real(row)) if row.name == "flora"
                        else real(row))
    bad = _rows(trained.measure(trained.points("tiny")[0]))["flora"]
    assert bad["exactness_max"] > 0.05 and bad["downlink_params"] != flora["downlink_params"]


def test_the_committed_round_gives_fraqs_output_to_florist_at_its_best():
    """On the committed BANKING77 round: the exact methods at float32 rounding, and at each of
    FRAQ's thresholds FLoRIST at its best with FRAQ's downlink and exactness (one rank per
    module by one energy rule); every row that ran aggregated its own method's clients' file."""
    if not (trained.UPLOADS / "flora.safetensors").is_file():
        pytest.skip("the committed uploads are not in this checkout")
    res = trained.measure(trained.points("reduced")[0])
    assert res["clients"] == 10 and "Casanueva" in res["data"]
    rows = _rows(res)
    assert rows["flora"]["exactness_max"] < 1e-5 and rows["fedex-lora"]["exactness_max"] < 1e-5
    assert rows["fedit"]["exactness_max"] > 1e-2  # averaging A and B separately is not the aggregate
    for tau in ("0.8", "0.95"):
        f, b = rows[f"fraq:tau={tau}"], rows[f"florist:tau={tau},kernel=qr"]
        assert f["ranks"] == b["ranks"] and f["downlink_params"] == b["downlink_params"]
        assert math.isclose(f["exactness_max"], b["exactness_max"], rel_tol=0, abs_tol=1e-5)
    assert rows["lora-a2:round=1"]["uploads"] == "lora-a2.safetensors" and rows["florg"]["uploads"] == "florg.safetensors"
    assert "only round 1 is saved" in rows["lora-a2:round=2"]["skipped"]


def test_the_report_section_cites_the_publishers():
    pd = pytest.importorskip("pandas")
    from analysis.sections import trained as section

    if not (trained.UPLOADS / "flora.safetensors").is_file():
        pytest.skip("the committed uploads are not in this checkout")
    rec = trained.measure(trained.points("tiny")[0])
    (sec,) = section.draw({"trained": pd.DataFrame([rec])})
    assert "Casanueva" in sec.body and "arXiv:2003.04807" in sec.body and "| FRAQ (tau=0.95) |" in sec.body
    assert "not measured: no saved round of fedsvd" in sec.body
