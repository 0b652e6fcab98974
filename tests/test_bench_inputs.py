"""The benchmark layer's inputs: a damaged cache entry is rebuilt (named), an unwritable cache
directory falls back to a temporary one (with a warning), and a bad environment variable or
``--out`` is one line naming it, before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import cases

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """cases' disk cache in a fresh directory, the in-memory caches empty."""
    d = tmp_path / "cache"
    monkeypatch.setattr(cases, "CACHE_DIR", str(d))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    def clear():
        cases.clear_caches()
        if hasattr(cases, "cache_dir"):
            cases.cache_dir.cache_clear()

    clear()
    yield d
    clear()


def entries(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.suffix == ".pt")


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_a_damaged_cache_entry_is_rebuilt_and_named(cache, capsys, damage):
    Bs, As = cases.clients(6, 5, (2, 3), 2)
    (path,) = entries(cache)
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"not a zip"}[damage])
    cases.clear_caches()
    Bs2, As2 = cases.clients(6, 5, (2, 3), 2)
    assert all(torch.equal(a, b) for a, b in zip(Bs + As, Bs2 + As2))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "rebuilding" in err and "Traceback" not in err
    assert torch.load(path)["value"][0][0].shape == (2, 6, 2)  # replaced by a whole entry


def _unwritable(cache: Path, how: str) -> None:
    if how == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only directory")
        cache.mkdir()
        cache.chmod(0o555)
    else:  # a path under a regular file: never creatable, root or not
        cache.parent.joinpath("file").write_text("x")
        cases.CACHE_DIR = str(cache.parent / "file" / "cache")


@pytest.mark.parametrize("how", ["read-only", "under a file"])
def test_an_unwritable_cache_directory_falls_back_to_a_temporary_one(cache, capsys, how, tmp_path):
    _unwritable(cache, how)
    try:
        Bs, _ = cases.clients(6, 5, (2,), 1)
    finally:
        if cache.exists():
            cache.chmod(0o755)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and cases.CACHE_DIR in err and "temporary" not in err.split(";")[0]
    fallback = Path(err.rsplit("caching in ", 1)[1].split(" instead")[0])
    assert fallback.parent == tmp_path / "tmp" and len(entries(fallback)) == 1 and Bs[0].shape == (1, 6, 2)


@pytest.mark.integration
@pytest.mark.parametrize("value", ["two", "0", "-1", "1.5"])
def test_a_bad_thread_count_in_the_environment_is_one_line(value):
    r = subprocess.run([sys.executable, "-c", "import benchmarks.cases"], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "FRAQ_BENCH_THREADS": value, "PYTHONPATH": str(REPO)})
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"error: FRAQ_BENCH_THREADS(={value!r}) must be a positive integer, " \
                               f"e.g. FRAQ_BENCH_THREADS=1"


def test_regress_reads_the_thread_count_the_same_way(monkeypatch):
    from benchmarks import regress

    monkeypatch.setenv("FRAQ_BENCH_THREADS", "many")
    with pytest.raises(SystemExit, match=r"FRAQ_BENCH_THREADS\(='many'\)"):
        regress.main(["--commits", "2"])


@pytest.fixture
def runner(monkeypatch):
    from benchmarks import run

    monkeypatch.setattr(run, "run", lambda *a, **k: pytest.fail("the run started before its inputs were checked"))
    return run


@pytest.mark.parametrize("kind", ["file", "under a file", "fifo"])
def test_run_out_that_is_not_a_directory_is_one_line_before_any_work(runner, tmp_path, capsys, kind):
    f = tmp_path / "results.json"
    if kind == "fifo":
        os.mkfifo(f)
    else:
        f.write_text("mine")
    out = f / "sub" if kind == "under a file" else f
    assert runner.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --out(=") and str(out) in err and "Traceback" not in err
    assert "not a directory" in err


@pytest.mark.parametrize("var, value, needle", [
    ("FRAQ_ADAPTERS", "missing.safetensors", "FRAQ_ADAPTERS(='missing.safetensors')"),
    ("FRAQ_ADAPTERS", "garbage", "FRAQ_ADAPTERS(="),
    ("FRAQ_BENCH_DEVICE", "gpu", "FRAQ_BENCH_DEVICE(='gpu')"),
])
def test_a_bad_environment_variable_of_the_runner_is_one_line(runner, tmp_path, monkeypatch, capsys, var, value,
                                                              needle):
    if value == "garbage":
        (tmp_path / "g.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
        value = str(tmp_path / "g.safetensors")
    monkeypatch.setenv(var, value)
    assert runner.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err
    if var == "FRAQ_ADAPTERS":
        with pytest.raises(ValueError, match="FRAQ_ADAPTERS"):  # the asv suite's path names it too
            cases.fidelity_modules()


WORK = {  # module -> (argv before --out, the attribute that starts the work); the runner: above
    "benchmarks.roofline": ([], "fraq._machine.machine_record"),
}


@pytest.mark.parametrize("module", list(WORK))
def test_every_results_writer_refuses_an_out_file_before_any_work(module, tmp_path, monkeypatch, capsys):
    import importlib

    mod = importlib.import_module(module)
    argv, work = WORK[module]

    def started(*a, **k):
        pytest.fail("the work started before --out was checked")

    if work == "TABLES":
        monkeypatch.setattr(mod, "TABLES", {"t1": started})
    elif "." in work:
        monkeypatch.setattr(work, started)
    else:
        monkeypatch.setattr(mod, work, started)
    f = tmp_path / "results"
    f.write_text("mine")
    with pytest.raises(SystemExit) as e:
        mod.main([*argv, "--out", str(f)])
    assert e.value.code == 2 and f.read_text() == "mine"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out(={str(f)!r}) is a file, not a directory" in err


def test_a_result_file_is_replaced_whole_keeping_its_mode(tmp_path):
    from benchmarks.results import write_result

    path = write_result(tmp_path, "demo", "k", {"a": 1}, {"b": 2})
    path.chmod(0o600)
    link = tmp_path / "demo" / "l.json"
    link.symlink_to(path.name)
    write_result(tmp_path, "demo", "k", {"a": 1}, {"b": 3})
    write_result(tmp_path, "demo", "l", {"a": 1}, {"b": 4})
    assert (path.stat().st_mode & 0o777) == 0o600 and link.is_symlink()
    assert json.loads(path.read_text())["result"] == {"b": 4}
    assert sorted(p.name for p in path.parent.iterdir()) == ["k.json", "l.json"]


@pytest.mark.parametrize("other", [dict(m=4, n=5, ranks=(2, 3), batch=2, seed=0),  # other shapes
                                   dict(m=6, n=5, ranks=(2, 3), batch=2, seed=1)])  # same shapes, other seed
def test_an_entry_of_other_inputs_is_rebuilt_and_named(cache, capsys, other):
    """An entry whose tensors were built from other arguments (moved or copied into this key's
    file) is not measured as this key's inputs: it is rebuilt, with one line naming it."""
    want = cases.clients(6, 5, (2, 3), 2)
    (path,) = entries(cache)
    cases.clear_caches()
    path.unlink()
    cases.clients(other["m"], other["n"], other["ranks"], other["batch"], other["seed"])
    (wrong,) = entries(cache)
    wrong.replace(path)  # the other inputs under this key's name
    cases.clear_caches()
    capsys.readouterr()
    got = cases.clients(6, 5, (2, 3), 2)
    assert all(torch.equal(a, b) for a, b in zip(want[0] + want[1], got[0] + got[1]))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "does not match its key" in err


def test_a_key_matching_entry_with_wrong_tensors_is_rebuilt(cache, capsys):
    want = cases.clients(6, 5, (2, 3), 2)
    (path,) = entries(cache)
    entry = torch.load(path)
    entry["value"][0][1] = entry["value"][0][1][:, :4]  # client 1's B cut to 4 rows
    torch.save(entry, path)
    cases.clear_caches()
    got = cases.clients(6, 5, (2, 3), 2)
    assert all(torch.equal(a, b) for a, b in zip(want[0] + want[1], got[0] + got[1]))
    assert "client 1's factors" in capsys.readouterr().err
