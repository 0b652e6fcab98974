"""What the command lines print: ``fraq --version``, ``--help`` without reStructuredText
markup, library errors in a command-line user's words, the demo's labels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fraq.cli import cli_words, main

ROOT = Path(__file__).resolve().parents[1]


def test_fraq_version(capsys):
    import fraq

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"fraq {fraq.__version__}"
    assert "--version" in subprocess.run([sys.executable, "-m", "fraq", "--help"], capture_output=True, text=True,
                                         cwd=ROOT).stdout


def test_library_errors_name_the_flag_not_the_keyword():
    err = ValueError("out(='x') exists; pass overwrite=True (--overwrite) to replace it")
    assert cli_words(err) == "out(='x') exists; pass --overwrite to replace it"
    assert cli_words(ValueError("export round 1, or pass allow_later_round=True (--allow-later-round) if")) == \
        "export round 1, or pass --allow-later-round if"


@pytest.mark.integration
@pytest.mark.parametrize("module", ["fraq.federated", "benchmarks.demo", "benchmarks.roofline", "benchmarks.run",
                                    "analysis.reproduce"])
def test_help_has_no_rst_markup(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    for mark in ("``", ":func:", ":mod:", ":data:"):
        assert mark not in done.stdout, (module, done.stdout)


def test_demo_labels_its_spread(capsys):
    pytest.importorskip("tabulate")
    from benchmarks import demo

    demo._print([dict(preset="p", tau=0.95, latency_ms=1.0, latency_iqr_ms=0.1, rank_min=1, rank_median=2.0,
                      rank_max=3, downlink_pct_flora=10.0, rel_error_median=1e-3, excess_over_optimum_max=1e-7)])
    assert "latency ms (median ± IQR)" in capsys.readouterr().out


def test_notebook_checkpoints_are_ignored():
    assert ".ipynb_checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()


def test_aggregate_help_lists_every_registered_method(capsys):
    """``fraq aggregate --help`` names each method ``--method`` accepts (the registry's names)."""
    from fraq.aggregators.registry import AGGREGATORS
    from fraq.cli import aggregate_main
    from fraq.methods import PACKAGE_METHODS

    assert PACKAGE_METHODS == tuple(dict.keys(AGGREGATORS))[:len(PACKAGE_METHODS)]  # the package's, in order
    with pytest.raises(SystemExit):
        aggregate_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"({', '.join(PACKAGE_METHODS)})" in text, text
