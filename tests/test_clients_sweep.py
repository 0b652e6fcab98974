"""The clients sweep (Fig. 3's third axis): its points, its float64 checks, the suites that
read it, and the report's exponents and crossings on hand-built result files."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from benchmarks.experiments import clients
from benchmarks.sizes import ASV, QUICK, SIZES


@pytest.mark.parametrize("size", list(SIZES))
def test_points_stack_clients_of_one_rank_past_d(size):
    c = SIZES[size]["clients"]
    pts = clients.points(size)
    assert len({clients.key(p) for p in pts}) == len(pts)
    for p in pts:
        assert p["r"] == p["K"] * c["client_rank"] and p["d"] <= p["D"] and p["tau"] == c["tau"]
    for m, n, ks, *_ in c["shapes"]:
        # every shape reaches past r = d, so the sweep has a regime on each side of it
        assert max(ks) * c["client_rank"] > m and min(ks) * c["client_rank"] < m


def test_asv_runner_and_pytest_benchmark_read_the_same_points():
    from benchmarks import bench_clients, run
    import tests.bench.test_quick as quick

    asv = []
    for combo in itertools.product(*bench_clients.ClientsSweep.params):
        try:
            asv.append(bench_clients.point_config(*combo))
        except NotImplementedError:
            pass
    runner = [c for _, _, c in run.plan(["clients"], ASV)]
    assert sorted(map(clients.key, asv)) == sorted(map(clients.key, runner))
    assert [c for c in quick.POINTS.values() if c["figure"] == "clients"] == clients.points(QUICK)


def test_energy_check_against_a_hand_derived_spectrum():
    # energies 9, 4, 1, 0 of 14: the rule at tau = 0.9 needs 2 (13/14 = 0.929 >= 0.9 > 9/14)
    S = torch.tensor([[3.0, 2.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    out = clients.energy_check(S, [1, 1], 0.9)
    assert out["rank_float64"] == [2, 1]
    assert out["energy_kept"] == pytest.approx([9 / 14, 1.0], abs=1e-15)
    assert out["energy_kept_min"] == pytest.approx(9 / 14, abs=1e-15)


@pytest.mark.integration
@pytest.mark.parametrize("method", ["fraq", "florist", "flexlora"])
def test_every_method_keeps_tau_of_the_float64_energy_at_and_past_d(method):
    """At r = d and r = 4d (tiny sizes) each method's rank keeps tau of the float64 energy,
    and its float32 result is within float32 rounding of the float64 optimum at that rank."""
    from benchmarks.measure import threads

    eps = torch.finfo(torch.float32).eps
    for config in clients.points(QUICK):
        if config["method"] != method or config["D"] != config["d"] or config["r"] < config["d"]:
            continue
        with threads(1):
            res = clients.metrics(config)
        assert res["energy_kept_min"] >= config["tau"] - 64 * eps, (clients.key(config), res)
        assert 0 <= res["excess"] <= 64 * eps * math.sqrt(config["r"]), (clients.key(config), res["excess"])
        assert res["counted_flops"] > 0 and res["peak_bytes"] > 0


def test_growth_is_the_least_squares_exponent():
    ks = [2, 4, 8, 16]
    assert clients.growth(ks, [3.0 * k**1.5 for k in ks]) == pytest.approx(1.5, abs=1e-12)
    assert math.isnan(clients.growth([4], [1.0]))


def test_roofline_clients_refuses_a_shape_not_in_the_sweep(capsys):
    from benchmarks import roofline

    with pytest.raises(SystemExit) as exc:
        roofline.main(["--clients", "tiny", "--shapes", "9x9"])
    assert exc.value.code == 2
    assert "'9x9'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the report


@pytest.fixture
def quiet_machine(monkeypatch):
    """Result files written as on an idle machine: the report's verdicts are withheld when the
    recorded load average or steal time says the machine was busy (analysis.verdicts.busy), and
    this machine's own load is no part of these tests."""
    import fraq._machine

    monkeypatch.setattr("os.getloadavg", lambda: (0.1, 0.1, 0.1))
    monkeypatch.setattr(fraq._machine, "steal_share", lambda: 0.0)


def _write(out, rows):
    from benchmarks.results import write_result

    for method, K, ms in rows:
        config = dict(figure="clients", sweep="K", method=method, mode="batched", d=64, D=64, K=K, r=8 * K, p=None,
                      tau=0.95, modules=1, client_rank=8, repeats=3)
        s = [ms * 1e-3] * 3
        write_result(out, "clients", clients.key(config), config,
                     dict(timing=dict(samples=s, threads=1, device="cpu", median=s[0], q25=s[0], q75=s[0], min=s[0]),
                          ranks=[5], rank_float64=[5], energy_kept=[0.96], energy_kept_min=0.96, peak_bytes=1000 * K,
                          counted_flops=1e6 * K, excess=1e-12, excess_quadrature=1e-7, relative_error=0.1,
                          optimal_error=0.1))


@pytest.mark.integration
def test_report_states_exponents_on_each_side_of_d_and_the_crossing(tmp_path, quiet_machine):
    """FRAQ's time K^1 up to r = d (K = 8) and K^2 past it, the dense path flat at 16 ms:
    they cross between K = 16 (FRAQ 8 ms) and K = 32 (32 ms), at K = 16 * 2^(1/2)."""
    pytest.importorskip("pandas")
    pytest.importorskip("seaborn")
    import matplotlib

    matplotlib.use("Agg")
    from analysis.reproduce import build

    ks = [2, 4, 8, 16, 32]
    fraq_ms = {k: (k / 8 if k <= 8 else (k / 8) ** 2) * 2.0 for k in ks}  # 0.5, 1, 2, 8, 32
    _write(tmp_path / "results", [("fraq", k, fraq_ms[k]) for k in ks] + [("flexlora", k, 16.0) for k in ks])
    text = build(tmp_path).read_text()
    assert "figures/fig_clients.png" in text and (tmp_path / "figures" / "fig_clients.png").exists()
    assert "FRAQ K^1.00 / K^2.00" in text and "FlexLoRA K^0.00 / K^0.00" in text
    assert f"cross at K ~ {16 * 2 ** 0.5:.0f} (r ~ {8 * 16 * 2 ** 0.5:.0f}" in text and "FlexLoRA becomes the faster" in text
    # past r = d the largest FRAQ / dense ratio is 32 / 16
    assert "below 1): 2.00 (3 samples; descriptive: n < 6, no interval)" in text  # 3 points, no verdict



@pytest.mark.integration
def test_report_of_a_partial_sweep_compares_the_clients_both_methods_reached(tmp_path, quiet_machine):
    """An interrupted run: the dense path reached K = 2..8, FRAQ K = 2..32; the report is
    drawn from the K they share (FRAQ faster at each: "never" crosses), no traceback."""
    pytest.importorskip("pandas")
    pytest.importorskip("seaborn")
    import matplotlib

    matplotlib.use("Agg")
    from analysis.reproduce import build

    _write(tmp_path / "results", [("fraq", k, 1.0 * k) for k in (2, 4, 8, 16, 32)]
           + [("flexlora", k, 64.0) for k in (2, 4, 8)])
    text = build(tmp_path).read_text()
    assert "they cross never: FRAQ is faster at every K" in text
    # FlexLoRA reached r = d at K = 8 alone: no exponent from r = d on, and it says so
    assert "nan" not in text.lower() and "FlexLoRA K^0.00 / no fit (fewer than two K)" in text
    head = "## Not measured or skipped"
    assert head not in text or "clients" not in text.split(head)[1][:400]

# ----------------------------------------------------------------------------- whole models


def test_the_estimate_counts_exactly_the_factors_the_job_builds():
    from benchmarks.cases import build_model
    from benchmarks.experiments import clients_models as cm
    from benchmarks.measure import tensor_bytes

    preset = cm.preset_with("roberta-base", 3, 8)
    assert preset.ranks == (8, 8, 8) and preset.scales == (2.0,) * 3  # roberta-base's alpha / r kept
    model = build_model(preset, layers=1)
    built = sum(tensor_bytes(*Bs, *As) for Bs, As in model.factors.values())
    assert cm.estimate(preset, ["fraq"], layers=1)["factors"] == built


def test_a_job_that_cannot_fit_says_so_in_one_line_before_building_its_inputs(monkeypatch):
    import benchmarks.cases
    from benchmarks.experiments import clients_models as cm

    def never(*a, **k):
        raise AssertionError("inputs built for a job that does not fit")

    monkeypatch.setattr(cm, "available_bytes", lambda: 2**20)
    monkeypatch.setattr(benchmarks.cases, "build_model", never)
    said = []
    res = cm.measure(cm.points(QUICK)[0], log=said.append)
    assert res["rows"] == [] and "not run" in res["skipped"]
    assert len(said) == 1 and "needs about" in said[0] and "GiB available" in said[0]


@pytest.mark.integration
def test_a_method_whose_workspace_cannot_fit_is_named_and_the_others_run(monkeypatch):
    from benchmarks.experiments import clients_models as cm
    from benchmarks.measure import threads

    config = dict(cm.points(QUICK)[0], repeats=1, budget_s=1e9)
    est = cm.estimate(cm.preset_with(config["preset"], config["clients"], config["client_rank"]), config["methods"],
                      config["layers"])
    room = est["factors"] + max(est["peak"]["fraq"], est["peak"]["florist"])
    # the dense d x D matrices are FlexLoRA's alone: not even one module of it fits
    assert est["one_module_peak"]["flexlora"] > room
    monkeypatch.setattr(cm, "available_bytes", lambda: room)
    said = []
    with threads(1):
        res = cm.measure(config, log=said.append)
    rows = {r["name"]: r for r in res["rows"]}
    assert "not run" in rows["flexlora"]["skipped"] and len(said) == 1 and "flexlora" in said[0]
    for name in ("fraq", "florist"):
        assert rows[name]["latency"]["median"] > 0 and rows[name]["peak_bytes"] > 0
        assert rows[name]["peak_scope"] == "first 1 layer(s)"  # the whole (built) model: it fits


@pytest.mark.integration
def test_a_method_whose_whole_model_cannot_fit_is_extrapolated_from_one_module(monkeypatch):
    from benchmarks.experiments import clients_models as cm
    from benchmarks.measure import threads

    config = dict(cm.points(QUICK)[0], repeats=1, budget_s=1e9, methods=["fraq"])
    est = cm.estimate(cm.preset_with(config["preset"], config["clients"], config["client_rank"]), ["fraq"],
                      config["layers"])
    room = est["factors"] + est["stacks"]
    assert est["one_module_peak"]["fraq"] <= room < est["peak"]["fraq"]
    monkeypatch.setattr(cm, "available_bytes", lambda: room)
    said = []
    with threads(1):
        (row,) = cm.measure(config, log=said.append)["rows"]
    assert row["peak_scope"] == "largest one-module call" and "the whole model needs about" in row["extrapolated"]
    assert len(said) == 1 and "extrapolated from one module per shape" in said[0]


@pytest.mark.integration
def test_the_estimate_bounds_the_measured_peak():
    from benchmarks.experiments import clients_models as cm
    from benchmarks.measure import threads

    config = dict(cm.points(QUICK)[0], repeats=1, budget_s=1e9)  # every method timed on the layers it built
    with threads(1):
        res = cm.measure(config)
    for row in res["rows"]:
        assert row["peak_scope"] == f"first {config['layers']} layer(s)"
        assert row["peak_bytes"] <= row["estimated_peak_bytes"], row["method"]


def test_every_point_has_a_cost_growing_with_the_clients():
    """The runner's progress weights: positive, and for FRAQ and the dense path on one shape
    not decreasing in K (their FLOPs do not)."""
    for size in SIZES:
        pts = clients.points(size)
        assert all(clients.cost(c) > 0 for c in pts)
        for method in ("fraq", "flexlora"):
            for m, n, *_ in SIZES[size]["clients"]["shapes"]:
                line = [clients.cost(c) for c in pts if (c["method"], c["d"], c["D"]) == (method, m, n)]
                assert line == sorted(line), (size, method, m, n)
