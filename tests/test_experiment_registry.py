"""The experiment registry: a module declares itself, the registry is one line per experiment,
and everything that lists experiments reads the two.

The rule these tests state: adding an experiment is its module (with ``EXPERIMENT``, ``points``,
``key`` and ``measure``), one line in :data:`benchmarks.experiments.EXPERIMENTS` and, for the
report, its section (:mod:`analysis.sections`); nothing else in ``benchmarks/`` names it.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from pathlib import Path

import pytest

from benchmarks import experiments
from benchmarks.experiments import EXPERIMENTS, Experiment, Priority

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "benchmarks" / "experiments"
ENTRY = ("points", "key", "measure")

OTHER_LISTS = {("benchmarks/gpu_check/__init__.py", "PARTS"), ("benchmarks/roofline.py", "COMPARED")}
"""Literal lists of experiments kept outside the registry, each with its reason: the budgeted
GPU check's parts (``make gpu-check``) group the experiments each part runs under one share of
the budget; an experiment in no part is simply not in that check (the campaign, which plans
every prioritized experiment, reads the declarations), so a new experiment need not be named
there. And one list that names no experiment: the roofline's ``COMPARED``, ``fraq.recompress``'s
options, two of which (``eigensolver``, ``pipeline``) are also the names of the experiments
that compare their values."""


def _functions(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}


def test_every_experiment_module_is_registered_and_every_helper_is_not():
    """A module of the package with ``points``, ``key`` and ``measure`` is an experiment and has a
    registry line; a module without them (a helper several experiments share) has none and
    declares nothing."""
    modules = {p.stem: _functions(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    measuring = {m for m, fns in modules.items() if set(ENTRY) <= fns}
    assert measuring == set(EXPERIMENTS.values()), sorted(measuring ^ set(EXPERIMENTS.values()))
    assert len(set(EXPERIMENTS.values())) == len(EXPERIMENTS), "two registry lines name one module"
    for helper in set(modules) - measuring:
        assert not hasattr(importlib.import_module(f"benchmarks.experiments.{helper}"), "EXPERIMENT"), helper


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_registry_line_names_a_module_that_declares_itself(name):
    module = experiments.get(name)
    assert isinstance(module.EXPERIMENT, Experiment)
    assert experiments.declared(name) is module.EXPERIMENT
    assert all(callable(getattr(module, fn)) for fn in ENTRY)
    assert all(isinstance(p, Priority) for p in module.EXPERIMENT.gpu)


def test_the_derived_names_are_the_declarations_in_the_registrys_order():
    """DEFAULT, UNTIMED, SCALE and the GPU check's priorities, recomputed here from each module's
    ``EXPERIMENT`` alone; and the registry's order is the runner's (``make run``'s timed
    experiments before its untimed ones, so the runner's reordering leaves DEFAULT as it is)."""
    from benchmarks import run
    from benchmarks.gpu_check import plan

    spec = {n: importlib.import_module(f"benchmarks.experiments.{m}").EXPERIMENT for n, m in EXPERIMENTS.items()}
    assert experiments.DEFAULT == tuple(n for n in EXPERIMENTS if spec[n].default)
    assert experiments.UNTIMED == tuple(n for n in EXPERIMENTS if spec[n].untimed)
    assert experiments.SCALE == {n: float(spec[n].scale) for n in EXPERIMENTS}
    assert run._ordered(experiments.DEFAULT) == experiments.DEFAULT
    rows = [(p.level, n, p.part, p.what) for level in range(6) for n in EXPERIMENTS for p in spec[n].gpu
            if p.level == level]
    assert plan.PRIORITIES == tuple(rows)
    # a point takes the lowest level that matches it: tables123's shared point the headline's
    assert plan.priority("tables123", {"part": "shared"}) == 0
    assert plan.priority("tables123", {"part": "others"}) == 5
    assert plan.priority("backends", {}) is None


def _literal_lists(path: Path, names: set[str]):
    """``(assigned name or None, line, experiments named)`` of every literal tuple, list, set or
    dict in ``path`` naming two or more registered experiments."""
    tree = ast.parse(path.read_text())
    owner = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for sub in ast.walk(node.value) if node.value is not None else ():
                owner.setdefault(id(sub), next((t.id for t in targets if isinstance(t, ast.Name)), None))
    for node in ast.walk(tree):
        elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            continue
        named = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
        if len(named) >= 2:
            yield owner.get(id(node)), node.lineno, named


def test_nothing_in_benchmarks_lists_experiments_but_the_registry():
    """The places that listed experiments by hand (the runner's order, the untimed ones, the
    cost scales, the GPU priorities) read the registry and the declarations; a literal naming
    two registered experiments anywhere under ``benchmarks/`` is the registry's line or one of
    :data:`OTHER_LISTS`. ``benchmarks/sizes.py`` holds each experiment's configuration, not a
    list of experiments (an experiment that has no size there has none)."""
    names = set(EXPERIMENTS)
    found = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "benchmarks/sizes.py":
            continue
        for owner, line, named in _literal_lists(path, names):
            if (rel, owner) in OTHER_LISTS or (rel, owner) == ("benchmarks/experiments/__init__.py", "EXPERIMENTS"):
                continue
            found.append(f"{rel}:{line} ({owner}): {named}")
    assert not found, found


def test_the_finder_sees_a_hand_list(tmp_path):
    """The checker itself: a tuple of two experiment names is found, with its owner; one name is not."""
    f = tmp_path / "m.py"
    f.write_text("ORDER = ('fig3', 'table4')\nONE = ('fig3', 'x')\n")
    assert list(_literal_lists(f, set(EXPERIMENTS))) == [("ORDER", 1, ["fig3", "table4"])]


def test_every_report_section_reads_registered_experiments():
    """A section's ``reads`` names experiments of the registry (or the federated harness's results,
    which the runner does not measure)."""
    from analysis.reproduce import section_module, SECTIONS

    for section in SECTIONS:
        reads = section_module(section).reads
        assert set(reads) <= set(EXPERIMENTS) | {"federated"}, (section, reads)


@pytest.fixture
def probe(monkeypatch):
    """A new experiment: a module (here built in memory) and one registry line, nothing else."""
    module = types.ModuleType("benchmarks.experiments.probe_experiment")
    module.EXPERIMENT = Experiment(default=True, scale=2.5, gpu=(Priority(3, "the probe"),))
    module.points = lambda size: [dict(figure="probe", i=i) for i in range(3)]
    module.key = lambda config: f"i{config['i']}"
    module.measure = lambda config, device: {"value": float(config["i"])}
    module.cost = lambda config: 1.0 + config["i"]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(EXPERIMENTS, "probe", "probe_experiment")
    for cached in ("DEFAULT", "UNTIMED", "SCALE"):  # derived again from the registry with the new line
        monkeypatch.delattr(experiments, cached, raising=False)
    return module


def test_a_new_experiment_is_its_module_and_one_line(probe, tmp_path):
    """With only the module and the line, the experiment is in ``make run``'s default, its costs
    are scaled by its declaration, the GPU plan has its priority, and the runner measures it."""
    import json

    from benchmarks import run

    assert experiments.DEFAULT[-1] == "probe" and "probe" not in experiments.UNTIMED
    assert experiments.SCALE["probe"] == 2.5
    assert [experiments.cost("probe", c) for c in probe.points("tiny")] == [2.5, 5.0, 7.5]
    assert (3, "probe", None, "the probe") in experiments.priorities()
    assert [k for _, _, k in [(n, m, m.key(c)) for n, m, c in run.plan(("probe",), "tiny")]] == ["i0", "i1", "i2"]
    done = run.run(tmp_path, ("probe",), size="tiny", progress=False)
    assert done["measured"] == 3
    rec = json.loads((tmp_path / "probe" / "i2.json").read_text())
    assert rec["result"]["value"] == 2.0 and rec["config"]["size"] == "tiny"


@pytest.mark.parametrize("kwargs,match", [
    (dict(default="yes"), "default"),
    (dict(untimed=1), "untimed"),
    (dict(scale=0), "scale"),
    (dict(scale=float("nan")), "scale"),
    (dict(scale=True), "scale"),
    (dict(gpu=[Priority(1, "x")]), "gpu"),
    (dict(gpu=((1, "x"),)), "gpu"),
])
def test_a_declaration_refuses_what_the_runner_cannot_use(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Experiment(**kwargs)


@pytest.mark.parametrize("args,match", [((-1, "x"), "level"), ((1.0, "x"), "level"), ((True, "x"), "level"),
                                        ((1, ""), "what"), ((1, "x", 3), "part")])
def test_a_priority_refuses_a_bad_level_or_label(args, match):
    with pytest.raises(ValueError, match=match):
        Priority(*args)


def test_the_registry_imports_no_torch():
    """``import benchmarks.experiments`` alone (the names and the declarations' types) loads no
    torch: the experiment modules, which do, are imported when a derived name is first read."""
    import subprocess

    code = ("import sys, benchmarks.experiments as e; assert 'torch' not in sys.modules; "
            "e.EXPERIMENTS, e.Experiment, e.Priority; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
