"""Every output path safe, every failure one clear line: the command-line front doors.

An output that is a symbolic link has its target replaced (the link stays); one that is not
a regular file (a FIFO, a socket) is refused before any work; a replaced output keeps its
mode; the current directory and a mount point are refused up front; a full disk or a
file-size limit ends in one line naming the output, which stays as it was. Each failure is
one line naming the path or the value, with no traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

peft = pytest.importorskip("peft")
pytest.importorskip("transformers")

from fraq import cli  # noqa: E402
from fraq.peft import aggregate_adapters, example_clients  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """Three peft adapters of a tiny BERT."""
    return example_clients(tmp_path_factory.mktemp("clients"), clients=3)


@pytest.fixture
def short_tmp():
    """A directory with a short path (a socket's path is limited to about 100 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="fq", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run_cli(args, capsys) -> tuple[int, str]:
    rc = cli.main([*map(str, args)])
    return rc, capsys.readouterr().err


def one_line(err: str, *needles) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert str(n) in err, (n, err)


def make_special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))


def aggregate_args(dirs, flag: str, path: Path) -> list:
    return ["aggregate", *dirs, "--json", path] if flag == "--json" else ["aggregate", *dirs, "--delta", "-o", path]


# --- 1. a symbolic link is followed; anything but a regular file is refused ------------------------

@pytest.mark.parametrize("kind", ["fifo", "socket"])
@pytest.mark.parametrize("flag", ["--json", "--delta"])
def test_a_non_regular_output_is_refused_before_any_work(dirs, short_tmp, capsys, kind, flag):
    target = short_tmp / "p"
    make_special(kind, target)
    out = short_tmp / "merged"
    extra = ["-o", out] if flag == "--json" else []
    rc, err = run_cli([*aggregate_args(dirs, flag, target), *extra, "--overwrite"], capsys)
    assert rc == 2 and err.startswith("fraq aggregate: error: "), err
    one_line(err, repr(str(target)), "not a regular file")
    if flag == "--json":
        assert "'-' writes to stdout" in err
    mode = os.lstat(target).st_mode
    assert (stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISSOCK(mode)) and not out.exists()


@pytest.mark.parametrize("flag", ["--json", "--delta"])
def test_a_symlinked_output_replaces_its_target_and_keeps_the_link(dirs, tmp_path, capsys, flag):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "file"
    target.write_text("old")
    link = tmp_path / "link"
    link.symlink_to(Path("real") / "file")  # relative, as ln -s writes it
    assert run_cli([*aggregate_args(dirs, flag, link), "--overwrite"], capsys)[0] == 0
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "file")
    assert target.read_bytes() != b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["file"]


def test_dash_writes_the_json_to_stdout(dirs, capsys):
    assert cli.main(["aggregate", *map(str, dirs), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "fraq-aggregate-report/1"


# --- 3. a replaced output keeps its mode; a new one gets the umask's ---------------------------

def test_a_replaced_output_keeps_its_mode_and_a_new_one_gets_the_umask(dirs, tmp_path, capsys):
    report, delta, out = tmp_path / "r.json", tmp_path / "d.safetensors", tmp_path / "merged"
    common = ["aggregate", *dirs]
    assert run_cli([*common, "--json", report, "-o", out], capsys)[0] == 0
    assert run_cli([*common, "--delta", "-o", delta], capsys)[0] == 0
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(report.stat().st_mode) == 0o666 & ~mask == stat.S_IMODE(delta.stat().st_mode)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    report.chmod(0o600)
    delta.chmod(0o640)
    out.chmod(0o700)
    (out / "adapter_config.json").chmod(0o600)
    assert run_cli([*common, "--tau", "0.5", "--json", report, "-o", out, "--overwrite"], capsys)[0] == 0
    assert run_cli([*common, "--tau", "0.5", "--delta", "-o", delta, "--overwrite"], capsys)[0] == 0
    assert stat.S_IMODE(report.stat().st_mode) == 0o600 and stat.S_IMODE(delta.stat().st_mode) == 0o640
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "adapter_config.json").stat().st_mode) == 0o600  # a file in it too
    assert stat.S_IMODE((out / "adapter_model.safetensors").stat().st_mode) == 0o666 & ~mask


# --- 5. an output that cannot be swapped is refused before the work ----------------------------

def test_the_current_directory_or_a_mount_point_is_refused_before_any_work(dirs, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    rc, err = run_cli(["aggregate", *dirs, "-o", "."], capsys)
    assert rc == 2
    one_line(err, "current directory", "subdirectory")
    assert list(work.iterdir()) == []
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == mnt or real(p))
    rc, err = run_cli(["aggregate", *dirs, "-o", mnt], capsys)
    assert rc == 2
    one_line(err, repr(str(mnt)), "mount point", "subdirectory")
    with pytest.raises(SystemExit) as e:
        cli.main(["example-adapters", "."])
    assert e.value.code == 2 and "current directory" in capsys.readouterr().err and list(work.iterdir()) == []


# --- 4. a full disk or a file-size limit: one line, the old output intact ------------------------

@contextlib.contextmanager
def file_size_limit(nbytes: int):
    """Writes past ``nbytes`` fail with EFBIG, as on a full disk (Python ignores SIGXFSZ)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.parametrize("delta", [True, False])
def test_a_write_past_the_file_size_limit_is_one_line_and_keeps_the_old_output(dirs, tmp_path, capsys, delta):
    out = tmp_path / ("d.safetensors" if delta else "merged")
    args = ["aggregate", *dirs, "-o", out, *(["--delta"] if delta else [])]
    assert run_cli(args, capsys)[0] == 0
    before = out.read_bytes() if delta else {p.name: p.read_bytes() for p in out.iterdir()}
    with file_size_limit(512):
        rc, err = run_cli([*args, "--tau", "0.5", "--overwrite"], capsys)
    assert rc == 1, err
    one_line(err, "fraq aggregate: error: cannot write", str(out.resolve() if not delta else out), "ulimit -f")
    assert (out.read_bytes() if delta else {p.name: p.read_bytes() for p in out.iterdir()}) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_checkpoint_past_the_file_size_limit_names_its_path(tmp_path):
    from fraq.federated.checkpoint import RoundState, load_checkpoint, save_checkpoint

    st = RoundState(1, {"q": torch.ones(2, 2)}, {"weight": torch.zeros(2, 2)}, [None], None, [{"round": 1}])
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, st, {"method": "fedit"})
    big = RoundState(2, {"q": torch.zeros(64, 64)}, st.head, [None], None, [{"round": 1}, {"round": 2}])
    with file_size_limit(4096), pytest.raises(OSError, match=f"cannot write {path}") as e:
        save_checkpoint(path, big, {"method": "fedit"})
    assert "\n" not in str(e.value) and load_checkpoint(path, {"method": "fedit"}).round == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


# --- the export: a truncated round file, a full disk ---------------------------------------------

@pytest.fixture
def round_file(tmp_path) -> Path:
    from fraq.aggregators import ClientUpdate
    from fraq.federated.adapters import save_client_adapters

    g = torch.Generator().manual_seed(0)
    ups = [ClientUpdate({"encoder.layer.0.attention.self.query": (torch.randn(32, 2, generator=g),
                                                                  torch.randn(2, 32, generator=g))},
                        scale=2.0, weight=1.0 + k) for k in range(2)]
    return save_client_adapters(tmp_path / "round1.safetensors", ups, {"method": "fedit", "round": 1, "model": "m"})


@pytest.mark.parametrize("keep", [0.5, 0.99, 8])
def test_a_truncated_round_file_given_to_the_export_is_one_line(round_file, tmp_path, capsys, keep):
    from fraq.federated.export_cli import main as export_main

    data = round_file.read_bytes()
    round_file.write_bytes(data[:int(len(data) * keep) if keep < 1 else keep])
    assert export_main([str(round_file), str(tmp_path / "out"), "--base-model", "m"]) == 2
    one_line(capsys.readouterr().err, repr(str(round_file)), "truncated or damaged")
    assert not (tmp_path / "out").exists()


def test_an_export_past_the_file_size_limit_is_one_line(round_file, tmp_path, capsys):
    from fraq.federated.export_cli import main as export_main

    out = tmp_path / "out"
    with file_size_limit(256):
        rc = export_main([str(round_file), str(out), "--base-model", "m"])
    assert rc == 1
    one_line(capsys.readouterr().err, "cannot write", str(out), "ulimit -f")
    assert not out.exists()


# --- 8. fraq example-adapters under a file; the command line's start-up ---------------------------

def test_example_adapters_under_a_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(SystemExit) as e:
        cli.main(["example-adapters", str(f / "sub")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("fraq example-adapters: error: ") and "Traceback" not in err
    assert str(f) in err and "not a directory" in err and f.read_text() == "mine"


def test_an_unknown_method_is_refused_naming_the_registry(capsys, tmp_path):
    """The command keeps no list of its own: the registry answers, with every method it holds."""
    from fraq.aggregators import AGGREGATORS

    assert cli.main(["aggregate", str(tmp_path), "--method", "nosuch", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    one_line(err, "aggregator(='nosuch') is not one of", *AGGREGATORS)
    assert not (tmp_path / "out").exists()


def test_the_demo_stub_is_gone_and_an_unknown_command_is_one_line(capsys):
    assert cli.main(["demo"]) == 2
    one_line(capsys.readouterr().err, "unknown command 'demo'", "aggregate", "example-adapters")
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "aggregate" in out and "demo" not in out
    assert cli.main([]) == 2 and "usage: fraq COMMAND" in capsys.readouterr().err


def test_help_and_a_bad_argument_answer_without_importing_torch():
    """``fraq aggregate --help`` took about 1 s, all of it importing torch."""
    code = ("import sys, contextlib, io\nfrom fraq import cli\n"
            "for argv in (['aggregate', '--help'], ['aggregate', 'x', '--tau', 'half'], ['--help']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "        try:\n            cli.main(argv)\n        except SystemExit:\n            pass\n"
            "print(sorted(m for m in ('torch', 'safetensors', 'peft', 'transformers') if m in sys.modules))")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)
    assert time.perf_counter() - t0 < 5  # about 0.05 s; generous for a loaded machine


def test_lazy_package_names_are_the_functions():
    import fraq
    import fraq.aggregators  # noqa: F401  (imports the submodules fraq.recompress and fraq.stack)

    assert callable(fraq.recompress) and callable(fraq.stack) and "BACKENDS" in dir(fraq)
    from fraq import BACKENDS, RecompressResult, normalized_weights, register_backend, select_rank  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fraq.nope  # noqa: B018


# --- 1/8. the demo's --json ----------------------------------------------------------------------

@pytest.fixture
def demo(monkeypatch):
    import benchmarks.demo as demo

    monkeypatch.setattr(demo, "run_preset", lambda name, taus, **kw: [])  # the files, not the measurement
    return demo


@pytest.mark.parametrize("kind", ["dir", "fifo", "under a file"])
def test_demo_json_that_cannot_be_a_file_is_refused_before_any_work(demo, short_tmp, monkeypatch, capsys, kind):
    monkeypatch.setattr(demo, "run_preset", lambda *a, **k: pytest.fail("measured before checking --json"))
    p = short_tmp / "p"
    if kind == "dir":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        p.write_text("mine")
        p = p / "r.json"
    assert demo.main(["--preset", "roberta-base", "--json", str(p)]) == 2
    one_line(capsys.readouterr().err, repr(str(p)))
    assert kind != "fifo" or stat.S_ISFIFO(os.lstat(p).st_mode)


def test_demo_json_follows_a_link_and_keeps_the_mode(demo, tmp_path, capsys):
    target = tmp_path / "real.json"
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert demo.main(["--preset", "roberta-base", "--json", str(link)]) == 0
    assert link.is_symlink() and json.loads(target.read_text())["experiment"] == "demo"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


# --- 6. factors that require grad: aggregation works on their values -----------------------------

def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from _tensors(getattr(obj, name))


@pytest.mark.parametrize("method", ["fedit", "lora-a2", "flora", "fedex-lora", "flexlora", "florg", "florist", "fraq"])
def test_parameter_factors_aggregate_like_their_values(method):
    from fraq.aggregators import ClientUpdate, get_aggregator

    g = torch.Generator().manual_seed(1)
    A0 = torch.randn(2, 6, generator=g)  # one shared A: lora-a2's first round freezes A
    pairs = [(None if method == "florg" else torch.randn(5, 2, generator=g),
              torch.randn(2, 5 if method == "florg" else 6, generator=g) if method != "lora-a2" else A0.clone())
             for _ in range(2)]

    def updates(param: bool):
        wrap = (lambda t: None if t is None else torch.nn.Parameter(t.clone())) if param else (lambda t: t)
        return [ClientUpdate({"q": (wrap(B), wrap(A))}, scale=2.0, weight=1.0 + k) for k, (B, A) in enumerate(pairs)]

    plain = get_aggregator(method).aggregate(updates(False))
    live = get_aggregator(method).aggregate(updates(True))
    got, want = list(_tensors(live.downlinks)), list(_tensors(plain.downlinks))
    assert got and len(got) == len(want) and not any(t.requires_grad for t in got)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_recompress_of_requires_grad_inputs_returns_values():
    import fraq

    g = torch.Generator().manual_seed(2)
    B, A = torch.randn(7, 4, generator=g), torch.randn(4, 6, generator=g)
    res = fraq.recompress(B.clone().requires_grad_(), torch.nn.Parameter(A.clone()), tau=0.9)
    ref = fraq.recompress(B, A, tau=0.9)
    assert not res.B.requires_grad and not res.A.requires_grad
    assert torch.equal(res.B, ref.B) and torch.equal(res.A, ref.A)


@pytest.mark.parametrize("kind", ["meta", "sparse_coo", "sparse_csr"])
def test_meta_or_sparse_factors_are_one_line(kind):
    import fraq
    from fraq.aggregators import ClientUpdate, get_aggregator

    B, A = torch.randn(7, 4), torch.randn(4, 6)
    conv = {"meta": lambda t: t.to("meta"), "sparse_coo": lambda t: t.to_sparse(),
            "sparse_csr": lambda t: t.to_sparse_csr()}[kind]
    expected = (ValueError, "meta device") if kind == "meta" else (TypeError, "dense tensor")
    with pytest.raises(expected[0], match=expected[1]):
        fraq.recompress(conv(B), conv(A), tau=0.9)
    with pytest.raises(expected[0], match=expected[1]):
        get_aggregator("fraq").aggregate([ClientUpdate({"q": (conv(B), conv(A))}, scale=1.0, weight=1.0)])


def test_a_write_past_the_file_size_limit_names_the_file(tmp_path):
    """A ``write`` that fails with an OSError carrying no file name (``[Errno 27] File too
    large`` past a full disk or ``ulimit -f``) is raised naming the file, and leaves nothing."""
    import errno
    import re

    from fraq._files import replacing_file

    target = tmp_path / "out.json"
    with pytest.raises(OSError, match=rf"cannot write {re.escape(str(target))}: File too large.*left as it was"):
        with replacing_file(target) as tmp:
            tmp.write_text("{}")
            raise OSError(errno.EFBIG, "File too large")
    assert list(tmp_path.iterdir()) == []
