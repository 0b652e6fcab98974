"""The ``pipeline`` experiment and its report section.

The experiment: its points at every size (one per preset and method, a preset's methods one
paired group); a tiny measurement on the CPU whose results carry paired samples of every
method, FRAQ's ranks equal to the energy rule applied to float64 singular values of the exact
aggregate (so every pipeline agrees with it and with the others), with the CPU's default basis
and with CUDA's (where the static pass runs). The section: its verdicts drawn from synthetic
result files, on a "cuda" device where reads='call' beats 'group' and on a CPU, and one line
where nothing was measured.

Bound on the ranks: a module's rank is the smallest k whose leading k squared singular values
hold tau of the energy. FRAQ's float32 energies differ from float64's by at most about
r * eps32 of the total (a Gram eigenproblem of an r x r matrix, r = 80 here), so ranks are
compared only where the float64 cumulative energy at the cut is more than 1e-4 of the total
from tau (well past 80 * eps32 = 1e-5); every module of the tiny preset is that far.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from benchmarks.experiments import pipeline
from benchmarks.sizes import SIZES

TAU = 0.95
MARGIN = 1e-4


@pytest.mark.parametrize("size", sorted(SIZES))
def test_points_are_one_per_preset_and_method_in_one_group(size):
    from analysis.verdicts import MIN_ROUNDS

    cfg = SIZES[size]["pipeline"]
    points = pipeline.points(size)
    keys = [pipeline.key(c) for c in points]
    assert len(keys) == len(set(keys)) == len(cfg["presets"]) * len(pipeline.METHODS)
    for preset in cfg["presets"]:
        mine = [c for c in points if c["preset"] == preset]
        assert [c["row"] for c in mine] == [m.key for m in pipeline.METHODS]
        assert [c["method"] for c in mine] == [m.spec for m in pipeline.METHODS]
        assert len({json.dumps(pipeline.group(c), sort_keys=True) for c in mine}) == 1  # one paired group
        assert all(c["layers"] == cfg["layers"].get(preset) and c["rounds"] >= MIN_ROUNDS for c in mine)
    if size in ("paper", "gpu"):
        assert all(c["layers"] is None for c in points)  # whole models: a device's default is set from them
    assert all(pipeline.cost(c) > pipeline.timing_cost(c) > 0 for c in points)
    from benchmarks.experiments import cuda_graphs

    assert [c["preset"] for c in cuda_graphs.points(size)] == cfg["presets"]


@pytest.mark.parametrize("kw,named", [(dict(methods=["stepwise", "nope"]), "nope"), (dict(methods=[]), "methods"),
                                      (dict(presets=["no-such"]), "no-such"), (dict(rounds=0), "rounds(=0)"),
                                      (dict(layers=0), "layers(=0)")])
def test_bad_options_are_named(kw, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        pipeline.configs("tiny", **kw)


def _float64_ranks(model, tau: float) -> dict[str, tuple[int, float]]:
    """Per module, the energy rule's rank on the float64 singular values of the exact weighted
    aggregate sum_k w_k / sum(w) * scale_k * B_k A_k, and how far the cumulative energy at the
    cut is from tau (the smaller of the two sides), as a share of the total."""
    w = np.asarray(model.weights, dtype=float) / sum(model.weights)
    out = {}
    for name in model.shapes:
        Bs, As = model.factors[name]
        M = sum(w[k] * model.preset.scales[k] * (Bs[k].double() @ As[k].double()) for k in range(len(Bs)))
        e = torch.linalg.svdvals(M).square()
        cum = (e.cumsum(0) / e.sum()).numpy()
        p = int(np.searchsorted(cum, tau) + 1)
        near = min(abs(cum[p - 1] - tau), abs(cum[p - 2] - tau) if p > 1 else 1.0)
        out[name] = (p, float(near))
    return out


@pytest.mark.parametrize("basis", ["cpu", "cuda"])
def test_tiny_measure_pairs_every_method_and_fraqs_ranks_are_the_energy_rules(monkeypatch, basis):
    """``basis="cuda"``: the CPU's ``"auto"`` basis set to CUDA's (cholesky), so the stepwise
    row runs on it too; ``"cpu"``: the CPU's own (Householder) for the stepwise row. The static
    rows name the cholesky basis and run the static pass either way."""
    from tests.conftest import set_default

    if basis == "cuda":
        from fraq._defaults import DEFAULTS

        set_default(monkeypatch, "cpu", backend=DEFAULTS["cuda"].backend)
    pipeline._model.cache_clear()
    configs = pipeline.points("tiny")
    with torch.random.fork_rng():
        pipeline.prepare_points(configs, "cpu")
        results = {c["row"]: pipeline.measure(c, "cpu") for c in configs}
    rounds = configs[0]["rounds"]
    timings = [r["timing"] for r in results.values()]
    assert len({t["group"] for t in timings}) == 1  # one paired measurement
    assert all(t["compared"] == [m.key for m in pipeline.METHODS] for t in timings)
    assert all(t["round"] == list(range(rounds)) and len(t["samples"]) == rounds for t in timings)
    assert all(s > 0 for t in timings for s in t["samples"])
    model = pipeline._model(configs[0]["preset"], configs[0]["layers"], 0, "cpu")
    ref = _float64_ranks(model, TAU)
    assert all(near > MARGIN for _, near in ref.values()), ref  # the data is friendly (module docstring)
    expected = [p for p, _ in ref.values()]
    for row in ("stepwise", "static-group", "static-call"):
        assert results[row]["ranks"] == expected, row
    assert [results[r]["ran"]["pipeline"] for r in ("stepwise", "static-group", "static-call")] == \
        ["stepwise", "static", "static"]
    assert results["stepwise"]["ran"]["backend"] == ("cholesky" if basis == "cuda" else "householder")
    # one host read per shape group when the static pass runs (one group here), more stepwise
    groups = results["static-group"]["groups"]
    assert results["static-group"]["cuda_configuration"]["host_reads"] == groups
    assert results["static-call"]["cuda_configuration"]["host_reads"] == 1
    assert results["stepwise"]["cuda_configuration"]["host_reads"] > groups
    assert results["flora"]["ranks"] == [sum(model.preset.ranks)] * len(expected)  # FLoRA keeps the stacked rank
    assert results["flora"]["syncs"] is None and results["flora"]["device_busy_s"] is None  # CPU: not measured
    pipeline._model.cache_clear()


# ----------------------------------------------------------------------------- the report section


def _write(out, device: str, times: dict[str, list[float]], ranks: dict[str, list[int]] | None = None):
    """Synthetic ``pipeline`` result files of one preset on ``device``, every method's samples
    (seconds) from the same rounds; the machine record made idle, the device named."""
    from benchmarks.results import write_result

    keys = list(times)
    n = len(next(iter(times.values())))
    for k in keys:
        spec = next(m.spec for m in pipeline.METHODS if m.key == k)
        config = dict(figure="pipeline", preset="roberta-base", layers=None, seed=0, rounds=n, launches=1,
                      compared=keys, row=k, method=spec, size="paper")
        s = times[k]
        result = dict(timing=dict(samples=s, median=float(np.median(s)), round=list(range(n)), launch=[0] * n,
                                  group="g0", compared=keys, looks=[n, n]),
                      modules=36, modules_total=36, clients=10, stacked_rank=80,
                      ranks=(ranks or {}).get(k, [30] * 36), host_reads=1, wall_s=float(np.median(s)),
                      syncs=None, device_busy_s=None, top_kernels=dict(by="x", rows=[dict(name="k", calls=1,
                                                                                         seconds=1e-4)]))
        path = write_result(out, "pipeline", f"roberta-base-{k}", config, result, device="cpu")
        rec = json.loads(path.read_text())
        rec.update(device=device, loadavg=0.0, steal=0.0)
        rec["machine"].update(loadavg=0.0, steal=0.0)
        path.write_text(json.dumps(rec))


def _text(out) -> str:
    import analysis
    from analysis.sections import pipeline as section

    return "\n\n".join(f"{s.title}\n{s.body}" for s in section.draw(analysis.load(out)))


def test_call_beating_group_on_cuda_supports_call_against_the_default(tmp_path):
    rng = np.random.default_rng(0)
    n = 9
    group = list(2e-3 * (1 + 0.05 * rng.random(n)))
    call = [g * 0.6 for g in group]  # every round: call takes 0.6 of group's time
    _write(tmp_path, "cuda:0", {"stepwise": [g * 1.5 for g in group], "static-group": group, "static-call": call,
                                "flora": [g * 0.3 for g in group], "florist": [g * 3 for g in group]})
    text = _text(tmp_path)
    line = next(s for s in text.splitlines() if s.startswith("- reads='call' vs reads='group'"))
    assert "measured on `cuda:0`" in line and "**agrees**" in line
    assert "supports reads='call' as `cuda`'s default" in line
    assert "`DEFAULTS['cuda'].reads` is 'group'" in line and "disagrees with the default" in line
    static = next(s for s in text.splitlines() if s.startswith("- static (reads='group') vs stepwise"))
    assert "supports pipeline='static'" in static and "they agree" in static  # CUDA's default is static
    assert "changes only from a GPU's evidence" in text
    assert "the stepwise pipeline's on every one of the 36 modules" in text
    row = next(s for s in text.splitlines() if s.startswith("| FRAQ, static, reads='call' |"))
    assert "| 2x |" in row  # call's time is 0.6 of group's, FLoRA's 0.3: twice FLoRA's


def test_on_a_cpu_it_describes_the_cpu_and_flags_different_ranks(tmp_path):
    n = 7
    base = [1e-3 * (1 + 0.01 * i) for i in range(n)]
    _write(tmp_path, "cpu", {"stepwise": base, "static-group": [b * 1.3 for b in base],
                             "static-call": [b * 1.3 for b in base], "flora": [b * 0.2 for b in base]},
           ranks={"static-call": [30] * 35 + [31]})
    text = _text(tmp_path)
    assert "describes the CPU alone" in text and "default pipeline is stepwise" in text
    static = next(s for s in text.splitlines() if s.startswith("- static (reads='group') vs stepwise"))
    assert "measured on `cpu`" in static and "**disagrees**" in static
    assert "supports pipeline='stepwise' as `cpu`'s default" in static and "they agree" in static
    reads = next(s for s in text.splitlines() if s.startswith("- reads='call' vs reads='group'"))
    assert "supports neither" in reads and "'group' and stands" in reads  # equal times: the interval holds 1
    assert "**DIFFERENT** from the stepwise pipeline's on 1 of 36 modules" in text


def test_reads_on_a_device_whose_default_pipeline_is_stepwise_flags_no_disagreement(tmp_path):
    """On a CPU (default pipeline stepwise) reads='call' beating 'group' is evidence about the
    static pipeline only: the line says so, and the reads entry, which decides nothing there,
    stands without a disagreement flag."""
    n = 9
    group = [2e-3 * (1 + 0.01 * i) for i in range(n)]
    _write(tmp_path, "cpu", {"stepwise": [g * 0.7 for g in group], "static-group": group,
                             "static-call": [g * 0.6 for g in group], "flora": [g * 0.2 for g in group]})
    reads = next(s for s in _text(tmp_path).splitlines() if s.startswith("- reads='call' vs reads='group'"))
    assert "**agrees**" in reads and "reads='call' for the static pipeline on `cpu`" in reads
    assert "'group' and stands" in reads and "default pipeline is 'stepwise'" in reads
    assert "disagrees with the default" not in reads


def test_no_records_is_one_line():
    import pandas as pd

    from analysis.sections import pipeline as section

    class Empty:
        def __getitem__(self, experiment):
            return pd.DataFrame()

    (sec,) = section.draw(Empty())
    assert sec.body.startswith("Not measured in this run") and "\n" not in sec.body
