"""Everything the suite measures on a GPU, in one command that keeps to a time budget.

    python -m benchmarks.gpu_check --out DIR [--device cuda] [--budget-s 420] [--size gpu]
        [--parts NAME,...]

A GPU is lent rarely and briefly, so the call that uses it is prepared and tested here:
with ``--device cpu --size tiny`` the same flow runs on any machine (the test suite runs
it), and what needs CUDA says "not on this device". Parts, in order (:data:`PARTS`):

- ``device``: the device record (:func:`fraq._machine.machine_record`: GPU, driver,
  CUDA, cuSOLVER, float32 matmul precision, TF32, clocks and memory) and ``nvidia-smi``'s
  own table, into ``DIR/device.json``; every result file carries the same record;
- ``tests``: the tests marked ``cuda`` (:data:`CUDA_TESTS`), run by pytest;
- ``pipeline`` (:mod:`~benchmarks.experiments.pipeline`, then
  :mod:`~benchmarks.experiments.cuda_graphs`): FRAQ's pipelines against each other, FLoRA and
  FLoRIST on both presets whole, in paired rounds, each call's synchronizations and kernels;
  then whether the static pass captures as a CUDA graph;
- ``tables123``, ``workspace``: the headline, every aggregator on the presets and the
  peak memory against the analytic workspace, with CUDA's defaults;
- ``eigensolver`` (:mod:`~benchmarks.experiments.eigensolver`): ``fraq.recompress`` on the
  presets with each eigensolver route, round-robin, the evidence a CUDA default is set from;
- ``alternatives`` (:mod:`~benchmarks.experiments.eigh_routes`,
  :mod:`~benchmarks.experiments.basis_routes`), ``table4``, ``fig3``, ``tf32``, ``fig4``,
  ``clients``: the runner's experiments at ``--size`` on the device, one result file per
  point in :mod:`benchmarks.results`' format (``tables123`` and the others alike);
- ``asv-quick``, ``pytest-benchmark-quick`` (only when ``--parts`` names them): the two
  suites on the device, asv's benchmarks called without asv (:mod:`benchmarks.suite_once`:
  the GPU image has no asv) and the pytest-benchmark quick checks, each at the ``tiny`` size.

Every part runs in its own process with a share of the budget (:class:`Part`); a share a
part leaves unused goes to the parts after it. A part that reaches the end of its time
starts no new point and is recorded as ``cut`` with the points it finished; one still in
a point when the time is up is stopped and recorded the same way. A point is written
whole or not at all, so nothing is ever half written. A point that raises is recorded
(``failed``, with the error) and the part goes on.

``DIR`` receives at most :data:`FILES` (seven files, no folders), each written beside
its name and renamed into place after every part, so that a run stopped from outside
leaves whole files: ``results.tar.gz`` (``results/<experiment>/<key>.json``),
``summary.md`` (printed last), ``gpu_check.log`` (every part's output), ``device.json``
``tests.xml`` (pytest's JUnit report), and where those parts ran ``asv_quick.json`` (:mod:`benchmarks.suite_once`'s) and
``pytest_benchmark.json`` (pytest-benchmark's ``--benchmark-json``). A ``DIR`` an earlier call wrote is added to:
its result files are kept (a point measured again replaces its own), so are the archive's
members the check does not write (a README, notes), and its log goes on; its files that
this call does not write again stay as they were. A ``DIR`` whose results were measured on
another device, at another ``--size`` or by another commit is refused before any work, and
a ``DIR`` is held by one call at a time (:mod:`benchmarks.gpu_check.folder`). ``python -m analysis.reproduce --out DIR``
unpacks the results and draws them beside the paper's GH200 numbers.

``--plan`` measures nothing: it prints what the next call would measure, the points the
ledger of earlier calls lacks for the GPU kind and the code's fingerprint, by priority,
inside the budget (:mod:`benchmarks.gpu_check.ledger`, :mod:`benchmarks.gpu_check.plan`).
``--campaign`` measures that plan, point after point in one long-lived process under a
per-point watchdog, into ``DIR/results`` and ``DIR/ledger.json``, and goes on from the
ledger when called again (:mod:`benchmarks.gpu_check.campaign`,
:mod:`benchmarks.gpu_check.measurer`); the parts above are not its concern.

Only torch, numpy, pandas and pytest are needed (what a bare GPU image holds): nothing
here or in the parts imports asv, Flower or peft; tqdm is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CUDA_TESTS", "DEFAULT_PARTS", "FILES", "PARTS", "Part", "part_names"]


@dataclass(frozen=True)
class Part:
    """One part of the check: ``share`` of the budget (at least ``min_s`` seconds where the
    budget allows: a process's start, torch's import and the CUDA context take seconds),
    and the runner experiments it measures (none for ``device`` and ``tests``); ``what``
    for the summary. A part that is not ``default`` runs only when ``--parts`` names it."""

    name: str
    share: float
    experiments: tuple[str, ...]
    what: str
    min_s: float = 5.0
    default: bool = True


PARTS: tuple[Part, ...] = (
    Part("device", 0.02, (), "device record", min_s=8.0),
    Part("tests", 0.05, (), "tests marked cuda", min_s=15.0),
    Part("pipeline", 0.22, ("pipeline", "cuda_graphs"), "FRAQ's stepwise and static pipelines (the static one read "
         "per shape group and per call), FLoRA and FLoRIST on both presets, with each call's syncs and kernels, "
         "and whether its static pass captures as a CUDA graph", min_s=30.0),
    Part("tables123", 0.20, ("tables123",), "Tables 1-3: every aggregator's latency on the presets"),
    Part("workspace", 0.05, ("workspace",), "peak memory against the analytic workspace"),
    Part("eigensolver", 0.05, ("eigensolver",), "FRAQ end to end with each eigensolver route (sets the default)"),
    Part("alternatives", 0.10, ("eigh_routes", "basis_routes"), "the eigensolver routes and the bases"),
    Part("table4", 0.08, ("table4", "table4_steps"), "Table 4 and its steps"),
    Part("fig3", 0.12, ("fig3",), "Fig. 3: the r and d sweeps"),
    Part("tf32", 0.04, ("tf32",), "FlexLoRA and FRAQ with TF32 on and off"),
    Part("fig4", 0.03, ("fig4_cond", "fig4_rank"), "Fig. 4: fidelity"),
    Part("clients", 0.04, ("clients",), "the clients sweep"),
    Part("asv-quick", 0.5, (), "one benchmark of every asv suite file, every parameter once, with the device's "
         "peak memory, called without asv (benchmarks.suite_once)", min_s=30.0, default=False),
    Part("pytest-benchmark-quick", 0.5, (), "the pytest-benchmark quick checks (tests/bench/test_quick.py) on the "
         "device", min_s=30.0, default=False),
)
"""The parts in the order they run (those ``default`` unless ``--parts`` names others): the headline first (FRAQ's pipelines against each other
on the whole presets, then Tables 1-3 with CUDA's defaults and the workspace targets), then
the routes the defaults were chosen from, re-measured. Shares
add up to 1. The pipeline part took 60 of its 74 s for four methods on an H200
(docs/results/gpu/h200-2026-11-28); its share holds a fifth, the static pipeline read per call,
and the CUDA-graph probe after them (a whole-model build and three spans per preset), from the
shares of Fig. 4 and the clients sweep, which every call so far cut at their first points. The CUDA tests took 11 s of an H100 call (docs/results/gpu/h100-routes), so
their share is their floor. The default parts' shares add up to 1; the two suites' quick
runs (P4 of the plan, once per code fingerprint: :data:`benchmarks.gpu_check.plan.CHECKS`)
are asked for by name, ``--parts asv-quick,pytest-benchmark-quick``, in a call of their own.
"""

DEFAULT_PARTS: tuple[Part, ...] = tuple(p for p in PARTS if p.default)
"""What ``make gpu-check`` runs without ``--parts``."""

CUDA_TESTS = ("tests/test_measure.py", "tests/test_recompress.py", "tests/test_gpu_check.py")
"""The test files holding tests marked ``cuda`` (``tests/test_gpu_check.py`` checks that
no other file does): pytest collects these alone, so a file that needs Flower or asv is
never imported on a bare GPU image."""

FILES = ("results.tar.gz", "summary.md", "gpu_check.log", "device.json", "tests.xml", "asv_quick.json",
         "pytest_benchmark.json")
"""Everything written to ``DIR``."""


def part_names() -> list[str]:
    return [p.name for p in PARTS]
