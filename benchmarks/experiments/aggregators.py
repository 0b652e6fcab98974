"""Downlink and server latency of every aggregator, in the shape of the paper's Tables 1-3.

For the three presets (RoBERTa-base q/k/v; LLaMA-3.2-3B, seven projections; the same
with heterogeneous ranks 4..64) it builds seeded LoRA-like client factors
(:func:`fraq.synthetic.lora_clients`), runs each aggregator through
:meth:`fraq.aggregators.Aggregator.aggregate` (batched by module shape) and reports per
method: parameters and bytes sent per client, that as a percentage of the uncompressed
FLoRA stack, and the server's aggregation latency (median and interquartile range).
Accuracy is the federated harness's job. The paper's figures (GPU) are printed beside
ours; where a downlink rule gives a different number from the paper's, the rule is named.

Where a method takes minutes per aggregation here (FlexLoRA's dense SVDs and FLoRG's
dense eigensolver on LLaMA: 8192 x 3072 and 3072 x 3072 matrices, tens of seconds each
on 2 cores), one module of every distinct shape is timed and the total extrapolated,
linearly in the number of modules of that shape, and labelled ``extrapolated``. Its
downlink is exact: it depends only on shapes and ranks. ``--quick`` runs the LLaMA
presets on 2 of 28 layers (latency extrapolated x 14, labelled) and skips FlexLoRA and
FLoRG there.

Run: ``.venv/bin/python -m benchmarks.run aggregators`` or
``.venv/bin/python -m benchmarks.experiments.aggregators [--quick] [--out results] [--device cuda]``.
Inputs come from :func:`benchmarks.cases.clients`; one result file per preset,
``<out>/aggregators/<preset>[-quick].json`` (:mod:`benchmarks.results`).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks import cases
from benchmarks.device import checked
from benchmarks.measure import timed
from benchmarks.results import check_out_dir, write_result
from fraq.aggregators import ClientUpdate, LoraA2State, get_aggregator
from fraq.presets import Preset, get_preset

__all__ = ["METHODS", "PAPER", "main", "run_preset"]

PRESETS = ("roberta-base", "llama-3.2-3b", "llama-3.2-3b-hetero")


@dataclass(frozen=True)
class Method:
    """One table row: a registry name, its options, and the preset rule for special cases."""

    label: str
    name: str
    options: dict = field(default_factory=dict)


def _methods(preset: Preset) -> list[Method]:
    hetero = len(set(preset.ranks)) > 1
    florist_tau = 0.85 if hetero else 0.90  # the FLoRIST paper's thresholds
    return [
        Method("flora", "flora"),
        Method("fedex-lora", "fedex-lora"),
        Method("fedit", "fedit"),
        Method("lora-a2 (B round)", "lora-a2", {"round": 1}),
        Method("lora-a2 (A round)", "lora-a2", {"round": 2}),
        Method("flexlora", "flexlora"),
        Method("florg", "florg"),
        Method(f"florist (tau={florist_tau:.2f})", "florist", {"tau": florist_tau}),
        Method("fraq (tau=0.80)", "fraq", {"tau": 0.80}),
        Method("fraq (tau=0.95)", "fraq", {"tau": 0.95}),
    ]


METHODS = _methods
"""preset -> the rows measured for it."""

# The paper's Tables 1-3: (downlink % of FLoRA, aggregation latency ms on one GH200 GPU).
PAPER: dict[str, dict[str, tuple[float, float]]] = {
    "roberta-base": {
        "flora": (100.00, 4.3), "fedex-lora": (110.00, 11.7), "fedit": (10.00, 1.9), "lora-a2": (10.00, 1.4),
        "flexlora": (10.00, 2722.2), "florg": (1.70, 64.4), "florist": (4.20, 206.1),
        "fraq (tau=0.80)": (23.40, 14.2), "fraq (tau=0.95)": (48.70, 14.3),
    },
    "llama-3.2-3b": {
        "flora": (100.00, 16.7), "fedex-lora": (112.51, 60.0), "fedit": (12.51, 9.7), "lora-a2": (12.51, 5.0),
        "flexlora": (12.51, 197270.4), "florg": (4.01, 3403.7), "florist": (12.51, 728.0),
        "fraq (tau=0.80)": (40.01, 86.7), "fraq (tau=0.95)": (67.82, 86.7),
    },
    "llama-3.2-3b-hetero": {
        "flora": (100.0, 18.9), "flexlora": (27.6, 334587.6), "florist": (23.0, 4364.6),
        "fraq (tau=0.80)": (16.2, 369.4), "fraq (tau=0.95)": (45.5, 367.9),
    },
}

RULES = {
    "flora": "(m + n) sum_k r_k per module",
    "fedex-lora": "(m + n)(sum_k r_k + r): stack (the residual's factors) plus the averaged adapter",
    "fedit": "(m + n) r per module",
    "lora-a2": "the trained factor only: m r (B round) or n r (A round); the frozen one is on the client",
    "flexlora": "mean over clients of (m + n) r_k",
    "florg": "r min(m, n) per module (the single matrix A)",
    "florist": "(m + n) p, p per module by the energy rule on the synthetic spectrum",
    "fraq": "(m + n) p, p per module by the energy rule on the synthetic spectrum",
}

# Methods whose dense per-module factorization is timed on one module per shape on LLaMA.
SLOW = ("flexlora", "florg")


@dataclass
class Model:
    """A preset's synthetic uploads: per module name the clients' (B_k, A_k)."""

    preset: Preset
    layers: int
    shapes: dict[str, tuple[int, int]]
    factors: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]]
    weights: list[float]

    def updates(self, names=None) -> list[ClientUpdate]:
        names = list(self.shapes) if names is None else names
        return [ClientUpdate({n: (self.factors[n][0][k], self.factors[n][1][k]) for n in names},
                             scale=self.preset.scales[k], weight=self.weights[k]) for k in range(self.preset.clients)]

    def florg_updates(self, names=None) -> list[ClientUpdate]:
        """FLoRG's single matrix per module: the LoRA-like factor on the min(m, n) side."""
        names = list(self.shapes) if names is None else names
        out = []
        for k in range(self.preset.clients):
            f = {}
            for n in names:
                m_, n_ = self.shapes[n]
                B, A = self.factors[n][0][k], self.factors[n][1][k]
                f[n] = (None, A if n_ <= m_ else B.mT)
            out.append(ClientUpdate(f, scale=self.preset.scales[k], weight=self.weights[k]))
        return out

    def flora_params(self, names=None) -> int:
        names = list(self.shapes) if names is None else names
        r = sum(self.preset.ranks)
        return sum((self.shapes[n][0] + self.shapes[n][1]) * r for n in names)

    def one_per_shape(self) -> dict[tuple[int, int], tuple[str, int]]:
        """(m, n) -> (first module of that shape, number of modules of that shape in the full model)."""
        out: dict[tuple[int, int], tuple[str, int]] = {}
        for grp in self.preset.groups:
            key = (grp.m, grp.n)
            name = f"layers.0.{grp.name}"
            first, count = out.get(key, (name, 0))
            out[key] = (first, count + grp.count)
        return out


def build_model(preset: Preset, *, layers: int | None = None, seed: int = 0,
                device: torch.device | str = "cpu") -> Model:
    """Seeded LoRA-like factors (:func:`benchmarks.cases.preset_clients`) for the first
    ``layers`` layers of every group (all by default), on ``device``."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.randint(500, 5000, (preset.clients,), generator=g).tolist()  # data sizes n_k
    shapes, factors = {}, {}
    for grp, Bs, As in cases.preset_clients(preset, seed, layers):
        Bs, As = [b.to(device) for b in Bs], [a.to(device) for a in As]
        for layer in range(Bs[0].shape[0]):
            name = f"layers.{layer}.{grp.name}"
            shapes[name] = (grp.m, grp.n)
            factors[name] = ([B[layer] for B in Bs], [A[layer] for A in As])
    return Model(preset, layers or max(g.count for g in preset.groups), shapes, factors, weights)


def _lora_a2_inputs(model: Model, names, round_: int):
    """LoRA-A^2 uploads and state for a B round (1) or an A round (2)."""
    names = list(model.shapes) if names is None else names
    ups = model.updates(names)
    A0 = {n: model.factors[n][1][0] for n in names}
    state = LoraA2State.initial({n: (torch.zeros_like(model.factors[n][0][0]), A0[n]) for n in names})
    round1 = [ClientUpdate({n: (u.factors[n][0], A0[n]) for n in names}, scale=u.scale, weight=u.weight)
              for u in ups]
    if round_ == 1:
        return round1, state
    res = get_aggregator("lora-a2").aggregate(round1, state)
    Bg = {n: res.state.adapters[n][0] for n in names}
    round2 = [ClientUpdate({n: (Bg[n], u.factors[n][1]) for n in names}, scale=u.scale, weight=u.weight)
              for u in ups]
    return round2, res.state


def _inputs(model: Model, method: Method, names):
    if method.name == "florg":
        return model.florg_updates(names), None
    if method.name == "lora-a2":
        return _lora_a2_inputs(model, names, method.options["round"])
    return model.updates(names), None


def _summary(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [samples[0]] * 3
    return {"median_ms": statistics.median(samples) * 1e3, "q25_ms": q[0] * 1e3, "q75_ms": q[2] * 1e3,
            "min_ms": min(samples) * 1e3, "n": len(samples), "samples_s": list(samples)}


@dataclass
class Job:
    """One row's timed calls: (call, multiplier) pairs whose weighted times add to one sample.

    A full-model row has one call with multiplier 1 (or layers-extrapolation factor); a
    one-module-per-shape row has one call per shape, weighted by the number of modules of
    that shape. ``row`` holds the downlink figures from the first (warm-up) calls.
    """

    method: Method
    calls: list[tuple[object, float]]
    row: dict
    first_s: float
    samples: list[float] = field(default_factory=list)


def prepare(model: Model, method: Method, *, subset: bool) -> Job:
    """Inputs, the warm-up call (its result gives the downlink), and the calls to time.

    For FLoRG the warm-up's state is passed on, so the timed calls include the
    Procrustes step of a steady-state round.
    """
    opts = {k: v for k, v in method.options.items() if k != "round"}
    agg = get_aggregator(method.name, **opts)
    full_layers = max(g.count for g in model.preset.groups)
    row = {"method": method.label, "name": method.name, "options": method.options,
           "threads": torch.get_num_threads()}
    if subset:
        pieces = [([name], count, (m, n)) for (m, n), (name, count) in model.one_per_shape().items()]
        flora = model.preset.stack_params()
        row["extrapolated"] = (f"from one module per distinct shape ({len(pieces)} modules), times the number of "
                               f"modules of that shape")
        row["parts"] = [{"shape": list(shape), "module": names[0], "count": count} for names, count, shape in pieces]
    else:
        scale = full_layers / model.layers
        pieces = [(None, scale, None)]
        flora = model.flora_params()
        if scale != 1:
            row["extrapolated"] = f"from {model.layers} of {full_layers} layers, times {scale:g}"
    calls, params, params_max, nbytes, first_s, ranks = [], 0.0, 0.0, 0.0, 0.0, []
    for names, count, _ in pieces:
        ups, state = _inputs(model, method, names)
        t0 = time.perf_counter()
        res = agg.aggregate(ups, state)
        first_s += time.perf_counter() - t0
        if method.name == "florg":
            state = res.state
        per_client = res.downlink_params()
        mult = count if subset else 1
        params += mult * statistics.mean(per_client)
        params_max += mult * max(per_client)
        nbytes += mult * statistics.mean(res.downlink_bytes())
        ranks += [r for r in res.ranks.values() if isinstance(r, int)]
        del res
        calls.append((lambda agg=agg, ups=ups, state=state: agg.aggregate(ups, state), count))
    row.update(modules=len(model.shapes), downlink_params=params, downlink_params_max=params_max,
               downlink_bytes=nbytes, flora_params=flora, downlink_pct=100.0 * params / flora,
               downlink_pct_max=100.0 * params_max / flora, first_call_s=first_s)
    if method.name in ("florist", "fraq") and ranks and not subset:
        row["rank_mean"] = statistics.mean(ranks)
        row["rank_range"] = [min(ranks), max(ranks)]
    return Job(method, calls, row, first_s)


def sample(job: Job, device: torch.device | str = "cpu") -> None:
    """One latency sample of ``job``: its calls timed one after another, weighted."""
    total = 0.0
    for fn, mult in job.calls:
        total += mult * timed(fn, repeats=1, warmup=0, device=device).samples[0]
    job.samples.append(total)


def _applicable(method: Method, preset: Preset) -> str | None:
    """The aggregator's own error for the preset's client ranks, found on 4 x 4 stand-ins
    named after the preset's first module."""
    opts = {k: v for k, v in method.options.items() if k != "round"}
    agg = get_aggregator(method.name, **opts)
    A0 = {r: torch.ones(r, 4) for r in set(preset.ranks)}
    probe = f"layers.0.{preset.groups[0].name}"
    ups = [ClientUpdate({probe: (None if agg.single_matrix else torch.zeros(4, r), A0[r])}, scale=s)
           for r, s in zip(preset.ranks, preset.scales)]
    try:
        agg.aggregate(ups)
    except ValueError as exc:
        return str(exc)
    return None


def _paper(preset: str, method: Method) -> tuple[float, float] | None:
    table = PAPER.get(preset, {})
    key = method.label if method.label in table else method.label.split(" (")[0]
    return table.get(key)


def run_preset(name: str, *, quick: bool, seed: int = 0, repeats: int | None = None, log=print,
               device: torch.device | str = "cpu") -> dict:
    """Measure every method on preset ``name``; returns the JSON-ready record.

    Methods are timed round-robin, one call of each per round, so that a change in the
    machine's load during the run hits every method alike and the ratios between them
    stay meaningful. A method whose warm-up call took over 20 s is timed in the first 3
    rounds only.
    """
    preset = get_preset(name)
    llama = name.startswith("llama")
    layers = 2 if (quick and llama) else None
    repeats = repeats or (3 if quick else 5)
    t0 = time.perf_counter()
    model = build_model(preset, layers=layers, seed=seed, device=device)
    log(f"  built {len(model.shapes)} modules x {preset.clients} clients in {time.perf_counter() - t0:.1f} s")
    rows: list[dict] = []
    jobs: list[Job] = []
    for method in _methods(preset):
        paper = _paper(name, method)
        problem = _applicable(method, preset)
        if problem:
            rows.append({"method": method.label, "name": method.name, "skipped": f"not applicable: {problem}",
                         "paper": paper})
            log(f"  {method.label:<22} not applicable")
            continue
        if llama and method.name in SLOW and quick:
            rows.append({"method": method.label, "name": method.name, "paper": paper,
                         "skipped": "quick mode: dense per-module SVD / eigensolver on 8192 x 3072 and 3072 x 3072 "
                                    "matrices take tens of seconds each here; run without --quick for the "
                                    "one-module-per-shape extrapolation"})
            log(f"  {method.label:<22} skipped in quick mode")
            continue
        job = prepare(model, method, subset=llama and method.name in SLOW)
        job.row["paper"] = paper
        rows.append(job.row)
        jobs.append(job)
        log(f"  {method.label:<22} {job.row['downlink_pct']:7.2f}%  warm-up {job.first_s:.2f} s")
    load = [os.getloadavg()[0]]
    for i in range(repeats):
        t0 = time.perf_counter()
        for job in jobs:
            if i < 3 or job.first_s <= 20.0:
                sample(job, device)
        load.append(os.getloadavg()[0])
        log(f"  round {i + 1}/{repeats}: {time.perf_counter() - t0:.0f} s, load average {load[-1]:.1f}")
    for job in jobs:
        job.row["latency"] = _summary(job.samples)
    del model, jobs
    gc.collect()
    return {"preset": name, "clients": preset.clients, "ranks": list(preset.ranks), "alphas": list(preset.alphas),
            "modules": preset.modules, "quick": quick, "seed": seed, "layers": layers or "all",
            "dtype": "float32", "batched": True, "repeats": repeats, "load_average_1min": load, "rows": rows,
            "device": str(device)}


def format_table(rec: dict) -> str:
    """The preset's table as text: ours beside the paper's, ratios to FRAQ (tau=0.95)."""
    rows = rec["rows"]
    ref = next((r for r in rows if r["method"] == "fraq (tau=0.95)" and "latency" in r), None)
    ref_ms = ref["latency"]["median_ms"] if ref else None
    thr = next((r["threads"] for r in rows if "threads" in r), torch.get_num_threads())
    head = (f"{rec['preset']}: {rec['modules']} modules, {rec['clients']} clients, ranks {rec['ranks']}, "
            f"float32, batched, {thr} threads" + (" [quick]" if rec["quick"] else ""))
    lines = [head, f"{'method':<22} {'params/client':>14} {'MB':>8} {'%FLoRA':>8} {'paper%':>7} "
                   f"{'latency ms: median [q25, q75]':>34} {'paper ms':>10} {'x FRAQ':>8}"]
    notes = []
    for r in rows:
        paper = r.get("paper")
        pp = f"{paper[0]:7.2f}" if paper else f"{'-':>7}"
        pms = f"{paper[1]:10.1f}" if paper else f"{'-':>10}"
        if "skipped" in r:
            lines.append(f"{r['method']:<22} {'':>14} {'':>8} {'':>8} {pp} {'skipped (see notes)':>34} {pms}")
            notes.append(f"{r['method']}: {r['skipped'].split(' (use ')[0]}")
            continue
        lat = r["latency"]
        mark = "*" if "extrapolated" in r else " "
        cell = f"{lat['median_ms']:.1f} [{lat['q25_ms']:.1f}, {lat['q75_ms']:.1f}]{mark}"
        ratio = f"{lat['median_ms'] / ref_ms:8.2f}" if ref_ms else f"{'-':>8}"
        lines.append(f"{r['method']:<22} {r['downlink_params']:14,.0f} {r['downlink_bytes'] / 2**20:8.2f} "
                     f"{r['downlink_pct']:8.2f} {pp} {cell:>34} {pms} {ratio}")
        if "extrapolated" in r:
            notes.append(f"{r['method']}: * latency extrapolated {r['extrapolated']}")
        base = r["name"]
        if paper and abs(paper[0] - r["downlink_pct"]) > 0.05:
            extra = (f"; the max over clients is {r['downlink_pct_max']:.2f}%"
                     if r["downlink_pct_max"] != r["downlink_pct"] else "")
            notes.append(f"{r['method']}: downlink {r['downlink_pct']:.2f}% vs paper {paper[0]:.2f}%; ours by the "
                         f"rule {RULES[base]}{extra}")
        if "rank_mean" in r:
            notes.append(f"{r['method']}: mean rank {r['rank_mean']:.2f}, range {r['rank_range']}")
    if ref_ms:
        for base, target in (("florist", 8.0), ("flexlora", 190.0)):
            r = next((r for r in rows if r["name"] == base and "latency" in r), None)
            if r:
                ratio = r["latency"]["median_ms"] / ref_ms
                notes.append(f"target: {base} / fraq(0.95) >= {target:g}x: measured {ratio:.1f}x "
                             f"({'met' if ratio >= target else 'NOT met'})")
    return "\n".join(lines + ["  " + n for n in notes])


def run(out, *, quick: bool, presets=PRESETS, seed: int = 0, device: torch.device = torch.device("cpu"),
        log=print) -> list[str]:
    """Measure every preset, write one result file each under ``out``; the printed tables."""
    from fraq._machine import machine_record

    machine = machine_record(device)
    log(f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} torch threads, "
        f"device {device}{' (' + machine['gpu'] + ')' if machine['gpu'] else ''}, torch {machine['torch']}, "
        f"BLAS {machine['blas']}; paper figures: one GH200 GPU")
    tables = []
    for name in presets:
        log(f"{name}:")
        rec = run_preset(name, quick=quick, seed=seed, log=log, device=device)
        config = {k: rec[k] for k in ("preset", "clients", "ranks", "alphas", "modules", "quick", "seed", "layers",
                                      "dtype", "batched", "repeats")}
        path = write_result(out, "aggregators", f"{name}{'-quick' if quick else ''}", config,
                            {k: v for k, v in rec.items() if k not in config}, device=device)
        tables.append(format_table(rec))
        log(tables[-1] + f"\n  saved {path}\n")
    return tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.experiments.aggregators", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="LLaMA presets on 2 layers, no FlexLoRA/FLoRG there, 3 repeats")
    ap.add_argument("--out", type=Path, default=Path("results"), help="results directory (<out>/aggregators/)")
    ap.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--device", help="cpu, cuda or cuda:N (default: FRAQ_BENCH_DEVICE, else cpu)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            ap.error(f"--threads(={args.threads}) must be >= 1")
        torch.set_num_threads(args.threads)
    try:
        device = checked(args.device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    check_out_dir(args.out)
    tables = run(args.out, quick=args.quick, presets=args.presets, seed=args.seed, device=device,
                 log=lambda s: print(s, flush=True))
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
