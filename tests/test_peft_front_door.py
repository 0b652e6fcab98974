"""``fraq aggregate``'s front door: outputs swapped in whole, inputs never
written, every bad input refused before any work with one line naming the file and the value.

Faults are injected at each step of the writer (an exception in-process, ``kill -9`` in a child
process); after each, the output must be the complete old adapter or the complete new one, as
peft's ``PeftModel.from_pretrained`` loads it: its per-module products equal the old or the new
written factors to float32 rounding (4 eps32, relative).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
import safetensors.torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import fraq._files  # noqa: E402
from fraq import cli  # noqa: E402
from fraq.peft import aggregate_adapters, example_clients  # noqa: E402

EPS32 = torch.finfo(torch.float32).eps
REPO = Path(__file__).resolve().parents[1]

# transformers deprecations that peft 0.21.2 triggers; peft's fan_in_fan_out notes
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """A tiny BERT (root/base) and 3 peft adapters of it; the old (tau 0.5) and new (tau 1)
    aggregates written over each other in the tests."""
    root = tmp_path_factory.mktemp("front")
    dirs = example_clients(root, clients=3)
    old = aggregate_adapters(dirs, None, tau=0.5)
    new = aggregate_adapters(dirs, None, tau=1.0)
    assert old.ranks != new.ranks
    return root, dirs, {"old": old, "new": new}


def loaded(root: Path, out: Path) -> dict[str, torch.Tensor]:
    """module -> the delta peft applies, from ``out`` loaded with PeftModel.from_pretrained."""
    from peft.tuners.lora import LoraLayer

    model = peft.PeftModel.from_pretrained(transformers.BertModel.from_pretrained(root / "base"), out)
    prefix = "base_model.model."
    return {n[len(prefix):]: m.get_delta_weight("default") for n, m in model.named_modules()
            if isinstance(m, LoraLayer)}


def version(root: Path, out: Path, versions: dict) -> str:
    """Which aggregate ``out`` holds, as peft loads it; fails when it is neither, or unloadable."""
    got = loaded(root, out)
    for name, agg in versions.items():
        if set(got) == set(agg.factors) and all(
                float(torch.linalg.matrix_norm(got[m].double() - B.double() @ A.double()))
                <= 4 * EPS32 * float(torch.linalg.matrix_norm(B.double() @ A.double()))
                for m, (B, A) in agg.factors.items()):
            return name
    raise AssertionError(f"{out} holds neither version")


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def run_cli(args, capsys) -> tuple[int, str]:
    rc = cli.main(["aggregate", *map(str, args)])
    return rc, capsys.readouterr().err


def refused(rc: int, err: str, *needles: str) -> None:
    """Exit 2, one line ``fraq aggregate: error: ...`` naming every needle, no traceback."""
    assert rc == 2, err
    assert err.startswith("fraq aggregate: error: ") and err.count("\n") == 1, err
    for n in needles:
        assert str(n) in err, (n, err)


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() if p.is_file() else None for p in sorted(d.iterdir())}


# --- 1. --overwrite swaps the directory in whole -----------------------------------------------

def _fail(*a, **k):
    raise OSError(errno.EIO, "injected failure")


def _second_replace_fails(real):
    calls = []

    def replace(src, dst):
        calls.append(src)
        if len(calls) == 2:  # the fallback's second rename: the new one in, after the old one aside
            raise OSError(errno.EIO, "injected failure")
        return real(src, dst)
    return replace


def _config_not_replaceable(m, out):
    """``chattr +i out/adapter_config.json``: that file cannot be replaced."""
    real = os.replace

    def replace(src, dst):
        if Path(dst) == out / "adapter_config.json":
            raise PermissionError(errno.EPERM, "Operation not permitted (injected)", str(dst))
        return real(src, dst)
    m.setattr(os, "replace", replace)


def _fault_after_swap(m, out):
    real = fraq._files._fsync
    m.setattr(fraq._files, "_fsync", lambda p: _fail() if Path(p) == out.parent else real(p))


FAULTS = {  # step -> (install the fault with monkeypatch m, the version left at out; None: no error)
    "immutable config": (_config_not_replaceable, None),
    "weights": (lambda m, out: m.setattr(safetensors.torch, "save_file", _fail), "old"),
    "config": (lambda m, out: m.setattr(Path, "write_text", _fail), "old"),
    "flush": (lambda m, out: m.setattr(fraq._files, "_fsync_tree", _fail), "old"),
    "exchange": (lambda m, out: m.setattr(fraq._files, "exchange", _fail), "old"),
    "fallback": (lambda m, out: (m.setattr(fraq._files, "_renameat2", lambda a, b: False),
                                 m.setattr(os, "replace", _second_replace_fails(os.replace))), "old"),
    "after swap": (_fault_after_swap, "new"),
}


@pytest.mark.parametrize("step", list(FAULTS))
def test_overwrite_failure_at_each_step_leaves_old_or_new_adapter(example, tmp_path, monkeypatch, step):
    root, dirs, versions = example
    out = tmp_path / "merged"
    aggregate_adapters(dirs, out, tau=0.5)
    (out / "notes.txt").write_text("mine")
    install, expected = FAULTS[step]
    with monkeypatch.context() as m:
        install(m, out)
        if expected is None:  # the directory is swapped whole: its old files are never replaced one by one
            aggregate_adapters(dirs, out, tau=1.0, overwrite=True)
        else:
            with pytest.raises(OSError, match="injected"):
                aggregate_adapters(dirs, out, tau=1.0, overwrite=True)
    assert version(root, out, versions) == (expected or "new")
    assert (out / "notes.txt").read_text() == "mine"
    assert leftovers(out) == []
    aggregate_adapters(dirs, out, tau=1.0, overwrite=True)  # and the next run goes through
    assert version(root, out, versions) == "new"


def test_an_old_version_that_cannot_be_removed_is_named(example, tmp_path, monkeypatch, capsys):
    """``chattr +i out/adapter_config.json``, as the kernel has it: the directory is
    swapped whole, so the new adapter goes in (exit 0), but the old copy, whose config cannot be
    unlinked, stays behind as a hidden directory: one warning line names it, never silence."""
    root, dirs, versions = example
    out = tmp_path / "merged"
    aggregate_adapters(dirs, out, tau=0.5)
    real = os.unlink

    def unlink(path, *args, **kwargs):
        if os.path.basename(os.fspath(path)) == "adapter_config.json":
            raise PermissionError(errno.EPERM, "Operation not permitted (injected: immutable)")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    rc, err = run_cli([*dirs, "--tau", "1", "-o", out, "--overwrite"], capsys)
    monkeypatch.undo()
    assert rc == 0, err
    assert version(root, out, versions) == "new"
    [left] = leftovers(out)
    assert sorted(p.name for p in (out.parent / left).iterdir()) == ["adapter_config.json"]  # the rest removed
    warnings = [line for line in err.splitlines() if line.startswith("fraq aggregate: warning: ")]
    assert len(warnings) == 1 and "Traceback" not in err, err
    assert f"{out} was replaced, but the old version of it at {out.parent / left} could not be removed" in warnings[0]
    assert "adapter_config.json left" in warnings[0]


_CHILD = r"""
import os, signal, sys
import fraq._files as F
step, args = sys.argv[1], sys.argv[2:]
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
if step == "weights":  # the new weights written, its config not yet
    import safetensors.torch as st
    real_save = st.save_file
    def save(*a, **k):
        real_save(*a, **k)
        die()
    st.save_file = save
elif step == "exchange":  # the new directory complete, not swapped in
    F.exchange = die
elif step == "swapped":  # swapped in, the old version not yet removed
    real_swap = F._renameat2
    def swap(a, b):
        assert real_swap(a, b)
        die()
    F._renameat2 = swap
elif step == "cleanup":  # while removing the old version
    import shutil
    shutil.rmtree = die
from fraq import cli
sys.exit(cli.main(["aggregate", *args]))
"""


@pytest.mark.integration
@pytest.mark.parametrize("step, expected", [("weights", "old"), ("exchange", "old"), ("swapped", "new"),
                                            ("cleanup", "new")])
def test_kill_9_at_each_step_leaves_old_or_new_adapter(example, tmp_path, step, expected):
    root, dirs, versions = example
    out = tmp_path / "merged"
    aggregate_adapters(dirs, out, tau=0.5)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, step, *map(str, dirs), "--tau", "1", "-o", str(out),
                           "--overwrite"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert version(root, out, versions) == expected
    assert len(leftovers(out)) <= 1  # at most the hidden temporary directory of the killed run
    aggregate_adapters(dirs, out, tau=1.0, overwrite=True)
    assert version(root, out, versions) == "new"


def test_overwrite_refuses_a_directory_with_subdirectories(example, tmp_path, capsys):
    _, dirs, _ = example
    out = tmp_path / "out"
    aggregate_adapters(dirs, out, tau=0.5)
    (out / "checkpoint-1").mkdir()
    before = snapshot(out)
    refused(*run_cli([*dirs, "-o", out, "--overwrite"], capsys), "checkpoint-1", "not plain files")
    assert snapshot(out) == before


def test_delta_failure_keeps_the_old_delta(example, tmp_path, monkeypatch):
    _, dirs, _ = example
    out = tmp_path / "d.safetensors"
    aggregate_adapters(dirs, out, delta=True, tau=0.5)
    before = out.read_bytes()
    monkeypatch.setattr(os, "replace", _fail)
    with pytest.raises(OSError, match="injected"):
        aggregate_adapters(dirs, out, delta=True, tau=1.0, overwrite=True)
    monkeypatch.undo()
    assert out.read_bytes() == before and leftovers(out) == []


# --- 2. --json ----------------------------------------------------------------------------------

def test_json_never_overwrites_a_file_without_overwrite(example, tmp_path, capsys):
    _, dirs, _ = example
    mine = tmp_path / "notes.json"
    mine.write_text("keep me")
    refused(*run_cli([*dirs, "--json", mine, "-o", tmp_path / "out"], capsys), str(mine), "--overwrite")
    assert mine.read_text() == "keep me" and not (tmp_path / "out").exists()  # before any work
    assert run_cli([*dirs, "--json", mine, "--overwrite"], capsys)[0] == 0
    assert json.loads(mine.read_text())["format"] == "fraq-aggregate-report/1"


def test_json_into_an_input_is_refused_even_with_overwrite(example, tmp_path, capsys):
    _, dirs, _ = example
    target = dirs[0] / "adapter_config.json"
    before = target.read_bytes()
    refused(*run_cli([*dirs, "--json", target, "--overwrite"], capsys), str(target), str(dirs[0]))
    assert target.read_bytes() == before


def test_json_directory_or_output_file_refused_before_any_work(example, tmp_path, capsys):
    _, dirs, _ = example
    (tmp_path / "reports").mkdir()
    refused(*run_cli([*dirs, "--json", tmp_path / "reports", "-o", tmp_path / "out"], capsys),
            str(tmp_path / "reports"), "is a directory")
    assert not (tmp_path / "out").exists()
    refused(*run_cli([*dirs, "--json", tmp_path / "out" / "adapter_config.json", "-o", tmp_path / "out"], capsys),
            "this run writes")
    assert not (tmp_path / "out").exists()
    refused(*run_cli([*dirs, "--json", tmp_path / "out", "-o", tmp_path / "out"], capsys),  # was: exit 1 after
            f"--json(={str(tmp_path / 'out')!r}) is", "this run writes")                  # the adapter was written
    assert not (tmp_path / "out").exists()


def test_json_written_whole(example, tmp_path, monkeypatch, capsys):
    _, dirs, _ = example
    report = tmp_path / "r.json"
    assert run_cli([*dirs, "--json", report], capsys)[0] == 0
    before = report.read_text()
    monkeypatch.setattr(os, "replace", _fail)
    rc, err = run_cli([*dirs, "--tau", "0.5", "--json", report, "--overwrite"], capsys)
    monkeypatch.undo()
    assert rc == 1 and "injected" in err
    assert report.read_text() == before and leftovers(report) == []


# --- 3. inputs are never written, and counted once ----------------------------------------------

def test_out_equal_inside_or_containing_an_input_refused_even_with_overwrite(example, tmp_path, capsys):
    root, dirs, _ = example
    before = snapshot(dirs[1])
    refused(*run_cli([*dirs, "-o", dirs[1], "--overwrite"], capsys), str(dirs[1]), "input")
    refused(*run_cli([*dirs, "-o", dirs[1] / "merged"], capsys), str(dirs[1]), "input")
    refused(*run_cli([*dirs, "-o", root, "--overwrite"], capsys), str(root), "contains the input")
    refused(*run_cli([*dirs, "--delta", "-o", dirs[1] / "adapter_model.safetensors", "--overwrite"], capsys),
            str(dirs[1]))
    link = tmp_path / "link"
    link.symlink_to(dirs[1])
    refused(*run_cli([*dirs, "-o", link, "--overwrite"], capsys), str(link), "input")
    assert snapshot(dirs[1]) == before and not (dirs[1] / "merged").exists()


def test_same_client_twice_refused_naming_both(example, tmp_path, capsys):
    _, dirs, _ = example
    refused(*run_cli([dirs[0], dirs[1], dirs[0], "--report"], capsys), "client_dirs[0]", "client_dirs[2]")
    link = tmp_path / "again"
    link.symlink_to(dirs[1])
    refused(*run_cli([dirs[0], dirs[1], link, "--report"], capsys), str(dirs[1]), str(link), "same directory")


# --- 4. errors that name the file and echo the value --------------------------------------------

def _config(edit):
    def apply(d: Path) -> None:
        cfg = json.loads((d / "adapter_config.json").read_text())
        (d / "adapter_config.json").write_text(json.dumps(edit(cfg)))
    return apply


def _tensors(edit):
    def apply(d: Path) -> None:
        t = load_file(d / "adapter_model.safetensors")
        save_file(edit(t), d / "adapter_model.safetensors")
    return apply


def _rank_zero(d: Path) -> None:
    _config(lambda c: {**c, "r": 0})(d)
    _tensors(lambda t: {k: v[:0] if ".lora_A." in k else v[:, :0] for k, v in t.items()})(d)


BAD_INPUTS = {  # name -> (edit of a copy of client 0 (r=4, alpha=8, no patterns), text the error must hold)
    "config list": (_config(lambda c: [1, 2]), "[1, 2], not a JSON object"),
    "config null": (_config(lambda c: None), "null, not a JSON object"),
    "rank_pattern regex": (_config(lambda c: {**c, "rank_pattern": {"query(": 2}}), "'query('"),
    "rank_pattern list": (_config(lambda c: {**c, "rank_pattern": ["query"]}), "rank_pattern(=['query'])"),
    "alpha_pattern list": (_config(lambda c: {**c, "alpha_pattern": ["value"]}), "alpha_pattern(=['value'])"),
    "alpha_pattern value": (_config(lambda c: {**c, "alpha_pattern": {"value": "big"}}), "'big'"),
    "r zero": (_rank_zero, "r(=0) must be a positive integer"),
    "r string": (_config(lambda c: {**c, "r": "4"}), "r(='4') has type str"),
    "float8": (_tensors(lambda t: {k: v.to(torch.float8_e4m3fn) for k, v in t.items()}), "float8_e4m3fn"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_one_line_naming_file_and_value(example, tmp_path, capsys, case):
    _, dirs, _ = example
    edit, text = BAD_INPUTS[case]
    bad = Path(shutil.copytree(dirs[0], tmp_path / "bad_client"))
    edit(bad)
    refused(*run_cli([dirs[1], bad, "-o", tmp_path / "out"], capsys), str(bad), text)
    assert not (tmp_path / "out").exists()


def test_huge_weights_normalize_without_overflow(example, capsys):
    _, dirs, _ = example
    huge = aggregate_adapters(dirs, None, weights=[1e308] * 3, tau=1.0)
    equal = aggregate_adapters(dirs, None, tau=1.0)
    assert huge.weights == equal.weights == (1 / 3,) * 3
    for m, (B, A) in huge.factors.items():
        assert torch.equal(B, equal.factors[m][0]) and torch.equal(A, equal.factors[m][1])
    assert run_cli([*dirs, "--weights", "1e308", "1e308", "1e308", "--report"], capsys)[0] == 0
    refused(*run_cli([*dirs, "--weights", "1", "inf", "1", "--report"], capsys), "weights[1](=inf)")


def test_result_beyond_the_output_dtype_refused(example, tmp_path, capsys):
    _, dirs, _ = example
    big = [Path(shutil.copytree(d, tmp_path / f"big{k}")) for k, d in enumerate(dirs)]
    for d in big:
        _tensors(lambda t: {k: v * 1e4 for k, v in t.items()})(d)
    refused(*run_cli([*big, "--dtype", "float16", "-o", tmp_path / "out"], capsys), "float16", "--dtype float32")
    assert not (tmp_path / "out").exists()


def test_example_adapters_appear_whole(example, tmp_path):
    root, dirs, _ = example
    cfg = json.loads((dirs[0] / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(root / "base")  # the path after the rename
    assert leftovers(root) == []  # built beside, renamed: no temporary directory left
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(ValueError, match="not an empty directory"):
        example_clients(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_report_with_json_on_stdout_keeps_stdout_pure_json(example, capsys):
    """``--report --json -``: stdout is one JSON document; the table goes to stderr."""
    _, dirs, _ = example
    assert cli.main(["aggregate", *map(str, dirs), "--tau", "0.9", "--report", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["format"] == "fraq-aggregate-report/1" and len(report["rows"]) == 13
    assert "rel err" in err and "total (13 modules)" in err


def test_example_adapters_load_from_any_directory(tmp_path, monkeypatch):
    """Written through a relative path, the adapters (and an aggregate of them) record the base
    model's absolute path, so AutoPeftModel loads them from any working directory."""
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    dirs = [Path("work") / d for d in example_clients("ex", clients=2)]
    monkeypatch.chdir(tmp_path)
    aggregate_adapters(dirs, "merged", tau=1.0)
    monkeypatch.chdir(tmp_path / "elsewhere")
    base = json.loads((tmp_path / "merged" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str(tmp_path / "work" / "ex" / "base")
    for d in (tmp_path / "work" / "ex" / "client0", tmp_path / "merged"):
        model = peft.AutoPeftModel.from_pretrained(d)
        assert isinstance(model, peft.PeftModel)


def test_method_options_in_the_spec_equal_the_flags(example, capsys):
    """``--method fraq:tau=0.9,backend=householder`` is ``--tau 0.9`` with that backend; a key set
    both ways is refused, naming both."""
    _, dirs, _ = example
    assert cli.main(["aggregate", *map(str, dirs), "--tau", "0.9", "--json", "-"]) == 0
    flags = json.loads(capsys.readouterr().out)["rows"]
    assert cli.main(["aggregate", *map(str, dirs), "--method", "fraq:tau=0.9,backend=householder", "--json", "-"]) == 0
    spec = json.loads(capsys.readouterr().out)["rows"]
    assert [r["rank"] for r in spec] == [r["rank"] for r in flags]
    rc, err = run_cli([*dirs, "--method", "fraq:tau=0.9", "--tau", "0.8", "--json", "-"], capsys)
    refused(rc, err, "--tau(=0.8)", "--method(='fraq:tau=0.9')")
    rc, err = run_cli([*dirs, "--method", "fraq:cholesky", "--json", "-"], capsys)
    refused(rc, err, "write 'fraq:backend=cholesky'")


def test_aggregate_prints_the_certificate_unless_told_not_to(example, tmp_path, capsys):
    """The worst module's certificate goes to stderr; --report adds a column per module and
    --json a field per row; at --tau 1 (float64 arithmetic) it is at the rounding level."""
    root, dirs, _ = example
    rc = cli.main(["aggregate", *map(str, dirs), "--tau", "1", "--report"])
    out, err = capsys.readouterr()
    assert rc == 0 and "certificate" in out.splitlines()[0]
    assert re.search(r"certificate \(.*worst of \d+ modules\): \S+: <= \S+ \(rounding level\)", err), err
    rc = cli.main(["aggregate", *map(str, dirs), "--tau", "0.5", "--json", "-"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    worst = max(r["certificate"]["bound"] for r in doc["rows"])
    assert rc == 0 and doc["certificate"]["certificate_bound"] == worst > 1e-3
    assert all(abs(r["certificate"]["error"] - r["rel_error"]) < 1e-6 for r in doc["rows"])  # the QR-form report
    rc = cli.main(["aggregate", *map(str, dirs), "--report", "--no-certificate"])
    out, err = capsys.readouterr()
    assert rc == 0 and "certificate" not in out + err


def test_aggregate_prints_the_probe_certificate_with_its_probability(example, capsys):
    """--probe-certificate: the line says "<= b with probability 0.999"; in --json each row's
    bound lies over its report error (the QR-form float64 reference) and says its probes and
    seed; --no-certificate with it is refused."""
    root, dirs, _ = example
    rc = cli.main(["aggregate", *map(str, dirs), "--tau", "0.5", "--probe-certificate", "--json", "-"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert rc == 0 and re.search(r"certificate \(.*worst of \d+ modules\): \S+: \S+ \(<= \S+ with probability 0\.999\)",
                                 err), err
    for r in doc["rows"]:
        c = r["certificate"]
        assert r["rel_error"] <= c["bound"] and c["probes"] == 8 and c["seed"] == 0
        printed = re.fullmatch(r"<= (\S+) with probability 0\.999", c["verdict"])
        assert printed and c["bound"] <= float(printed.group(1)) <= c["bound"] * 1.01  # rounded up, 3 digits
    assert doc["certificate"]["certificate_probability"] == 0.999
    with pytest.raises(SystemExit):
        cli.main(["aggregate", *map(str, dirs), "--report", "--no-certificate", "--probe-certificate"])
    assert "--no-certificate and --probe-certificate: give one" in capsys.readouterr().err


def _raise_on_constant(name):
    raise ValueError(f"not strict JSON: {name}")


def _with_lora_B(src: Path, dest: Path, edit) -> Path:
    """A copy of the adapter ``src`` at ``dest`` with every ``lora_B`` weight replaced by ``edit(B)``."""
    shutil.copytree(src, dest)
    tensors = load_file(dest / "adapter_model.safetensors")
    save_file({k: edit(v) if "lora_B" in k else v for k, v in tensors.items()}, dest / "adapter_model.safetensors")
    return dest


@pytest.mark.parametrize("case", ["untrained", "cancelling"])
def test_json_on_a_zero_aggregate_is_strict_and_says_it_cannot_judge(example, tmp_path, capsys, case):
    """Untrained adapters (every ``lora_B`` zero, as peft initialises them) and two that cancel
    exactly: the --json report parses with a strict parser, the bound is null with a note in
    words, and the certificate line says in words that it cannot judge."""
    root, dirs, _ = example
    if case == "untrained":
        clients = [_with_lora_B(d, tmp_path / f"z{i}", torch.zeros_like) for i, d in enumerate(dirs[:2])]
    else:
        clients = [dirs[0], _with_lora_B(dirs[0], tmp_path / "minus", torch.neg)]
    rc = cli.main(["aggregate", *map(str, clients), "--json", "-"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out, parse_constant=_raise_on_constant)
    assert doc["certificate"]["certificate_bound"] is None
    assert doc["certificate"]["certificate_note"].startswith("cannot judge: the exact aggregate is zero")
    for row in doc["rows"]:
        assert row["certificate"]["bound"] is None and row["certificate"]["bound_note"].startswith("cannot judge")
    line = [x for x in err.splitlines() if x.startswith("certificate")]
    assert len(line) == 1 and "cannot judge" in line[0] and "inf" not in line[0], err


def _printed_bound(err: str) -> float:
    """The bound on the certificate line: ``<= b`` (rounding level) or ``e (<= b)``."""
    line = next(ln for ln in err.splitlines() if ln.startswith("certificate ("))
    return float(re.search(r"<= (\S+?)\)?(?: |$)", line.split(": ", 1)[1]).group(1))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("delta", [False, True])
def test_certificate_line_bounds_what_was_written(example, tmp_path, capsys, dtype, delta):
    """The printed bound covers the adapter (or delta file) as written in ``--dtype``: its
    worst module's relative distance from the inputs' exact aggregate, both formed in
    float64 from the files (sum_k a_k s_k B_k A_k, a_k = the weights over their sum), never
    exceeds it. A bfloat16 cast errs by up to 2^-8 per entry, far above the float64
    factors' rounding level."""
    from fraq.peft.reader import read_adapter

    root, dirs, _ = example
    weights = [3.0, 1.0, 2.0]
    out = tmp_path / ("d.safetensors" if delta else "out")
    args = [*dirs, "--tau", "1", "--dtype", dtype, "--weights", *weights, "-o", out]
    rc, err = run_cli([*args, "--delta", "--base", root / "base"] if delta else args, capsys)
    assert rc == 0, err
    bound = _printed_bound(err)
    ins = [read_adapter(d) for d in dirs]
    a = [w / sum(weights) for w in weights]
    if delta:
        written = {m: t.double() for m, t in load_file(out).items()}
    else:
        w = read_adapter(out)
        written = {f"{m}.weight": w.scales[m] * (B.double() @ A.double()) for m, (B, A) in w.factors.items()}
    worst = 0.0
    for m in ins[0].factors:
        S = sum(ak * c.scales[m] * (c.factors[m][0].double() @ c.factors[m][1].double()) for ak, c in zip(a, ins))
        W = written[f"{m}.weight"]
        worst = max(worst, float(torch.linalg.matrix_norm(S - W.reshape(S.shape)) / torch.linalg.matrix_norm(S)))
    assert worst <= bound, (dtype, delta, worst, err)
