"""What a report leaves out (:mod:`analysis.notes`): listed in the report, verdict by verdict,
the busy machine in one line, and counted in one console line instead of a warning each."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from analysis import notes  # noqa: E402
from analysis.verdicts import judge, not_measured  # noqa: E402


def _ratio(g):
    return g["a"] / g["b"]


def test_a_busy_machine_is_one_line_however_many_verdicts_it_withholds():
    """Three claims withheld under two distinct loads, one not measured: one busy bullet naming the
    three claims under their reason, the not-measured claim its own bullet, and a summary that counts both."""
    g = {"a": np.full(8, 3.0), "b": np.ones(8)}
    loaded = [{"loadavg": 9.0, "threads": 1}] * 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verdicts = [judge(g, _ratio, above=2.0, claim=c, machine=m)
                    for c, m in (("x", loaded), ("y", loaded), ("z", loaded[:1] + [{"loadavg": 0.1}]))]
        not_measured("w", ["p (no samples)"])
    assert [v.interval() for v in verdicts] == ["withheld: machine busy"] * 3  # no reason repeated per verdict
    found = notes.collected(caught + caught)  # duplicates (the same text) are listed once
    assert [type(n) for n in found] == [notes.Busy] * 3 + [notes.NotMeasured]
    lines = notes.section(found)
    assert lines[0] == "- no verdict on 'w': not measured: p (no samples)"
    assert len(lines) == 2 and lines[1].count("machine was busy") == 1
    assert "'x', 'y' (load average 9.00 above 1 thread(s) + 0.5 in 3 of 3 results)" in lines[1]
    assert "'z' (load average 9.00 above 1 thread(s) + 0.5 in 1 of 2 results)" in lines[1]
    assert notes.summary(found, "r.md") == ("not measured: 1 verdict; machine busy: 3 verdicts withheld "
                                            "(listed in r.md, under 'Not measured or skipped')")
    assert notes.summary([], "r.md") == ""
    assert notes.summary([UserWarning("a library's"), notes.Skipped("f")], "r.md").startswith(
        "skipped: 1 file; 1 other note (")


def test_the_console_has_one_line_and_the_report_every_point(tmp_path, monkeypatch, capsys):
    """``python -m analysis.reproduce`` on a busy machine's results with a point not measured: no
    UserWarning reaches the console, one line counts what was left out, and the report says it per
    verdict and lists it once under *Not measured or skipped*."""
    import matplotlib

    matplotlib.use("Agg")
    import fraq._machine
    from analysis.reproduce import main
    from benchmarks.results import write_result
    from test_tables123 import _row

    monkeypatch.setattr("os.getloadavg", lambda: (9.0, 9.0, 9.0))  # recorded with the results: a busy machine
    monkeypatch.setattr(fraq._machine, "steal_share", lambda: 0.0)
    rows = [_row("florist (tau=0.90)", "florist", 5.0, 200.0, tau=0.9), _row("fedit", "fedit", 10.0, 1.0),
            _row("flexlora", "flexlora", None, None, skipped="quick mode: slow"),
            _row("fraq (tau=0.95)", "fraq", 40.0, 20.0, tau=0.95)]
    for r, flops in zip(rows, (2e9, 1e8, None, 1e8)):  # a CPU judges the speed-ups against the FLOP models
        if flops:
            r.update(flops_table5=flops, flops_full=flops)
    write_result(tmp_path / "results", "tables123", "roberta-base",
                 {"table": "tables123", "preset": "roberta-base", "size": "paper"},
                 {"preset": "roberta-base", "rows": rows})
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        assert main(["--out", str(tmp_path), "--no-pdf"]) == 0
    assert not [str(w.message) for w in issued if issubclass(w.category, UserWarning)]
    out, err = capsys.readouterr()
    assert "Warning" not in err and "Warning" not in out
    summary = out.splitlines()[-1]
    assert re.fullmatch(r"not measured: 1 verdict; machine busy: \d+ verdicts? withheld \(listed in .*report\.md, "
                        r"under 'Not measured or skipped'\)", summary), out
    text = (tmp_path / "report.md").read_text()
    claims = next(x for x in text.splitlines() if x.startswith("- Paper: FRAQ requires"))
    assert "not measured: FlexLoRA (flexlora) (quick mode: slow)" in claims  # per verdict, in the report
    assert "withheld: machine busy" in claims and "load average" not in claims
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)  # no value printed for a verdict withheld or not measured
    listed = text.split("## Not measured or skipped")[1].splitlines()
    assert sum("machine was busy" in x for x in listed) == 1 and sum("quick mode: slow" in x for x in listed) == 1


def test_a_folder_whose_every_result_is_unreadable_names_each_file_and_why(tmp_path, capsys):
    """Nothing to draw because every file was skipped: the console names each file with why
    (not "see the warnings" with none shown), and report.md lists them under *Not measured
    or skipped*; status 2, as for a folder without results."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    from analysis.reproduce import main

    folder = tmp_path / "results" / "fig3"
    folder.mkdir(parents=True)
    broken, stranger, bare = folder / "a.json", folder / "b.json", folder / "c.json"
    broken.write_text("{not json")
    stranger.write_text(json.dumps([1, 2]))
    bare.write_text(json.dumps({"experiment": "fig3"}))
    whys = {broken: "not readable as JSON", stranger: "a JSON list, not a result object",
            bare: "not a result file (no config, result, machine)"}
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        assert main(["--out", str(tmp_path), "--no-pdf"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "see the warnings" not in err and err.startswith("error: no readable result file"), err
    assert not [w for w in issued if issubclass(w.category, UserWarning)]  # said once, in the error
    listed = (tmp_path / "report.md").read_text().split("## Not measured or skipped")[1]
    for path, why in whys.items():
        assert f"- skipped {path}: {why}" in err, err
        assert f"- skipped {path}: {why}" in listed, listed
    assert str(tmp_path / "report.md") in err


def test_a_folder_without_result_files_writes_no_report(tmp_path, capsys):
    from analysis.reproduce import main

    (tmp_path / "results").mkdir()
    assert main(["--out", str(tmp_path), "--no-pdf"]) == 2
    assert "no result files under" in capsys.readouterr().err and not (tmp_path / "report.md").exists()
