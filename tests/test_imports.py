"""The import structure: data flows one way, library -> measurement -> analysis, and no module
under ``fraq/``, ``benchmarks/`` or ``analysis/`` reaches itself again through its imports.

Read statically (every ``import``, at the top of a module or inside a function, except those
under ``if TYPE_CHECKING:``, which never run), so a lazy import cannot hide a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CIRCLES_KEPT: list[set[str]] = []
"""Circles allowed, each with its reason: none. A module reaching itself again through its imports is a
failure, a lazy import included."""


def _modules(*packages: str) -> dict[str, Path]:
    out = {}
    for pkg in packages:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _edges(mods: dict[str, Path], targets: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """module -> the modules of ``targets`` (default: ``mods``) it imports."""
    targets = mods if targets is None else targets

    def resolve(name: str) -> str | None:
        while name and name not in targets:
            name = name.rpartition(".")[0]
        return name or None

    edges = {}
    for m, f in mods.items():
        is_pkg = f.name == "__init__.py"
        found = set()
        for node in _runtime_nodes(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                found.update(resolve(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in targets else resolve(base)
                             for a in node.names)
        edges[m] = {t for t in found if t and t != m}
    return edges


def _circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_circles_under_fraq_benchmarks_and_analysis_but_the_ones_kept_with_their_reason():
    circles = _circles(_edges(_modules("fraq", "benchmarks", "analysis")))
    assert sorted(map(sorted, circles)) == sorted(map(sorted, CIRCLES_KEPT)), circles


def test_the_library_imports_neither_the_measurement_nor_the_analysis():
    lib = _modules("fraq")
    above = _modules("benchmarks", "analysis")
    back = {m: sorted(t) for m, t in _edges(lib, above).items() if t}
    assert not back, back


def test_the_measurement_imports_no_analysis():
    back = {m: sorted(t) for m, t in _edges(_modules("benchmarks"), _modules("analysis")).items() if t}
    assert not back, back


def test_the_circle_finder_finds_a_lazy_import_circle(tmp_path):
    """The checker itself: two modules importing each other, one inside a function, form a circle;
    an import under ``if TYPE_CHECKING:`` does not."""
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("import b\n")
    b.write_text("def f():\n    import a\n")
    c.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n")
    mods = {"a": a, "b": b, "c": c}
    assert _circles(_edges(mods)) == [{"a", "b"}]
    assert _edges(mods)["c"] == set()


def test_the_internal_surface_resolves_every_name_from_its_module_without_torch():
    """``fraq.internals`` hands out every name of its surface from the module that defines it, refuses
    another naming the surface, and imports nothing it is not asked for (a file helper: no torch)."""
    import importlib
    import subprocess
    import sys

    import pytest

    import fraq.internals as internals

    for name, module in internals.SURFACE.items():
        assert getattr(internals, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="replacing_file"):
        internals.nope  # noqa: B018
    code = "import sys; from fraq.internals import replacing_file, plain; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_the_measurement_reads_the_library_through_its_public_api_and_fraq_internals():
    """No module under ``benchmarks/`` imports a private module of ``fraq`` (``fraq._gram``,
    ``fraq.aggregators._kernel``): what it needs that is not public comes through
    :mod:`fraq.internals`, one documented list."""
    lib = _modules("fraq")
    private = {m: f for m, f in lib.items() if any(part.startswith("_") for part in m.split("."))}
    found = {m: sorted(t) for m, t in _edges(_modules("benchmarks"), private).items() if t}
    assert not found, found


def test_the_measurement_layer_imports_no_experiment():
    """``benchmarks/measure/`` (how to measure) imports nothing of ``benchmarks/experiments/`` (what
    is measured): an experiment hands the measurement its calls, never the other way round."""
    back = {m: sorted(t) for m, t in _edges(_modules("benchmarks/measure"), _modules("benchmarks/experiments")).items()
            if t}
    assert not back, back
