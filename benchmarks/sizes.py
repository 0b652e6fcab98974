"""Every size every suite measures at: one piece of data, one vocabulary.

``SIZES[size][experiment]`` is the configuration of one experiment (one figure or table,
:mod:`benchmarks.experiments`) at one size:

- ``tiny``: seconds; small shapes for the tests, the pytest-benchmark quick checks
  (``tests/bench``) and the notebooks' CI run. Not the paper's shapes.
- ``reduced``: what ``make run`` reproduces (``--estimate`` gives its minutes) and what the asv
  suite tracks.
- ``paper``: the paper's sizes where this machine allows (``make reproduce-paper``).
- ``gpu``: the paper's sizes on a GPU (``make gpu-check``, ``make bench-gpu``): ``paper``'s,
  but Tables 1-3 on every preset whole and with the headline rows first (:data:`GPU_TABLES123`).

Which methods a point runs is the experiment's ``methods`` list here, cut by each
method's own limits (:class:`benchmarks.measure.methods.MethodTraits`, e.g. FlexLoRA's
largest d). Nothing else in ``benchmarks/`` or ``tests/bench`` defines a size.
"""

from __future__ import annotations

import os

__all__ = ["ASV", "GPU_TABLES123", "QUICK", "SIZES", "size_config"]

ASV = os.environ.get("FRAQ_ASV_SIZE") or "reduced"
"""The size the asv suite's parameters are taken from: ``FRAQ_ASV_SIZE`` where it is set
(the tests run the suite through asv at ``tiny``), else ``reduced``. Results of two sizes
are two suites: keep one size per asv results directory."""

QUICK = "tiny"
"""The size of the pytest-benchmark quick checks."""

_SWEEP_METHODS = ["fraq", "florist", "flexlora"]
_ANALYST = ["fraq-paper", "qr-svd", "rsvd"]  # the paper's configuration and the textbook baselines

_BASES = ["householder", "cholesky-qr2", "cholesky"]
"""The bases the GPU check compares: Householder (geqrf + ormqr, per matrix on CUDA) and
the batched Cholesky ones."""

SIZES: dict[str, dict[str, dict]] = {
    "tiny": dict(
        fig3=dict(modules=2, client_rank=8, p=4, d_fixed=64, r_fixed=16, ranks=[8, 16], dims=[32, 64],
                  methods=_SWEEP_METHODS + ["qr-svd", "rsvd"], rounds=6, launches=1, rss=False, roof_sample=2e-4),
        # r = 8K from d/4 to 4d on a square and a wide shape; two other exact backends, one
        # through a Gram (cholesky) and one iterative (newton-schulz), so the sweep's report
        # and figure draw FRAQ's backends; every backend's exactness is tests/test_backends.py's.
        clients=dict(shapes=[[32, 32, [1, 4, 8, 16]], [32, 64, [2, 8]]], client_rank=8, tau=0.95, modules=2,
                     methods=_SWEEP_METHODS + ["fraq:backend=cholesky", "fraq:backend=newton-schulz"], rounds=6,
                     launches=1),
        clients_models=dict(jobs=[dict(preset="roberta-base", clients=4, layers=1)], client_rank=8, tau=0.95,
                            methods=_SWEEP_METHODS, repeats=2, budget_s=5.0),
        fig4_rank=dict(preset="roberta-base", layers=1, ranks=[2, 8, 40, 80], methods=["fraq", "florist", "fraq-paper", "qr-svd"]),
        fig4_cond=dict(shape=[64, 64], rank=16, clients=4, batch=2, kappas=[1.0, 1e5, 1e10],
                       methods=_SWEEP_METHODS + _ANALYST),
        table4=dict(m=256, n=128, modules=2, clients=4, client_rank=4, p=4, rounds=6, launches=1, rss=False),
        fig1=dict(preset="roberta-base", layers=1, clients=[2, 4], client_ranks=[4, 8], taus=[0.80, 0.90, 0.95]),
        tables123=dict(presets=["roberta-base"], quick=True, rounds=6, launches=1, slow_rounds=2, roof_sample=2e-4),
        backends=dict(layers=2, repeats=5, diag_matrices=1, threads=[1, 2], stage_repeats=5),
        backend_stages=dict(layers=2, repeats=5, diag_matrices=1, threads=[1, 2], stage_repeats=5),
        eig_precision=dict(),
        peft=dict(points=[dict(model="tiny-bert", layers=None, p=4, tau=0.95, repeats=2, slow_repeats=2)]),
        # (batch, r, D) Grams; (modules, d, D, r, p) stacks (the GPU check's alternatives)
        eigh_routes=dict(cases=[[4, 16, 64]], repeats=3),
        eigensolver=dict(presets=["roberta-base"], layers=1, repeats=3),
        basis_routes=dict(cases=[[2, 32, 64, 16, 4]], backends=_BASES, client_rank=8, repeats=3),
        florist_steps=dict(presets=["roberta-base", "llama-3.2-3b"], layers={"roberta-base": 1, "llama-3.2-3b": 1},
                           rounds=6),
        # one RoBERTa-base layer, 6 paired rounds (the fewest with a 95% sign interval): the flow, and a verdict
        pipeline=dict(presets=["roberta-base"], layers={"roberta-base": 1}, rounds=6),
    ),
    "reduced": dict(
        fig3=dict(modules=2, client_rank=8, p=8, d_fixed=768, r_fixed=80, ranks=[16, 32, 64, 128, 256],
                  dims=[256, 512, 768, 1536, 3072], methods=_SWEEP_METHODS + ["qr-svd", "rsvd"], rounds=12,
                  min_rounds=6, launches=1, roof_methods=["fraq"]),
        # r = d/16 to 2d at 512 x 512, d/8 to 2d at 512 x 2048 (the paper size's 768-wide shapes scaled by 2/3, a
        # third of their time: every method's cost grows as d^3 at a fixed r / d): past r = d on both shapes. The
        # paper size goes on to 4d; K = 256 here (r = 4d) took a sixth of the sweep's timed samples, which make
        # run's five minutes do not hold beside the Tables 1-3 rows' kernel timings.
        clients=dict(shapes=[[512, 512, [4, 16, 32, 64, 128]], [512, 2048, [8, 32, 64, 128]]], client_rank=8,
                     tau=0.95, modules=1, methods=_SWEEP_METHODS + ["fraq:backend=cholesky"], rounds=12,
                     min_rounds=6, launches=1),
        # One layer of each model, latency extrapolated to every layer (labelled).
        clients_models=dict(jobs=[dict(preset="roberta-base", clients=128, layers=1),
                                  dict(preset="roberta-base", clients=512, layers=1),
                                  dict(preset="llama-3.2-3b", clients=64, layers=1)],
                            client_rank=8, tau=0.95, methods=_SWEEP_METHODS, repeats=3, budget_s=10.0),
        # the powers of two to the stacked rank 64 (the paper size adds every multiple of 8 between)
        fig4_rank=dict(preset="llama-3.2-3b", layers=1, ranks=[1, 2, 4, 8, 16, 32, 64],
                       methods=_SWEEP_METHODS + _ANALYST),
        fig4_cond=dict(shape=[768, 768], rank=64, clients=8, batch=2, kappas=[1.0, 1e2, 1e4, 1e6, 1e8, 1e10],
                       methods=_SWEEP_METHODS + _ANALYST),
        # 12 paired rounds over 2 fresh launches (the ratio claims' run-to-run variance; each launch 8 s of start)
        table4=dict(m=8192, n=3072, modules=4, clients=8, client_rank=8, p=8, rounds=6, launches=2),
        fig1=dict(preset="llama-3.2-3b", layers=1, clients=[2, 4, 8, 16], client_ranks=[4, 8, 16],
                  taus=[0.80, 0.90, 0.95]),
        # The heterogeneous preset (stacked rank 232) on 1 of its layers (latency x 28, stated in every row).
        # 3 rounds in each of 2 launches (the runner's process, whose rows are prepared, and one fresh one):
        # 6 paired rounds, the fewest with a sign-test 95% interval (from the smallest round to the largest;
        # leaving out one at each end takes 9), and the run-to-run variance of a second process (the ratio
        # claims' need), for one interpreter start, model build and warm-up of every row. The claims it reads
        # sit far from their thresholds on a CPU (a measured / model ratio of 0.8-1.4 against [0.5, 2], kernel
        # variants 2-76x against 1); the paper size's rounds and launches are the same.
        # Every row's roofline too (roof_sample, a 1 ms looped sample: each of some 1,500 distinct kernels timed
        # alone, for the kernel-rate check; not at the paper size, whose whole-LLaMA rows would add minutes).
        tables123=dict(presets=["roberta-base", "llama-3.2-3b", "llama-3.2-3b-hetero"], quick=True, rounds=3,
                       launches=2, slow_rounds=2, layers={"llama-3.2-3b-hetero": 1}, roof_sample=1e-3),
        # 1 thread: what the report reads (the 2-thread column is the paper size's)
        backends=dict(layers=2, repeats=5, diag_matrices=1, threads=[1], stage_repeats=5),
        backend_stages=dict(layers=2, repeats=5, diag_matrices=1, threads=[1], stage_repeats=5),
        eig_precision=dict(),
        # All of MiniLM (37 modules, 4 clients) and 2 RoBERTa-base layers (10 clients): under a minute.
        peft=dict(points=[dict(model="minilm", layers=None, p=8, tau=0.95, repeats=5, slow_repeats=4),
                          dict(model="roberta-base", layers=2, p=8, tau=0.95, repeats=5, slow_repeats=4)]),
        eigh_routes=dict(cases=[[36, 80, 768]], repeats=7),
        eigensolver=dict(presets=["roberta-base", "llama-3.2-3b"], layers=2, repeats=7),
        basis_routes=dict(cases=[[36, 768, 768, 80, 8], [4, 3072, 8192, 64, 8]], backends=_BASES, client_rank=8,
                          repeats=5),
        # RoBERTa-base whole (36 modules) and LLaMA-3.2-3B on 2 of its 28 layers (14 modules, reported as
        # measured, never multiplied up): 6 paired rounds, the fewest with a 95% sign interval.
        florist_steps=dict(presets=["roberta-base", "llama-3.2-3b"], layers={"llama-3.2-3b": 2}, rounds=6),
        # 2 layers of RoBERTa-base and 1 of LLaMA-3.2-3B (every shape group of each, 6 and 7 modules; reported as
        # measured, never multiplied up): 6 paired rounds, the fewest with a 95% sign interval. A CPU's run
        # describes the CPU; a device's pipeline default is the GPU size's evidence (whole models, 15 rounds).
        pipeline=dict(presets=["roberta-base", "llama-3.2-3b"], layers={"roberta-base": 2, "llama-3.2-3b": 1},
                      rounds=6),
    ),
    "paper": dict(
        # 6 to 12 paired rounds in one process, as at ``reduced``: the claims compare methods timed in the same
        # rounds, which a fresh launch does not change; three launches of every group took 13 of the 18 minutes.
        fig3=dict(modules=12, client_rank=8, p=8, d_fixed=768, r_fixed=80, ranks=[16, 32, 64, 128, 256, 512],
                  dims=[256, 512, 768, 1024, 2048, 4096], methods=_SWEEP_METHODS + ["qr-svd", "rsvd"], rounds=12,
                  min_rounds=6, launches=1),
        # K from 2 clients to r = 4d (RoBERTa-sized, and an MLP-shaped 768 x 3072), and to r = 1.5d on a
        # LLaMA-3.2-3B down projection's shape.
        # On the LLaMA shape a call takes 20 s to minutes from r = d/2 on (FLoRIST's and FRAQ's work grows as
        # (d + D) r^2) and FlexLoRA's dense SVD 20-30 s at every K: 6 rounds there (the fewest with a 95% sign
        # interval); FRAQ at every K (to r = 1.5d), FLoRIST, the Cholesky backend and FlexLoRA on FRAQ's kernel
        # (which under the energy rule takes every triplet: min(d, r) of them) up to K = 48, FlexLoRA's dense
        # path not at all. The comparison with the dense path past r = d is the 768-wide shapes', measured to
        # r = 4d. 6 to 12 paired rounds in one process, as at ``reduced`` (the claims compare methods timed in
        # the same rounds).
        clients=dict(shapes=[[768, 768, [2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384]],
                             [768, 3072, [2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384]],
                             [3072, 8192, [8, 48, 192, 576],
                              dict(rounds=6, only={"florist": [8, 48], "flexlora": [], "flexlora:kernel=fraq": [8, 48],
                                                   "fraq:backend=cholesky": [8, 48]})]],
                     client_rank=8, tau=0.95, modules=1,
                     methods=_SWEEP_METHODS + ["fraq:backend=cholesky"], rounds=12, min_rounds=6, launches=1),
        clients_models=dict(jobs=[dict(preset="roberta-base", clients=128, layers=None),
                                  dict(preset="roberta-base", clients=512, layers=None),
                                  dict(preset="llama-3.2-3b", clients=64, layers=None)],
                            client_rank=8, tau=0.95, methods=_SWEEP_METHODS, repeats=3, budget_s=60.0),
        fig4_rank=dict(preset="llama-3.2-3b", layers=28, ranks=[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64],
                       methods=_SWEEP_METHODS + _ANALYST),
        fig4_cond=dict(shape=[768, 768], rank=64, clients=8, batch=8, kappas=[10.0**k for k in range(11)],
                       methods=_SWEEP_METHODS),
        table4=dict(m=8192, n=3072, modules=56, clients=8, client_rank=8, p=8, rounds=4, launches=3),
        fig1=dict(preset="llama-3.2-3b", layers=4, clients=[2, 4, 8, 16, 32], client_ranks=[4, 8, 16, 32],
                  taus=[0.80, 0.90, 0.95]),
        # 3 rounds in each of 2 launches (the runner's process, whose rows are prepared, and one fresh one): 6,
        # the fewest with a 95% sign interval (whole-model calls of every method take seconds here), and a
        # second process's variance in the samples, as at ``reduced`` (a third launch would build the model and
        # warm every row up once more). The dense methods on LLaMA (one module per shape) take about a minute
        # per sample: 2 samples each, the first the warm-up call itself (``first_call_sample``: a call of seconds
        # per module, whose first-call costs are milliseconds; not FLoRG's, whose first round skips its
        # Procrustes step); Table 3's FlexLoRA and FedMomentum rows take Table 2's (same shapes). The
        # heterogeneous preset's stacked rank 232 makes a whole-model call of every method minutes: it is built
        # on 4 of its 28 layers (latency x 7, stated in every row).
        tables123=dict(presets=["roberta-base", "llama-3.2-3b", "llama-3.2-3b-hetero"], quick=False, rounds=3,
                       launches=2, slow_rounds=2, first_call_sample=True, layers={"llama-3.2-3b-hetero": 4}),
        backends=dict(layers=None, repeats=7, diag_matrices=4, threads=[1, 2], stage_repeats=7),
        backend_stages=dict(layers=None, repeats=7, diag_matrices=4, threads=[1, 2], stage_repeats=7),
        eig_precision=dict(),
        peft=dict(points=[dict(model="minilm", layers=None, p=8, tau=0.95, repeats=7, slow_repeats=5),
                          dict(model="minilm", layers=None, p=16, tau=0.95, repeats=7, slow_repeats=5),
                          dict(model="roberta-base", layers=None, p=8, tau=0.95, repeats=7, slow_repeats=4),
                          # peft's svd merge of one LLaMA layer (full-matrix SVDs of 8192 x 3072) takes
                          # minutes: one layer, its first call the one sample (the report's table says n=1)
                          dict(model="llama-3.2-3b", layers=1, p=8, tau=0.95, repeats=3, slow_repeats=0)]),
        # the presets' Gram batches: RoBERTa-base (36 modules, r = 80), LLaMA-3.2-3B (196, r = 64) and its
        # heterogeneous ranks (r = 232); the bases on RoBERTa's and Table 4's stacks
        eigh_routes=dict(cases=[[36, 80, 768], [196, 64, 3072], [196, 232, 3072]], repeats=9),
        eigensolver=dict(presets=["roberta-base", "llama-3.2-3b"], layers=None, repeats=9),
        basis_routes=dict(cases=[[36, 768, 768, 80, 8], [56, 3072, 8192, 64, 8], [56, 3072, 8192, 232, 8]],
                          backends=_BASES, client_rank=8, repeats=7),
        florist_steps=dict(presets=["roberta-base", "llama-3.2-3b"], layers={}, rounds=6),
        # both presets whole, 15 paired rounds (the GPU check's pipeline part: a whole-model call is milliseconds
        # there, and 15 rounds give the sign test's interval a rank in from each end)
        pipeline=dict(presets=["roberta-base", "llama-3.2-3b"], layers={}, rounds=15),
    ),
}

GPU_TABLES123 = dict(SIZES["paper"]["tables123"], layers={}, dense_alone=True, headline=["flora", "florist", "fraq"],
                     rounds=6, launches=1, first_call_sample=False)
"""Tables 1-3 at the ``gpu`` size: every preset whole, the heterogeneous one too (its stacked
rank 232 makes a whole-model call of every method minutes on a CPU, seconds on a GPU), since a
time measured on fewer layers and multiplied up overstates a method that batches per shape
group: CuPy's batched eigensolver takes 17.7 ms for one 232 x 232 Gram and 114 ms for 196 of
them on an H100 (docs/results/gpu/h100-2026-11-28). And every dense-factorization method in a
point of its own after every preset's shared point (``dense_alone``), so a budgeted GPU call
measures FRAQ, FLoRA and FLoRIST on every preset before the minutes of FlexLoRA's SVDs; and
the ``headline`` rows (FRAQ, FLoRA, FLoRIST) alone in each preset's first point, the other
rows (the kernel variants with their agreement against the dense path, FedIT, LoRA-A2, ...)
in a point ``others`` after every preset's first, so a call cut inside a point still has
the paper's headline comparison on every preset written. And
6 paired rounds in one process (the fewest with a 95% sign interval) rather than the paper
size's 3 in each of 2 processes: a fresh process builds the preset's inputs again (the whole
heterogeneous model: about 25 s on one core, 1.4 GB moved to the device), which a budgeted
GPU call cannot spend; the rows record ``launches`` = 1, so what they
do not cover (the variance between processes) is on record. No ``first_call_sample``: a
device's call is timed by its events after a warm-up, never by the host's clock."""

SIZES["gpu"] = dict(SIZES["paper"], tables123=GPU_TABLES123)


def size_config(size: str, experiment: str) -> dict:
    """``SIZES[size][experiment]``, with a ValueError naming the size if it is not one."""
    if size not in SIZES:
        raise ValueError(f"size(={size!r}) is not one of {sorted(SIZES)}")
    return SIZES[size][experiment]


if ASV not in SIZES:
    raise ValueError(f"FRAQ_ASV_SIZE(={ASV!r}) is not one of {sorted(SIZES)}")
