"""analysis/: loaders on small fixture files, figure functions, the report, the notebooks.

Needs the ``analysis`` extra (pandas, matplotlib, seaborn, tqdm, nbclient, ipykernel);
skipped without it. The runner's tiny sweep (``python -m benchmarks.run --size tiny``)
runs real measurements at small shapes once per module and is shared by the tests below.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("seaborn")
pytest.importorskip("tqdm")

import analysis  # noqa: E402
from analysis import figures, loaders, style, tables  # noqa: E402
from analysis.sections.backends import fig_backends  # noqa: E402
from analysis.sections.fig1 import fig1_downlink, fig1_table  # noqa: E402
from analysis.sections.fig3 import fig3_scalability, table5_flops  # noqa: E402
from analysis.sections.table4 import table4_ablation  # noqa: E402
from analysis.sections.fig4 import fig4_fidelity, fig4_summary  # noqa: E402
from benchmarks import run  # noqa: E402
from benchmarks.results import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_results):
    """The tiny sweep's results directory (every sweep experiment, the recorded run:
    :func:`conftest.tiny_results`, this module's experiments copied)."""
    from conftest import tiny_copy

    out = tmp_path_factory.mktemp("tiny")
    tiny_copy(tiny_results, out / "results",
              ("table4", "table4_steps", "fig4_cond", "flexlora_precision", "fig4_rank", "fig1", "fig3"))
    return out


def _png_ok(path: Path) -> None:
    assert path.exists() and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _axes_text(fig) -> tuple[list[str], list[str]]:
    labels = [t for ax in fig.axes for t in (ax.get_xlabel(), ax.get_ylabel())]
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    legend += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    return labels, legend


# ----------------------------------------------------------------------------- loaders


def test_results_one_row_per_file_with_machine_columns(tiny):
    df = loaders.load_results(tiny / "results")
    files = list((tiny / "results").rglob("*.json"))
    assert len(df) == len(files)
    assert set(df["experiment"]) == {"fig1", "fig3", "fig4_rank", "fig4_cond", "table4", "table4_steps",
                                     "flexlora_precision"}
    for col in ("machine.cpu", "machine.cores", "machine.torch", "versions.torch", "threads", "dtype", "git_sha",
                "device"):
        assert col in df and df[col].notna().all(), col
    assert (df["device"] == "cpu").all()
    f3 = loaders.load_results(tiny / "results", experiment="fig3")
    assert {"timing.median", "timing.q25", "peak_bytes", "analytic_flops_table5"} <= set(f3.columns)
    assert (f3["timing.median"] > 0).all()


def test_results_warns_naming_each_unreadable_file(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.json").write_text(json.dumps({"rows": []}))
    (tmp_path / "c.json").write_text(json.dumps([1, 2]))
    write_result(tmp_path, "demo", "x", {"k": 1}, {"v": {"inner": 2.0}})
    with pytest.warns(UserWarning) as seen:
        df = loaders.load_results(tmp_path)
    messages = sorted(str(w.message) for w in seen)
    assert len(messages) == 3
    assert str(tmp_path / "a.json") in messages[0] and "not readable as JSON" in messages[0]
    assert str(tmp_path / "b.json") in messages[1] and "no experiment, config, result, machine" in messages[1]
    assert str(tmp_path / "c.json") in messages[2] and "list" in messages[2]
    assert len(df) == 1 and df.loc[0, "v.inner"] == 2.0 and df.loc[0, "k"] == 1 and df.loc[0, "device"] == "cpu"


def test_write_result_replaces_its_file(tmp_path):
    p1 = write_result(tmp_path, "e", "k", {"a": 1}, {"v": 1})
    p2 = write_result(tmp_path, "e", "k", {"a": 1}, {"v": 2})
    assert p1 == p2 and [p.name for p in (tmp_path / "e").iterdir()] == ["k.json"]
    assert json.loads(p1.read_text())["result"] == {"v": 2}


def test_explode_per_matrix(tiny):
    rk = loaders.load_results(tiny / "results" / "fig4_rank")
    e = loaders.explode_per_matrix(rk, ["relative_error", "optimal_error", "orthogonality"])
    assert len(e) == int(rk["relative_error"].map(len).sum())
    assert e["relative_error"].dtype.kind == "f"


def _asv_fixture(root: Path) -> None:
    (root / "vm").mkdir(parents=True)
    (root / "vm" / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "num_cpu": "2", "machine": "vm",
                                                          "version": 1}))
    (root / "benchmarks.json").write_text(json.dumps({
        "bench_recompress.Sweep.time_run": {"param_names": ["method", "sweep", "value", "mode"], "unit": "seconds"},
        "bench_ablation.Table4.track_peakmem": {"param_names": ["variant"], "unit": "bytes"},
        "version": 2}))
    result = {
        "commit_hash": "abc123", "env_name": "existing-py", "date": 1700000000000, "version": 2,
        "result_columns": ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
                           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat"],
        "results": {
            "bench_recompress.Sweep.time_run": [
                [0.01, 0.02, None, 0.04], [["'fraq'", "'florist'"], ["'r'"], ["16"], ["'batched'", "'unbatched'"]],
                "v", 0, 1.0, [0.009, 0.019, None, 0.039], [0.011, 0.021, None, 0.041],
                [0.0095, 0.0195, None, 0.0395], [0.0105, 0.0205, None, 0.0405], [1, 1, None, 1], [5, 5, None, 5]],
            "bench_ablation.Table4.track_peakmem": [[1024, 2048], [["'adaptive-gram'", "'adaptive-svd'"]], "v", 0, 1.0],
        }}
    (root / "vm" / "abc123-existing-py.json").write_text(json.dumps(result))


def test_asv_loader(tmp_path):
    _asv_fixture(tmp_path)
    df = loaders.load_asv(tmp_path)
    assert len(df) == 6
    t = df[df["benchmark"].str.endswith("time_run")]
    row = t[(t["method"] == "florist") & (t["mode"] == "unbatched")].iloc[0]
    # Sweep's parameter "value" does not overwrite the measurement's column
    assert row["value"] == 0.04 and row["param.value"] == 16 and row["sweep"] == "r"
    assert row["q75"] == 0.0405 and row["kind"] == "time"
    assert t[(t["method"] == "florist") & (t["mode"] == "batched")]["value"].isna().all()  # skipped combination
    assert (df["machine.cpu"] == "Test CPU").all() and (df["commit"] == "abc123").all()
    m = df[df["kind"] == "track"]
    assert list(m["variant"]) == ["adaptive-gram", "adaptive-svd"] and list(m["unit"]) == ["bytes"] * 2


def test_asv_loader_warns_naming_each_unreadable_file(tmp_path):
    _asv_fixture(tmp_path)
    (tmp_path / "vm" / "def456-existing-py.json").write_text("{truncated")
    (tmp_path / "vm" / "0ff1ce-existing-py.json").write_text(json.dumps({"commit_hash": "0ff1ce"}))
    with pytest.warns(UserWarning) as seen:
        df = loaders.load_asv(tmp_path)
    messages = sorted(str(w.message) for w in seen)
    assert len(messages) == 2
    assert str(tmp_path / "vm" / "0ff1ce-existing-py.json") in messages[0] and "not an asv result" in messages[0]
    assert str(tmp_path / "vm" / "def456-existing-py.json") in messages[1] and "not readable" in messages[1]
    assert len(df) == 6 and set(df["commit"]) == {"abc123"}  # the good file still loads


def test_pytest_benchmark_loader(tmp_path):
    rec = {"machine_info": {"node": "vm", "python_version": "3.11.7", "cpu": {"brand_raw": "Test CPU", "count": 2}},
           "commit_info": {"id": "abc123"}, "datetime": "2026-11-22T00:00:00", "version": "5.1.0",
           "benchmarks": [{"name": "test_recompress[fraq]", "fullname": "tests/bench/test_quick.py::test_recompress[fraq]",
                           "group": "recompress", "params": {"method": "fraq"},
                           "stats": {"min": 0.01, "max": 0.02, "mean": 0.015, "stddev": 0.001, "median": 0.014,
                                     "iqr": 0.002, "q1": 0.013, "q3": 0.015, "rounds": 9, "data": [0.01] * 9},
                           "extra_info": {"flops": 1e9, "peak_bytes": 2048, "threads": 1}}]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rec))
    df = loaders.load_pytest_benchmark(path)
    assert len(df) == 1
    r = df.iloc[0]
    assert r["param.method"] == "fraq" and r["median"] == 0.014 and r["extra.flops"] == 1e9
    assert r["machine.cpu"] == "Test CPU" and r["commit"] == "abc123" and "data" not in df


def test_backends_results_draw(tmp_path):
    rows = [dict(exact=b != "newton-schulz-muon", gflop=0.3, gap_to_optimum=g, ms_1t=ms, iqr_ms_1t=1.0)
            for b, g, ms in [("householder", 1e-13, 40.0), ("cholesky-qr2", 2e-13, 35.0),
                             ("newton-schulz-muon", 1e-2, 20.0)]]
    for b, r in zip(["householder", "cholesky-qr2", "newton-schulz-muon"], rows):
        write_result(tmp_path, "backends", f"lora-{b}", dict(mode="quick", section="lora", case="roberta-base",
                                                               backend=b), r)
    b = loaders.load_results(tmp_path, experiment="backends")
    assert len(b) == 3 and (b["case"] == "roberta-base").all()
    style.setup()
    fig = fig_backends(b)
    labels, legend = _axes_text(fig)
    assert "latency, 1 thread (ms)" in labels and {"householder", "cholesky-qr2"} <= set(legend)
    _png_ok(style.save(fig, tmp_path / "f", "backends", style.caption(b))[0])
    from analysis.reproduce import build  # the report's section, from the runner's config (no "mode" key)

    for f in (tmp_path / "backends").glob("*.json"):
        rec = json.loads(f.read_text())
        rec["config"].pop("mode")
        rec["config"]["size"] = "tiny"
        f.write_text(json.dumps(rec))
    (tmp_path / "run" / "results").mkdir(parents=True)
    shutil.move(str(tmp_path / "backends"), str(tmp_path / "run" / "results" / "backends"))
    text = build(tmp_path / "run").read_text()
    assert "figures/fig_backends.png" in text and "fastest backend" in text


def test_fig1_draws_four_or_more_thresholds(tiny, tmp_path):
    """figures.py:48 raised TypeError (zip with None) once there were 4 or more FRAQ taus."""
    style.setup()
    df = loaders.load_results(tiny / "results" / "fig1")
    fraq_rows = df[df["method"] == "fraq"]
    extra = [fraq_rows.assign(tau=t) for t in (0.5, 0.6, 0.7)]  # 3 + 3 thresholds
    d = pd.concat([df, *extra], ignore_index=True)
    fig = fig1_downlink(d)
    _, legend = _axes_text(fig)
    fraq_labels = [x for x in legend if x.startswith("FRAQ")]
    assert len(fraq_labels) == 6
    colors = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    assert len({str(colors[x]) for x in fraq_labels}) == 6  # one colour each


def test_gpu_results_say_gpu_in_the_caption(tmp_path):
    rec = write_result(tmp_path, "e", "k", {"a": 1}, {"v": 1})
    data = json.loads(rec.read_text())
    data["device"] = "cuda:0"
    data["machine"].update(gpu="NVIDIA H100 80GB HBM3", gpu_driver="550.54", cuda="12.4", cusolver=11601)
    rec.write_text(json.dumps(data))
    cap = style.caption(loaders.load_results(tmp_path))
    assert cap.startswith("GPU NVIDIA H100 80GB HBM3 (cuda:0, driver 550.54, CUDA 12.4, cuSOLVER 11601)")
    assert style.caption(loaders.load_results(tmp_path / "e")).startswith("GPU")
    data["device"] = "cpu"
    rec.write_text(json.dumps(data))
    assert style.caption(loaders.load_results(tmp_path)).startswith("CPU; ")


# ----------------------------------------------------------------------------- figures


@pytest.mark.integration  # several seconds: the end-to-end tier
def test_fig3(tiny, tmp_path):
    style.setup()
    df = loaders.load_results(tiny / "results" / "fig3")
    fig = fig3_scalability(df)
    labels, legend = _axes_text(fig)
    assert {"runtime (ms)", "tensor peak memory (MiB)", "counted GFLOP (batched)", "total stacked rank r"} <= set(labels)
    assert any("above the float64 optimum" in label for label in labels)  # fidelity, its own row
    assert {"FRAQ", "FLoRIST", "FlexLoRA", "batched", "unbatched", "float32 eps"} <= set(legend)  # (g)/(h)'s dotted
    # every method has all four metrics at every point of both sweeps
    for _, ax in enumerate(fig.axes):
        assert len(ax.get_lines()) >= 3
    assert all(ax.get_yscale() == "log" for ax in fig.axes)
    _png_ok(style.save(fig, tmp_path, "fig3", style.caption(df))[0])
    assert (tmp_path / "fig3.pdf").stat().st_size > 0


@pytest.mark.integration  # several seconds: the end-to-end tier
def test_fig4(tiny, tmp_path):
    style.setup()
    rk = loaders.load_results(tiny / "results" / "fig4_rank")
    cd = loaders.load_results(tiny / "results" / "fig4_cond")
    fig = fig4_fidelity(rk, cd)
    labels, legend = _axes_text(fig)
    assert "output rank p" in labels and r"measured condition number $\kappa$" in labels
    assert r"$\sin\theta_{\max}$ to the float64 subspaces" in labels  # the first-order panel
    assert {"FRAQ", "FLoRIST", "FlexLoRA", "Optimal", "FRAQ (paper config.)", "QR-QR-SVD"} <= set(legend)
    ax1 = fig.axes[0]
    optimal = [ln for ln in ax1.get_lines() if ln.get_label() == "Optimal"]
    assert optimal and all(optimal[0].get_zorder() > ln.get_zorder() for ln in ax1.get_lines() if ln is not optimal[0])
    full = set(fig4_summary(rk).query("optimum <= 1e-15")["p"])
    for ln in ax1.get_lines():  # no drawn segment reaches a rank with nothing to truncate
        if ln.get_linestyle() not in ("None", "none", "") and ln.get_label() != "Optimal":
            assert not set(ln.get_xdata()) & full, ln.get_label()
    _png_ok(style.save(fig, tmp_path, "fig4", style.caption(rk))[0])
    s = fig4_summary(rk)
    assert ((s["p10"] <= s["mean"] * (1 + 1e-12)) & (s["mean"] <= s["p90"] * (1 + 1e-12))).all()


def test_fig1(tiny, tmp_path):
    style.setup()
    df = loaders.load_results(tiny / "results" / "fig1")
    fig = fig1_downlink(df)
    labels, legend = _axes_text(fig)
    assert "downlink per client (M parameters)" in labels and "number of clients K" in labels
    assert {"FLoRA (exact stack)", "FRAQ, 80% energy", "FRAQ, 95% energy"} <= set(legend)
    _png_ok(style.save(fig, tmp_path, "fig1", style.caption(df))[0])
    flora = df[df["method"] == "flora"].set_index(["clients", "client_rank"])["downlink_params_full"]
    fraq_ = df[df["method"] == "fraq"].set_index(["clients", "client_rank"])["downlink_params_full"]
    assert (fraq_ <= flora.reindex(fraq_.index)).all()  # recompression never sends more than the stack


def test_caption_has_machine_dtype_threads_versions(tiny):
    df = loaders.load_results(tiny / "results" / "table4")
    cap = style.caption(df)
    for part in ("CPU; ", str(df["machine.cpu"].iloc[0]), "float32", f"{run.THREADS} torch thread(s)", "torch 2."):
        assert part in cap


def test_tables(tiny):
    from benchmarks.measure.methods import default_backend

    t4 = table4_ablation(loaders.load_results(tiny / "results" / "table4"))
    assert list(t4["Variant"])[:3] == ["Adaptive + Gram", "Fixed + Gram", "Adaptive + coordinate SVD"]
    # the paper's columns come from the one data file of the paper's numbers
    paper = loaders.paper()["table4"]
    ms, mib = paper["fixed-gram"]
    base_ms, base_mib = paper["adaptive-gram"]
    row = t4.set_index("Variant").loc["Fixed + Gram"]
    assert row["Paper ms (x)"] == f"{ms:.2f} ({ms / base_ms:.2f})"
    assert row["Paper MiB (x)"] == f"{mib:.2f} ({mib / base_mib:.2f})"
    assert t4.set_index("Variant").loc["fraq.recompress (library)", "Paper ms (x)"] == ""
    t5 = table5_flops(loaders.load_results(tiny / "results" / "fig3"))
    assert (t5["counted GFLOP"] > 0).all() and set(t5["Method"]) == {
        "FRAQ", "FLoRIST", "FLoRIST (kernel=qr)", "FlexLoRA", "FlexLoRA (kernel=fraq)", "FlexLoRA (kernel=rsvd)"}
    # the kernels at their best are counted as they run, term for term: FlexLoRA on FRAQ's kernel as
    # fraq.svd (fraq.flops.kernel_svd_flops, Householder: the CPU's default), on rsvd as torch.svd_lowrank
    # (fraq.flops.rsvd_dense_flops), FLoRIST on the QR kernel (fraq.flops.florist_qr_flops)
    kernel_rows = t5[t5["Method"].str.contains("kernel=")]
    assert kernel_rows["counted / model"].tolist() == pytest.approx([1.0] * len(kernel_rows), rel=1e-4)
    # FRAQ's code model counts the backend that ran (recompress's default on this device), so it
    # equals the count term for term (tests/test_measure.py), up to the counter rounding each
    # call to whole FLOPs (Cholesky's n^3 / 3: < 1e-5 here). A wrong backend is off by its r^3
    # terms: 2.5-8% at these sizes.
    fraq_rows = t5[t5["Method"] == "FRAQ"]
    assert set(fraq_rows["backend"]) == {default_backend("cpu")}
    assert fraq_rows["counted / model"].tolist() == pytest.approx([1.0] * len(fraq_rows), rel=1e-4)
    md = tables.markdown(t5)
    assert md.count("\n") == len(t5) + 1


@pytest.mark.parametrize("dims", [[256, 512, 768, 1024, 2048, 4096], [32, 64], [256, 512, 768, 1536, 3072]])
def test_fig3_tick_labels_do_not_overlap(tiny, dims):
    """The d axis at the paper's sizes printed "7681024" once (768 and 1024 in one blur): no two tick labels of
    any panel may overlap, at the paper's, the reduced and the tiny d."""
    style.setup()
    df = loaders.load_results(tiny / "results" / "fig3")
    base = df[df["sweep"] == "d"]
    base = base[base["d"] == base["d"].min()]
    d = pd.concat([df[df["sweep"] == "r"]] + [base.assign(d=x, D=x) for x in dims], ignore_index=True)
    fig = fig3_scalability(d)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        for a, b in zip(boxes, boxes[1:]):
            assert not a.overlaps(b), (ax.get_title(), [t.get_text() for t in ax.get_xticklabels()])


@pytest.mark.integration
def test_report_from_files(tiny):
    from analysis.reproduce import build

    report = build(tiny)
    text = report.read_text()
    for name in ("fig1_downlink", "fig3_scalability", "fig4_fidelity"):
        assert f"figures/{name}.png" in text
        _png_ok(tiny / "figures" / f"{name}.png")
    assert "## Table 4" in text and "## Table 5" in text and "**agrees**" in text
    import re

    assert not re.search(r"At d = \d+\.0\b", text), re.search(r"At d = \S+", text)
    t5 = text.split("## Table 5")[1].split("\n## ")[0]
    for line in t5.splitlines():
        if line.startswith("| ") and not line.startswith("| sweep"):
            assert not re.search(r"\| \d+\.0 \| \d+\.0 \|", line), line  # d = D | r as integers
    steps = text.split("### Table 4 per step")[1].split("\n## ")[0]
    assert all(f"| {s} |" in steps for s in ("qr", "coordinates", "gram", "eigh", "project", "basis", "sum"))
    precision = text.split("### FlexLoRA's float32 error")[1].split("\n## ")[0]
    assert "| TF32 inputs, float32 GEMM |" in precision and "FlexLoRA as implemented here is at most" in precision
    assert "central 95%" in text  # how the intervals are computed, said once
    assert "target" not in text.lower()  # the project's own targets stay out of the paper report


@pytest.mark.integration
def test_a_report_section_is_a_module_and_a_line(tiny, tmp_path, monkeypatch):
    """A module with ``reads`` and ``draw`` and one line in the registry put a section in the report,
    in the registry's order; a section with some of its experiments missing, or whose drawing fails, is
    named under *Not measured or skipped* and counted in the console's one line."""
    import types

    from analysis import reproduce
    from analysis.sections import Section

    for name in reproduce.SECTIONS:
        mod = reproduce.section_module(name)
        assert isinstance(mod.reads, tuple) and all(isinstance(e, str) for e in mod.reads), name
        assert callable(mod.draw) and (mod.reads or name == "gpu"), name  # only the GPU results read nothing
    extra = types.ModuleType("analysis.sections.extra_for_test")
    extra.reads = ("table4",)
    extra.draw = lambda res: [Section("Extra: the ablation's variants", f"{len(res['table4'])} variants")]
    monkeypatch.setitem(sys.modules, extra.__name__, extra)
    monkeypatch.setitem(reproduce.SECTIONS, "extra", "extra_for_test")
    out = _copy(tiny, tmp_path)
    shutil.rmtree(out / "results" / "fig4_cond")
    built = reproduce.build_report(out)
    text = built.report.read_text()
    assert re.search(r"section 'fig4' not drawn: .*fig4_cond has no results", text.split("## Not measured")[1])
    assert "not drawn: 1 section" in built.summary()
    variants = len(list((out / "results" / "table4").glob("*.json")))
    assert f"## Extra: the ablation's variants\n\n{variants} variants\n" in text
    assert text.index("## Extra") > text.index("## Figure 1")  # registered last, drawn last
    assert "## Figure 4" not in text and "## Figure 3" in text
    assert "section 'fig4' not drawn" in text.split("## Not measured or skipped")[1]
    broken = types.ModuleType("analysis.sections.broken_for_test")
    broken.reads = ("table4",)
    broken.draw = lambda res: 1 / 0
    monkeypatch.setitem(sys.modules, broken.__name__, broken)
    monkeypatch.setitem(reproduce.SECTIONS, "broken", "broken_for_test")
    built = reproduce.build_report(out)
    text = built.report.read_text()
    assert "section 'broken' not drawn: ZeroDivisionError" in text.split("## Not measured")[1]
    assert "not drawn: 2 sections" in built.summary()
    assert "## Extra: the ablation's variants" in text and "## Figure 3" in text  # the others still drawn
    with pytest.raises(ValueError, match=r"section\(='nope'\) is not one of tables123"):
        reproduce.section_module("nope")


# ----------------------------------------------------------------------------- what the report refuses


def _copy(tiny: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(tiny / "results", out / "results")
    return out


def _edit(path: Path, fn) -> None:
    rec = json.loads(path.read_text())
    fn(rec)
    path.write_text(json.dumps(rec))


@pytest.mark.integration
def test_no_verdict_over_a_nan_point(tiny, tmp_path, capsys):
    """A NaN error at kappa = 1e10 is named in the report, beside the verdict and under *Not
    measured*, counted in the console's one line, and no verdict spans it."""
    from analysis.reproduce import main

    out = _copy(tiny, tmp_path)
    _edit(out / "results" / "fig4_cond" / "fraq-k1e+10.json",
          lambda r: r["result"].update(relative_error=[math.nan] * len(r["result"]["relative_error"])))
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        assert main(["--out", str(out), "--no-pdf"]) == 0
    assert not [w for w in issued if issubclass(w.category, UserWarning)]  # none on the console: one line instead
    printed = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"not measured: \d+ verdicts?(; .*)? \(listed in .*report\.md, under 'Not measured or "
                        r"skipped'\)", printed[-1]), printed
    text = (out / "report.md").read_text()
    line = next(x for x in text.splitlines() if "FRAQ stays near 1e-7" in x)
    assert "**no verdict**" in line and "kappa=1e+10" in line and "**agrees**" not in line
    assert "## Not measured or skipped" in text and "kappa=1e+10 (NaN or inf)" in text.split("## Not measured")[1]


def test_mixed_configurations_are_refused_naming_them(tiny, tmp_path, capsys):
    """A tiny and a reduced run in one directory: refused, each configuration named with its file count."""
    from analysis.reproduce import main

    out = _copy(tiny, tmp_path)
    for f in list((out / "results" / "fig4_rank").glob("*.json")):
        other = f.with_name("llama-" + f.name)
        shutil.copy(f, other)
        _edit(other, lambda r: (r["config"].update(size="reduced", preset="llama-3.2-3b"),
                                r.update(key="llama-" + r["key"])))
    n = len(list((out / "results" / "fig4_rank").glob("llama-*.json")))
    with pytest.raises(analysis.MixedResults, match=f"size: .*tiny .*reduced \\({n} files\\)"):
        analysis.load(out / "results")
    assert main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "preset (fig4_rank)" in err and "llama-3.2-3b" in err and "roberta-base" in err
    assert not (out / "report.md").exists()
    kept = analysis.load(out / "results", select={"size": "tiny"})  # or keep one
    assert set(kept["fig4_rank"]["preset"]) == {"roberta-base"}


@pytest.mark.integration
def test_malformed_and_old_format_files_are_named_and_skipped(tiny, tmp_path):
    from analysis.reproduce import build_report

    out = _copy(tiny, tmp_path)
    res = out / "results"
    broken = res / "fig3" / "r-fraq-batched-d64-r8.json"
    _edit(broken, lambda r: r.update(result=[1, 2]))  # not an object: today a traceback without the file
    no_timing = res / "fig3" / "d-fraq-batched-d32-r16.json"
    _edit(no_timing, lambda r: r["result"].pop("timing"))
    old = res / "table4" / "library.json"
    _edit(old, lambda r: [r.pop(k) for k in ("key", "versions")])
    built = build_report(out)
    text = built.report.read_text()
    messages = [str(n) for n in built.notes]
    for path, why in ((broken, "malformed result file"), (no_timing, "no timing.median, timing.samples"),
                      (old, "older result format (no key, versions)")):
        assert any(str(path) in m and why in m for m in messages), (path, messages)
        assert str(path) in text
    assert "skipped: 3 files" in built.summary()
    assert "## Figure 3" in text  # the rest is still drawn
    fastest = next(x for x in text.splitlines() if "FRAQ is the fastest method" in x)
    assert "**no verdict**" in fastest and "d=32 batched FRAQ (no result)" in fastest  # a skipped point is missing


def test_empty_results_directory_is_an_error_that_says_what_to_run(tmp_path, capsys):
    from analysis.reproduce import main

    (tmp_path / "results").mkdir()
    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no result files under" in err and "make run" in err and "benchmarks.run" in err
    assert not (tmp_path / "report.md").exists()
    with pytest.raises(analysis.NoResults, match="make run"):
        analysis.load(tmp_path / "results")


def test_results_of_several_commits_are_named(tiny, tmp_path):
    out = _copy(tiny, tmp_path)
    _edit(out / "results" / "table4" / "library.json", lambda r: r.update(git_sha="0123456789abcdef"))
    with pytest.warns(UserWarning, match=r"2 commits: .*0123456789 \(1 files\)"):
        analysis.load(out / "results")


def test_default_results_dir_is_found_from_a_subdirectory(tmp_path, monkeypatch):
    from analysis.resultset import default_dir

    monkeypatch.delenv("FRAQ_RESULTS", raising=False)
    (tmp_path / "results" / "reproduce" / "results").mkdir(parents=True)
    (tmp_path / "analysis" / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "analysis" / "notebooks")
    assert default_dir() == tmp_path / "results" / "reproduce" / "results"
    monkeypatch.setenv("FRAQ_RESULTS", str(tmp_path / "x"))
    assert default_dir() == tmp_path / "x"
    monkeypatch.delenv("FRAQ_RESULTS")
    monkeypatch.chdir(tmp_path.parent)  # nothing here or above: say where it looked and what to run
    with pytest.raises(analysis.NoResults, match=f"no results/reproduce/results in {tmp_path.parent} or any parent: "
                                                 "run `make run` in the repository root"):
        analysis.load()


# ----------------------------------------------------------------------------- figure defects


@pytest.mark.integration
def test_fig3_panel_labels_are_distinct(tiny):
    style.setup()
    fig = fig3_scalability(loaders.load_results(tiny / "results" / "fig3"))
    labels = [ax.get_title().split(")")[0] + ")" for ax in fig.axes]
    assert labels == ["(a)", "(b)", "(c)", "(d)", "(e)", "(f)", "(g)", "(h)"]


@pytest.mark.integration
def test_figure_legends_cover_no_panel_title(tiny, tmp_path):
    """fig_backends' legend (two rows) used to sit over its panels' titles."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = [dict(exact=True, gflop=0.3, gap_to_optimum=1e-13 * (i + 1), ms_1t=10.0 + i, iqr_ms_1t=1.0)
            for i in range(8)]
    for i, r in enumerate(rows):
        for case in ("roberta-base", "llama-3.2-3b"):
            write_result(tmp_path / "b", "backends", f"{case}-{i}", dict(mode="quick", section="lora", case=case,
                                                                         backend=f"backend-{i}"), r)
    style.setup()
    drawn = [fig_backends(loaders.load_results(tmp_path / "b")),
             fig3_scalability(loaders.load_results(tiny / "results" / "fig3"))]
    for fig in drawn:
        style.save(fig, tmp_path, "f", "caption")
        canvas = FigureCanvasAgg(fig)  # save closed the figure; draw it again as it was saved
        canvas.draw()
        renderer = canvas.get_renderer()
        legend = fig.legends[0].get_window_extent(renderer)
        titles = [(ax.get_title(), ax.title.get_window_extent(renderer)) for ax in fig.axes]
        for name, title in titles:
            assert not legend.overlaps(title), name
            assert not any(title.overlaps(other) for n, other in titles if n != name), name  # nor each other


# ----------------------------------------------------------------------------- notebooks


NOTEBOOKS = sorted((ROOT / "analysis" / "notebooks").glob("*.ipynb"))


def test_analysis_is_installed_with_the_package():
    """A notebook finds `analysis` because `pip install -e .` installs it (no path to set)."""
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert "analysis*" in found["include"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import analysis; print(analysis.load.__module__)"],
                          cwd=ROOT / "analysis" / "notebooks", env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "analysis.resultset" in done.stdout, done.stderr


def text_overlaps(fig, min_px: float = 1.0) -> list[list[str]]:
    """Pairs of texts drawn on ``fig`` (titles, axis and tick labels, legend entries, ...)
    whose boxes overlap by more than ``min_px`` pixels both ways, drawn as a display draws
    it (the layout engine runs). Only texts actually drawn count: a tick label outside the
    view or a hidden one is not."""
    from matplotlib.text import Text

    drawn, draw = [], Text.draw

    def record(self, renderer):
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self.get_text(), self.get_window_extent(renderer)))

    Text.draw = record
    try:
        fig.canvas.draw()
    finally:
        Text.draw = draw
    out = []
    for i, (a, box_a) in enumerate(drawn):
        for b, box_b in drawn[i + 1:]:
            w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if w > min_px and h > min_px:
                out.append([a, b])
    return out


# The inline backend closes a figure once shown; kept open, a last cell draws each one as
# its display did and reports the texts that overlap.
_KEEP_FIGURES = "%config InlineBackend.close_figures = False"
_REPORT_OVERLAPS = (inspect.getsource(text_overlaps) + """
import json as _json
import matplotlib.pyplot as _plt
print("OVERLAPS" + _json.dumps([[n, *o] for n in _plt.get_fignums() for o in text_overlaps(_plt.figure(n))]))
""")


def _execute(path: Path, cwd: Path, results: Path, overlaps: list | None = None, frames: list | None = None):
    """Run a notebook as Jupyter does; its displayed figures' PNG outputs, in ``overlaps``
    (if given) every pair of overlapping texts in its figures as displayed, and in ``frames``
    (if given) the plain text of every table it displays."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_KEEP_FIGURES))
    nb.cells.append(nbformat.v4.new_code_cell(_REPORT_OVERLAPS))
    # the kernel imports this checkout's analysis (an editable install of another checkout
    # would shadow it; test_analysis_is_installed_with_the_package checks a user needs no path),
    # and gets matplotlib's inline backend as in Jupyter (no MPLBACKEND from the test run)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(FRAQ_RESULTS=str(results), PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    outputs = [o for c in nb.cells[1:-1] if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs + nb.cells[-1].outputs if o.get("output_type") == "error"]
    assert not errors, (path.name, errors)
    if overlaps is not None:
        report = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
        overlaps += json.loads(report.split("OVERLAPS", 1)[1])
    if frames is not None:
        frames += [o["data"]["text/plain"] for o in outputs if "text/html" in o.get("data", {})]
    return [o for o in outputs if "image/png" in o.get("data", {})]


def _with_backends(tiny: Path, tmp_path: Path) -> Path:
    """The tiny results and backends rows of a narrow latency range on one panel (measuring
    the backends takes minutes), so explore_results draws its backends figure too."""
    out = _copy(tiny, tmp_path)
    for i in range(6):
        for case, ms in (("roberta-base", 60.0 * 1.3**i), ("llama-3.2-3b", 210.0 + 70 * i)):
            write_result(out / "results", "backends", f"{case}-{i}",
                         dict(mode="quick", section="lora", case=case, backend=f"backend-{i}", size="tiny"),
                         dict(exact=True, gflop=0.3, gap_to_optimum=1e-13 * (i + 1), ms_1t=ms, iqr_ms_1t=1.0))
    return out


@pytest.mark.integration
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_from_its_directory_and_shows_figures(tiny, tmp_path, path):
    """Every notebook runs from its directory, shows figures, and no text of a figure as
    displayed inline overlaps another (a panel title and the x label above it, a y label
    and the neighbouring panel, crowded tick labels)."""
    overlaps, frames = [], []
    images = _execute(path, path.parent, _with_backends(tiny, tmp_path) / "results", overlaps, frames)
    assert images, f"{path.name} displayed no figure"
    assert not overlaps, f"{path.name}: overlapping texts (figure, text, text): {overlaps}"
    for text in frames:  # a parameter in a header as an integer (no "clients 2.0"), no column of NaN alone
        heads = [t for line in text.splitlines() for t in line.split()[:2]]
        assert not [t for t in heads if re.fullmatch(r"\d+\.0", t)], text
        assert "NaN  NaN" not in text, text
    for text in frames:  # one notation per column: e-notation in all of a column's cells or none
        for block in re.split(r"\n\s*\n", text):  # a wide frame prints in blocks of columns
            rows = [line.split() for line in block.splitlines()[1:] if line.strip()]
            for col in zip(*[r[-3:] for r in rows if len(r) >= 3 and re.fullmatch(r"[-\d.e+]+", r[-1])]):
                numbers = [v for v in col if v != "0" and re.fullmatch(r"-?[\d.]+(e[-+]\d+)?", v)]  # not "reference"
                sci = [bool(re.fullmatch(r"-?\d\.\d+e[-+]\d+", v)) for v in numbers]
                assert all(sci) or not any(sci), (path.name, col)


@pytest.mark.integration
def test_notebook_runs_from_the_root(tiny):
    assert _execute(ROOT / "analysis" / "notebooks" / "explore_results.ipynb", ROOT, tiny / "results")


@pytest.mark.integration
def test_figure_text_overlaps_are_found(tiny):
    """The overlap check finds what it looks for: Fig. 3 drawn without a layout engine has
    its panel titles over the x labels of the panels above."""
    import matplotlib

    style.setup()
    with matplotlib.rc_context({"figure.constrained_layout.use": False}):
        fig = fig3_scalability(loaders.load_results(tiny / "results" / "fig3"))
    found = text_overlaps(fig)
    assert any(b.startswith("(c)") for _, b in found), found
    fig.set_layout_engine("constrained")
    assert text_overlaps(fig) == []


@pytest.mark.slow
def test_jupyter_lab_serves_the_notebooks(tmp_path):
    """The analysis extra's front end: ``jupyter lab analysis/notebooks`` from the root starts
    a server rooted there that lists the three notebooks and has a Python kernel to run them."""
    import socket
    import time
    import urllib.error
    import urllib.request

    pytest.importorskip("jupyterlab", reason="jupyterlab (the analysis extra) is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    cmd = [sys.executable, "-m", "jupyterlab", "analysis/notebooks", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", "--IdentityProvider.token=fraq-test"] + (["--allow-root"] if os.geteuid() == 0 else [])
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path: str):
        url = f"http://127.0.0.1:{port}/{path}{'&' if '?' in path else '?'}token=fraq-test"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()

    try:
        for _ in range(240):
            try:
                listing = json.loads(get("api/contents"))
                break
            except urllib.error.HTTPError:
                raise
            except OSError:  # not listening yet
                assert server.poll() is None, f"jupyter lab exited with {server.returncode}"
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not answer in 120 s")
        assert {c["name"] for c in listing["content"]} >= {p.name for p in NOTEBOOKS}
        assert "python3" in json.loads(get("api/kernelspecs"))["kernelspecs"]
        assert b"JupyterLab" in get("lab")
    finally:
        server.terminate()
        server.wait(30)


def test_one_notebook_per_question():
    assert {p.stem for p in NOTEBOOKS} == {"explore_results", "fraq_vs_baselines", "fidelity"}


@pytest.mark.integration
@pytest.mark.parametrize("where, field, value, why", [  # each builds the whole report: one in the default run
    ("result", "timing", {"median": "fast", "samples": [1.0]}, "is not a number"),
    pytest.param("result", "peak_bytes", [None], "is not a number", marks=pytest.mark.slow),
    pytest.param("config", "mode", 3, "is not a name", marks=pytest.mark.slow),
    pytest.param("config", "d", "big", "is not a number", marks=pytest.mark.slow),
    pytest.param("result", "timing", {"median": 1.0, "samples": ["a"]}, "is not a", marks=pytest.mark.slow),
    pytest.param("", "versions", "new", "versions not a JSON object", marks=pytest.mark.slow)])
def test_a_damaged_field_is_named_and_the_file_skipped(tiny, tmp_path, where, field, value, why):
    """A field of the wrong type (a string where the median belongs, a list of nothing
    measured, a number where a name belongs, versions that are not an object): the file is
    skipped, named, like a missing field, and the rest is drawn."""
    from analysis.reproduce import build_report

    out = _copy(tiny, tmp_path)
    damaged = out / "results" / "fig3" / "d-fraq-batched-d32-r16.json"
    _edit(damaged, lambda r: (r[where] if where else r).update({field: value}))
    built = build_report(out)
    text = built.report.read_text()
    named = [str(n) for n in built.notes if str(damaged) in str(n)]
    assert named and "malformed" in named[0] and why in named[0], named
    assert "## Figure 3" in text


@pytest.mark.parametrize("where", ["", "figures"])
def test_an_unwritable_out_is_one_line_before_drawing(tmp_path, monkeypatch, capsys, where):
    """A read-only --out (or its figures/): one line naming it, status 2, nothing loaded or drawn."""
    import os

    import analysis.reproduce as reproduce

    (tmp_path / "results").mkdir()
    (tmp_path / "figures").mkdir()
    locked = tmp_path / where if where else tmp_path
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: Path(p) != locked and real(p, mode, **k))
    monkeypatch.setattr(reproduce, "build_report", lambda *a, **k: pytest.fail("drew on an unwritable --out"))
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        assert reproduce.main(["--out", str(tmp_path)]) == 2
    assert issued == []
    assert capsys.readouterr().err == (f"error: --out(={str(tmp_path)!r}): directory {locked} is not writable "
                                       f"(figures/ and report.md are written there)\n")


def test_an_out_that_is_a_file_is_one_line(tmp_path, capsys):
    from analysis.reproduce import main

    (tmp_path / "figures").write_text("not a folder")
    assert main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: --out(={str(tmp_path)!r}): {tmp_path / 'figures'} is not a "
                                       f"directory (figures/ and report.md are written there)\n")


@pytest.mark.integration
def test_report_write_failure_is_one_line_naming_the_file(tiny, tmp_path, monkeypatch, capsys):
    """A read-only or full output: one line naming the file, status 1, no traceback."""
    import errno

    from analysis.reproduce import main

    out = _copy(tiny, tmp_path)
    (out / "report.md").write_text("the old report")
    real = Path.write_text

    def write_text(self, *a, **k):  # the report is written beside its target, then renamed into place
        if self.name.startswith(".report.md.tmp-"):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", write_text)
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        assert main(["--out", str(out)]) == 1
    assert [str(w.message) for w in issued] == []  # the one line alone: no notes of a report not written
    err = capsys.readouterr().err
    assert err == f"error: cannot write {out / 'report.md'}: Read-only file system\n"
    assert (out / "report.md").read_text() == "the old report"
    assert not list(out.glob(".report.md.tmp-*"))


def test_runner_write_failure_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    import errno

    def full(out, experiment, key, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(out) / experiment / f"{key}.json"))

    monkeypatch.setattr("benchmarks.results.write_result", full)
    assert run.main(["fig1", "--size", "tiny", "--out", str(tmp_path / "res"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: cannot write {tmp_path / 'res' / 'fig1'}")
    assert "No space left on device" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- integers print as integers

def test_num_prints_integral_parameters_as_integers():
    assert [style.num(v) for v in (256.0, 256, 16.0, 0.95, 1e-6, float("nan"), "x")] == \
        ["256", "256", "16", "0.95", "1e-06", "nan", "x"]


def test_table5_integer_columns_print_as_integers():
    rows = [dict(mode="batched", backend="householder", sweep="d", d=768.0, r=16.0, p=8.0, modules=2.0, method="fraq",
                 analytic_flops_table5=1e9, analytic_flops_full=1e9, counted_flops=1e9, **{"timing.median": 0.01}),
            dict(mode="batched", backend="householder", sweep="r", d=256.0, r=8.0, p=float("nan"), modules=2.0, method="florist",
                 analytic_flops_table5=2e9, analytic_flops_full=2e9, counted_flops=2e9, **{"timing.median": 0.02})]
    t5 = table5_flops(pd.DataFrame(rows))
    text = tables.markdown(t5)
    assert "| 768 | 16 | 8 | 2 |" in text and "| 256 | 8 | - | 2 |" in text, text
    assert "768.0" not in text and "16.0 " not in text and "<NA>" not in text


def _t5_row(method, flops, *, d=768.0, r=16.0, **extra):
    return dict(mode="batched", backend="householder", sweep="r", d=d, r=r, p=8.0, modules=2.0, method=method,
                analytic_flops_table5=flops, analytic_flops_full=flops, counted_flops=flops,
                **{"timing.median": 0.01}, **extra)


def _t5_claim(rows) -> str:
    from analysis.sections.fig3 import table5_lines

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        return next(x for x in table5_lines(table5_flops(pd.DataFrame(rows))) if "Table 5" in x)


def test_table5_order_claim_judges_only_points_where_fraq_ran_beside_another_method():
    """"FRAQ the fewest FLOPs, FlexLoRA the most": FRAQ alone (a GPU call's one point)
    judges nothing; FlexLoRA not the most, or FRAQ not the fewest, disagrees."""
    assert "no verdict" in _t5_claim([_t5_row("fraq", 1e9)])
    assert "no verdict" in _t5_claim([_t5_row("fraq", 1e9), _t5_row("florist", 2e9)])  # the dense path never ran
    assert "**agrees**" in _t5_claim([_t5_row("fraq", 1e9), _t5_row("florist", 2e9), _t5_row("flexlora", 5e9),
                                      _t5_row("flexlora", 9e9, r=32.0)])  # FlexLoRA alone at r = 32: not judged
    assert "**disagrees**" in _t5_claim([_t5_row("fraq", 1e9), _t5_row("florist", 6e9), _t5_row("flexlora", 5e9)])
    assert "**disagrees**" in _t5_claim([_t5_row("fraq", 3e9), _t5_row("florist", 2e9), _t5_row("flexlora", 5e9)])
    # a column no result fills (Table 5's formulas on a GPU backend: NaN everywhere) is not loaded: drawn as absent
    rows = [{k: v for k, v in _t5_row("fraq", 1e9).items() if k != "analytic_flops_table5"}]
    assert table5_flops(pd.DataFrame(rows))["Table 5 GFLOP"].isna().all()


def test_fig1_ticks_titles_and_table_are_integers(tiny):
    """Loaded with the other experiments, Fig. 1's parameters are float columns (NaN in the
    other experiments' rows): the ticks, titles and table print them as integers, and the
    table has a column per line of the figure, none empty."""
    style.setup()
    f1 = analysis.load(tiny / "results")["fig1"]
    assert f1["clients"].dtype.kind == "i" and f1["client_rank"].dtype.kind == "i"
    for df in (f1, f1.astype({"clients": float, "client_rank": float})):
        fig = fig1_downlink(df)
        ticks = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels()]
        assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks
        assert not any(".0" in ax.get_title() for ax in fig.axes), [ax.get_title() for ax in fig.axes]
        t = fig1_table(df)
        assert list(t.columns) == ["FLoRA (exact stack)", *(f"FRAQ, {p}% energy" for p in (80, 90, 95))]
        assert t.notna().all().all() and list(t.index.names) == ["clients", "local rank"]
        assert ".0" not in t.to_string()


def test_formatted_prints_one_notation_per_column_and_integer_labels():
    df = pd.DataFrame({"err": [0.8, 1e-6, 0.0], "ms": [0.5, 12.25, 3.0], "n": [2.0, 4.0, float("nan")]},
                      index=pd.Index([2.0, 8.0, 1e10], name="p"))
    out = style.formatted(df)
    assert list(out["err"]) == ["8.00e-01", "1.00e-06", "0"]
    assert list(out["ms"]) == ["0.50", "12.25", "3.00"] and list(out["n"]) == ["2", "4", ""]
    assert list(out.index) == ["2", "8", "1e+10"] and out.index.name == "p"


def test_markdown_prints_one_notation_per_column():
    md = tables.markdown(pd.DataFrame({"Downlink %": [5.0, 100.0, float("nan")], "err": [1e-6, 0.5, 2.0]}))
    rows = [line.split(" | ") for line in md.splitlines()[2:]]
    assert [r[0].strip("| ") for r in rows] == ["5", "100", "-"]
    assert [r[1].strip("| ") for r in rows] == ["1.00e-06", "5.00e-01", "2.00e+00"]


def test_a_result_without_a_commit_is_captioned_with_its_version(tmp_path):
    """A run from a source archive (no git) records no commit: the caption names fraq's version."""
    import fraq

    rec = write_result(tmp_path, "e", "k", {"a": 1}, {"v": 1})
    data = json.loads(rec.read_text())
    data["git_sha"] = data["machine"]["git_sha"] = None
    rec.write_text(json.dumps(data))
    cap = style.caption(loaders.load_results(tmp_path))
    assert "fraq ?" not in cap and f"fraq {fraq.__version__} (no git commit recorded)" in cap, cap


def test_the_analysis_reads_a_method_by_the_one_grammar_without_torch():
    """``analysis.style.method_parts`` reads a method by :class:`fraq.methods.MethodSpec` (blanks around the
    separators dropped, as the grammar prints it), keeps a name the analysis holds whole, splits text the
    grammar refuses at its first ':', and imports no torch, in a fresh interpreter."""
    import subprocess
    import sys

    from analysis.style import method_parts

    assert method_parts("fraq:tau=0.95") == ("fraq", "tau=0.95")
    assert method_parts("fraq : backend=cholesky , tau=0.9") == ("fraq", "backend=cholesky,tau=0.9")
    assert method_parts("fraq:cholesky") == ("fraq", "cholesky")  # refused by the grammar: kept as written
    assert method_parts("flora") == ("flora", "") and method_parts("outside-core") == ("outside-core", "")
    code = "import sys; from analysis.style import method_parts; method_parts('fraq:tau=0.8'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_table5_says_whose_kernels_the_size_left_untimed():
    """Table 5's caption names the methods whose roofline is measured when some rows have none
    (the runner's default size times FRAQ's kernels only), and says nothing when all have one."""
    from analysis.sections.fig3 import OWN_TIME, _roofs_left_out

    t5 = pd.DataFrame({"Method": ["FRAQ", "FLoRIST", "FRAQ"], OWN_TIME: [2.5, float("nan"), 2.9]})
    text = _roofs_left_out(t5)
    assert "FRAQ's only" in text and "--size paper" in text and "FLoRIST" not in text
    assert _roofs_left_out(t5.assign(**{OWN_TIME: 1.0})) == ""
