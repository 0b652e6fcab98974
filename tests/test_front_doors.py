"""Only documented front doors keep a ``main()``.

Every module under ``benchmarks/``, ``fraq/`` and ``analysis/`` with a top-level ``def main(``
is listed in :data:`FRONT_DOORS` with the command a reader types, and that command is written
in the README or a page of docs/; the front doors of ``benchmarks/`` and ``analysis/`` are
each a row of docs/benchmarks.md's "Commands" table, which names no other module. A new
``main()`` fails here until it is documented; a module that is only imported has none.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FRONT_DOORS = {
    "analysis.federated_report": "python -m analysis.federated_report",
    "analysis.reproduce": "python -m analysis.reproduce",
    "benchmarks.certificate_cost": "python -m benchmarks.certificate_cost",
    "benchmarks.demo": "python -m benchmarks.demo",
    "benchmarks.gpu_check": "python -m benchmarks.gpu_check",
    "benchmarks.graph_probe": "python -m benchmarks.graph_probe",
    "benchmarks.measure.overhead": "python -m benchmarks.measure.overhead",
    "benchmarks.measure.round_host": "python -m benchmarks.measure.round_host",
    "benchmarks.pipeline_check": "python -m benchmarks.pipeline_check",
    "benchmarks.publish": "python -m benchmarks.publish",
    "benchmarks.pytest_baseline": "python -m benchmarks.pytest_baseline",
    "benchmarks.pytest_compare": "python -m benchmarks.pytest_compare",
    "benchmarks.regress": "python -m benchmarks.regress",
    "benchmarks.roofline": "python -m benchmarks.roofline",
    "benchmarks.run": "python -m benchmarks.run",
    "benchmarks.suite_once": "python -m benchmarks.suite_once",
    "benchmarks.tall_products": "python -m benchmarks.tall_products",
    "benchmarks.thread_scaling": "python -m benchmarks.thread_scaling",
    "fraq._make_help": "make help",  # the Makefile runs fraq/_make_help.py as a script
    "fraq.cli": "fraq aggregate",  # the `fraq` console script (pyproject's [project.scripts])
    "fraq.federated.cli": "python -m fraq.federated",  # through fraq/federated/__main__.py
    "fraq.federated.export_cli": "python -m fraq.federated.export",  # fraq.federated.export runs it
    "fraq.federated.flower.local": "python -m fraq.federated.flower.local",
    "fraq.federated.flower.server_app": "flwr run",  # Flower's ServerApp entry point (@app.main())
}
"""Module with a ``main()`` -> the command the docs give for it."""


def _mains() -> set[str]:
    found = set()
    for top in ("benchmarks", "fraq", "analysis"):
        for path in (ROOT / top).rglob("*.py"):
            if re.search(r"^def main\(", path.read_text(), re.M):
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found.add(module.removesuffix(".__main__"))
    return found


def _docs() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text() for p in pages)


def test_every_main_is_a_listed_front_door():
    assert _mains() == set(FRONT_DOORS)


def test_every_front_door_is_written_in_the_docs():
    docs = _docs()
    missing = {m: cmd for m, cmd in FRONT_DOORS.items() if not re.search(re.escape(cmd) + r"(?![\w.])", docs)}
    assert not missing, missing


def test_the_commands_table_lists_the_measurement_and_analysis_front_doors():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `python -m ([\w.]+)`", section, re.M))
    assert rows == {m for m in FRONT_DOORS if m.startswith(("benchmarks.", "analysis."))}


def _recipes() -> dict[str, list[str]]:
    """Makefile target -> its recipe's lines, with those of the targets it depends on."""
    own, deps = {}, {}
    for line in (ROOT / "Makefile").read_text().splitlines():
        head = re.match(r"^([\w-]+):(?!=)([^#]*)", line)
        if head:
            target = head.group(1)
            own[target], deps[target] = [], head.group(2).split()
        elif line.startswith("\t") and own:
            own[target].append(line)

    def recipe(t: str) -> list[str]:
        return [*(line for d in deps.get(t, []) for line in recipe(d)), *own.get(t, [])]

    return {t: recipe(t) for t in own}


def test_a_make_target_named_in_the_table_runs_that_module():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    recipes = _recipes()
    named = re.findall(r"^\| `python -m ([\w.]+)` \(([^|]*)\)", section, re.M)
    assert len(named) >= 8, named  # the table's make targets are read at all
    for module, made in named:
        for target in re.findall(r"`make ([\w-]+)`", made):
            assert any(f"-m {module}" in line for line in recipes.get(target, [])), (module, target)
