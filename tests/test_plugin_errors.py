"""A method from outside the package that cannot be registered is refused with one line
naming it and the reason, before any work: by :func:`register_aggregator` in process, and by
each front door (``python -m fraq.federated``, ``fraq aggregate``, ``python -m
benchmarks.run``) with exit status 2 when a ``FRAQ_METHODS`` module fails to load."""

from __future__ import annotations

import re
import sys

import pytest

from fraq.aggregators import (
    AGGREGATORS,
    ENV,
    REINITIALIZE,
    FLoRA,
    MethodLoadError,
    get_aggregator,
    register_aggregator,
    registry,
)

GOOD = ("from fraq.aggregators import FLoRA, register_aggregator\n"
        "class Fine(FLoRA):\n"
        "    name, display_name, paper_order = 'fine-method', 'Fine method', None\n"
        "register_aggregator(Fine)\n")


def _method(**attrs) -> type:
    """A FLoRA subclass with its own name and display name, then ``attrs``."""
    return type("Plug", (FLoRA,), {"name": "plug", "display_name": "Plug", "paper_order": None, **attrs})


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A folder on sys.path for plug-in modules; the registry unloaded, put back afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(ENV, raising=False)
    before = dict(dict.items(AGGREGATORS))
    monkeypatch.setattr(registry, "_loaded", False)
    names = set(sys.modules)
    yield tmp_path
    dict.clear(AGGREGATORS)
    dict.update(AGGREGATORS, before)
    for name in set(sys.modules) - names:
        if name.startswith("plug_"):
            sys.modules.pop(name)


# ------------------------------------------------------------------------------ registration
@pytest.mark.parametrize("attrs, kind, match", [
    ({"name": ""}, ValueError, r"Plug.name(='') must be non-empty"),
    ({"name": " plug"}, ValueError, r"Plug.name(=' plug') must be non-empty, without blanks at its ends"),
    ({"name": "plug\t"}, ValueError, r"Plug.name(='plug\t')"),
    ({"name": "my:plug"}, ValueError, r"Plug.name(='my:plug')"),
    ({"name": "my/plug"}, ValueError, r"Plug.name(='my/plug')"),
    ({"name": "a,b"}, ValueError, r"Plug.name(='a,b')"),
    ({"energy_rule": "no"}, TypeError, r"Plug.energy_rule(='no') must be a bool"),
    ({"energy_rule": 1}, TypeError, r"Plug.energy_rule(=1) must be a bool"),
    ({"nested": None}, TypeError, r"Plug.nested(=None) must be a bool"),
    ({"client_init": "warm"}, ValueError, r"Plug.client_init(='warm') must be 'warm-start'"),
    ({"display_name": "FRAQ"}, ValueError, r"Plug.display_name(='FRAQ') is fraq.aggregators.fraq.Fraq's ('fraq')"),
    ({"display_name": None, "name": "FLoRA"}, ValueError, r"Plug.display_name(='FLoRA') is "),
    ({"paper_order": 8}, ValueError, r"Plug.paper_order(=8) is fraq.aggregators.fraq.Fraq's ('fraq')"),
])
def test_registration_refuses_a_method_that_would_be_silently_wrong(attrs, kind, match):
    bad = _method(**attrs)
    with pytest.raises(kind, match=re.escape(match)):
        register_aggregator(bad)
    assert bad not in dict.values(AGGREGATORS)


def test_registration_refuses_a_missing_client_init():
    from fraq.aggregators import Aggregator

    bad = type("Plug", (Aggregator,), {"name": "plug", "_group": lambda self, g, s: {}})
    with pytest.raises(ValueError, match=re.escape("Plug.client_init(=None) must be 'warm-start' (WARM_START) or "
                                                   "'reinitialize' (REINITIALIZE)")):
        register_aggregator(bad)


def test_a_method_with_its_own_name_display_and_order_registers(monkeypatch):
    good = _method(client_init=REINITIALIZE, paper_order=9, energy_rule=True)
    monkeypatch.delitem(AGGREGATORS, "plug", raising=False)
    try:
        assert register_aggregator(good) is good and register_aggregator(good) is good  # again: no change
        assert AGGREGATORS["plug"] is good
    finally:
        dict.pop(AGGREGATORS, "plug", None)


# ------------------------------------------------------------------------------ loading
@pytest.mark.parametrize("source, match", [
    (None, r"module 'plug_x' failed to import: ModuleNotFoundError: No module named 'plug_x'$"),
    ("raise RuntimeError('no GPU here')", r"module 'plug_x' failed to import: RuntimeError: no GPU here$"),
    ("raise SystemExit(3)", r"module 'plug_x' failed to import: it raised SystemExit\(3\) at import$"),
    ("import sys; sys.exit()", r"module 'plug_x' failed to import: it raised SystemExit\(None\) at import$"),
    ("raise ValueError('line one\\nline two')", r"ValueError: line one$"),
    ("from fraq.aggregators import FLoRA, register_aggregator\n"
     "register_aggregator(type('Bad', (FLoRA,), {'name': 'bad', 'display_name': 3}))",
     r"TypeError: Bad.display_name\(=3\) must be None or a str$"),
    ("from fraq.aggregators import FLoRA, register_aggregator\n"
     "register_aggregator(type('Bad', (FLoRA,), {'name': 'flora'}))",
     r"ValueError: aggregator name 'flora' is taken by fraq.aggregators.flora.FLoRA"),
])
def test_a_failing_module_is_one_line_naming_it_and_the_reason(plugins, monkeypatch, source, match):
    if source is not None:
        (plugins / "plug_x.py").write_text(source)
    monkeypatch.setenv(ENV, "plug_x")
    for _ in range(2):  # not marked loaded: every read names it again
        with pytest.raises(MethodLoadError, match=r"^FRAQ_METHODS='plug_x': module 'plug_x' failed to import: " +
                           match.removeprefix("module 'plug_x' failed to import: ")) as info:
            get_aggregator("fraq")
        assert "\n" not in str(info.value) and isinstance(info.value, ImportError)
        sys.modules.pop("plug_x", None)


def test_a_module_named_twice_is_refused(plugins, monkeypatch):
    (plugins / "plug_fine.py").write_text(GOOD)
    monkeypatch.setenv(ENV, "plug_fine, plug_fine")
    with pytest.raises(MethodLoadError, match=r"module 'plug_fine' is named twice; name it once"):
        AGGREGATORS.get("fraq")
    assert "plug_fine" not in sys.modules  # refused before importing anything


def test_two_modules_registering_one_display_name_name_the_second(plugins, monkeypatch):
    (plugins / "plug_fine.py").write_text(GOOD)
    (plugins / "plug_twin.py").write_text(GOOD.replace("'fine-method'", "'twin-method'"))
    monkeypatch.setenv(ENV, "plug_fine,plug_twin")
    with pytest.raises(MethodLoadError, match=r"module 'plug_twin' failed to import: ValueError: "
                                              r"plug_twin.Fine.display_name\(='Fine method'\) is plug_fine.Fine's"):
        AGGREGATORS.get("fraq")


# ------------------------------------------------------------------------------ front doors
def _federated(argv):
    from fraq.federated.cli import main

    return main(argv)


def _aggregate(argv):
    from fraq.cli import main

    return main(["aggregate", *argv])


def _bench(argv):
    from benchmarks.run import main

    return main(argv)


@pytest.mark.parametrize("door, argv", [
    (_federated, ["--rounds", "1", "--out", "{tmp}/fed"]),
    (_aggregate, ["{tmp}/c0", "{tmp}/c1", "-o", "{tmp}/merged"]),
    (_bench, ["fig3", "--out", "{tmp}/bench"]),
])
def test_each_front_door_prints_one_line_and_exits_2_before_any_work(plugins, monkeypatch, capsys, door, argv):
    (plugins / "plug_x.py").write_text("raise SystemExit(0)")
    monkeypatch.setenv(ENV, "plug_x")
    argv = [a.format(tmp=plugins) for a in argv]
    assert door(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "FRAQ_METHODS='plug_x': module 'plug_x' failed to import: it raised " \
                                   "SystemExit(0) at import" in err
    assert not any((plugins / d).exists() for d in ("fed", "merged", "bench"))


@pytest.mark.integration
@pytest.mark.parametrize("command", [["-m", "fraq.federated", "--rounds", "1"], ["-m", "fraq", "aggregate", "a", "b"],
                                     ["-m", "benchmarks.run", "fig3"]])
def test_the_commands_exit_2_with_one_line(tmp_path, command):
    """In a fresh interpreter: the one line on stderr, exit status 2, no traceback."""
    import os
    import subprocess
    from pathlib import Path

    (tmp_path / "plug_x.py").write_text("raise RuntimeError('needs a GPU')")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, FRAQ_METHODS="plug_x", PYTHONPATH=os.pathsep.join([str(tmp_path), str(root)]))
    done = subprocess.run([sys.executable, *command, "--out" if "aggregate" not in command else "-o",
                           str(tmp_path / "out")], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.endswith(
        "FRAQ_METHODS='plug_x': module 'plug_x' failed to import: RuntimeError: needs a GPU\n")
    assert not (tmp_path / "out").exists()
