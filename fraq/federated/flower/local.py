"""``flwr run`` against a SuperLink on this machine, started and always stopped here.

::

    python -m fraq.federated.flower.local                       # simulation runtime
    python -m fraq.federated.flower.local --deployment          # SuperLink + one SuperNode per client
    python -m fraq.federated.flower.local --run-config "num-server-rounds=3 method='flora'"

Steps: check the run configuration (the App's defaults fused with ``--run-config``, as the
ServerApp will see it: a bad one stops here, before any process starts or file is written);
pick a free port; write ``$FLWR_HOME/config.toml`` with one SuperLink connection,
``fraq-local`` (``address = "127.0.0.1:PORT"``, ``insecure = true``); start
``flower-superlink --insecure [--simulation] --host 127.0.0.1 --port PORT`` (and, with
``--deployment``, ``flower-supernode --insecure --superlink 127.0.0.1:PORT --node-config
"partition-id=K num-partitions=N" --port FREE`` for K = 0..N-1); run ``flwr run APP
fraq-local --stream`` (with ``--federation-config "num-supernodes=N
client-resources-num-cpus=1"`` in the simulation runtime); then stop every process it
started and their descendants (SIGTERM, then SIGKILL), whatever happened. Everything goes
under ``--out`` (default ``results/flower-local/<time>``): ``flwr-home/``, the logs
(``superlink.log``, ``supernode-K.log``, ``flwr-run.log``) and the ServerApp's
``<label>/result.json`` (an earlier one stays until the ServerApp replaces it whole, and is
never reported as this run's); a summary (accuracy, downlink, aggregation time) is printed
at the end.

Sets ``FLWR_HOME``, ``FLWR_TELEMETRY_ENABLED=0``, ``NO_COLOR=1`` (the logs are files) and
``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` (Flower would otherwise ``uv sync`` the
App's dependencies, e.g. a CUDA build of torch) and puts this interpreter's ``bin/`` first
on ``PATH`` (the SuperLink starts ``flower-superexec`` by name).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from fraq._files import replacing_file
from fraq.federated.config import Config
from fraq.federated.method_specs import method_label
from fraq.methods import MethodSpec

__all__ = ["check_run_config", "default_app_dir", "free_port", "main", "run_local"]

CONNECTION = "fraq-local"


def default_app_dir() -> Path:
    """``apps/flower`` of the repository this package is installed from (editable install)."""
    return Path(__file__).resolve().parents[3] / "apps" / "flower"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(port: int, proc: subprocess.Popen, log_path: Path, timeout: float) -> None:
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with code {proc.returncode}; see {log_path}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"flower-superlink not healthy on 127.0.0.1:{port} after {timeout:.0f} s; see {log_path}")


def _descendants(pids: list[int]) -> list:
    import psutil

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return procs


def _stop(started: list[subprocess.Popen], known: list, grace: float = 10.0) -> list[int]:
    """SIGTERM every started process and every descendant seen, SIGKILL what is left; the pids killed."""
    import psutil

    procs = {p.pid: p for p in [*known, *_descendants([s.pid for s in started])]}
    for p in procs.values():
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(list(procs.values()), timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    for s in started:
        try:
            s.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
    return [p.pid for p in alive]


def _identity(path: Path) -> tuple | None:
    """Which file ``path`` is now (device, inode, modification time, size), None when absent: the
    ServerApp replaces its result by rename, so a new result is a new identity."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_run_config(app_dir: Path, run_config: str, out: Path, clients: int) -> tuple[Config, MethodSpec]:
    """(harness :class:`~fraq.federated.config.Config`, method spec) of the run ``flwr run`` would start, checked before any process starts.

    Fuses the App's ``[tool.flwr.app.config]`` with ``run_config`` (``flwr run
    --run-config``) and ``results-dir`` as Flower does and checks the result with
    :func:`~fraq.federated.flower.run_config.from_run_config`, the same check the
    ``ServerApp`` and every ``ClientApp`` make; ``clients`` (the SuperNodes to start) must
    equal the run's ``federated.clients``. Raises ValueError naming the key and the value.
    """
    import tomli
    from click import ClickException
    from flwr.common.config import flatten_dict, parse_config_args

    from fraq.federated.flower.run_config import from_run_config

    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients(={clients!r}) must be an int >= 1")
    pyproject = Path(app_dir) / "pyproject.toml"
    if not pyproject.is_file():
        raise ValueError(f"app_dir(={str(app_dir)!r}) holds no pyproject.toml (the Flower App)")
    try:
        app_config = tomli.loads(pyproject.read_text(encoding="utf-8"))["tool"]["flwr"]["app"]["config"]
    except (OSError, UnicodeDecodeError, tomli.TOMLDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{pyproject} has no readable [tool.flwr.app.config] table: {type(e).__name__}: {e}") from None
    try:
        overrides = parse_config_args([run_config]) if run_config.strip() else {}
    except (ClickException, ValueError, OSError) as e:
        msg = e.format_message() if isinstance(e, ClickException) else str(e)
        raise ValueError(f"--run-config(={run_config!r}): {msg}") from None
    config, spec, _ = from_run_config({**flatten_dict(app_config), **overrides, "results-dir": str(out)})
    K = config.federated.clients
    if K != clients:
        raise ValueError(f"clients(={clients}) SuperNodes must equal the run config's clients (={K}): pass "
                         f"--clients {K} or set clients={clients} in --run-config")
    return config, spec


def run_local(out: Path, *, app_dir: Path | None = None, run_config: str = "", clients: int = 2,
              deployment: bool = False, timeout: float = 1800.0, echo=print) -> dict:
    """Start a SuperLink (and SuperNodes), ``flwr run`` the App, stop everything; return the result dict.

    The run configuration is checked first (:func:`check_run_config`): a bad one raises
    ValueError before any process starts or any file is written. ``clients`` must equal the
    run config's ``clients`` (the App's default is 2). The steps are the module's: one
    helper each, in this order.
    """
    out = Path(out).resolve()
    app_dir = (app_dir or default_app_dir()).resolve()
    _, spec = check_run_config(app_dir, run_config, out, clients)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out(={str(out)!r}) is a file, not a directory")
    echo(f"results and logs go to {out}")
    port = free_port()
    env = _environment(_write_flwr_home(out / "flwr-home", port))
    result_path = out / method_label(spec) / "result.json"
    earlier = _identity(result_path)  # kept until the ServerApp replaces it; never reported as this run's
    t0 = time.perf_counter()
    with _Processes(out, env, echo, "the SuperLink and SuperNodes" if deployment else "the SuperLink") as procs:
        _wait_healthy(port, procs.spawn(_superlink_command(port, deployment), "superlink.log"),
                      out / "superlink.log", timeout=60)
        if deployment:
            for k in range(clients):
                procs.spawn(_supernode_command(port, k, clients), f"supernode-{k}.log")
        procs.stream(_flwr_run_command(app_dir, run_config, out, clients, deployment), "flwr-run.log",
                     deadline=t0 + timeout, timeout=timeout)
    result = _new_result(result_path, earlier, out)
    result["wall_seconds"] = time.perf_counter() - t0
    result["result_path"] = str(result_path)
    return result


def _write_flwr_home(home: Path, port: int) -> Path:
    """``home/config.toml`` with the one SuperLink connection, :data:`CONNECTION` on ``port``."""
    home.mkdir(parents=True, exist_ok=True)
    with replacing_file(home / "config.toml") as tmp:
        tmp.write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                       f'address = "127.0.0.1:{port}"\ninsecure = true\n', encoding="utf-8")
    return home


def _environment(home: Path) -> dict:
    """The environment of every process started: Flower's home, no telemetry, update check or
    dependency installation, plain logs, and this interpreter's ``bin/`` first on ``PATH``."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_DISABLE_UPDATE_CHECK": "1",
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1",
           "NO_COLOR": "1"}  # their output goes into log files
    env.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    return env


def _superlink_command(port: int, deployment: bool) -> list[str]:
    return ["flower-superlink", "--insecure", *([] if deployment else ["--simulation"]),
            "--host", "127.0.0.1", "--port", str(port)]


def _supernode_command(port: int, k: int, clients: int) -> list[str]:
    return ["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{port}",
            "--node-config", f"partition-id={k} num-partitions={clients}", "--port", str(free_port())]


def _flwr_run_command(app_dir: Path, run_config: str, out: Path, clients: int, deployment: bool) -> list[str]:
    """``flwr run`` of the App with ``run_config`` and ``results-dir`` set to ``out``."""
    rc = " ".join(x for x in (run_config.strip(), f"results-dir={_quote(str(out))}") if x)
    cmd = ["flwr", "run", str(app_dir), CONNECTION, "--run-config", rc, "--stream"]
    if not deployment:
        cmd += ["--federation-config", f"num-supernodes={clients} client-resources-num-cpus=1"]
    return cmd


class _Processes:
    """The processes one launch starts, each in its own session with its output in a log file
    under ``out``; leaving the ``with`` block stops them all and every descendant seen
    (:func:`_stop`), whatever happened, and says so. SIGTERM meanwhile raises
    KeyboardInterrupt, so a terminated launcher stops them too."""

    def __init__(self, out: Path, env: dict, echo, what: str):
        self.out, self.env, self.echo, self.what = out, env, echo, what
        self.started: list[subprocess.Popen] = []
        self.known: list = []
        self.logs: list = []

    def __enter__(self) -> _Processes:
        self.previous = signal.signal(signal.SIGTERM, _interrupt)
        return self

    def __exit__(self, *exc) -> None:
        killed = _stop(self.started, self.known)
        for f in self.logs:
            f.close()
        signal.signal(signal.SIGTERM, self.previous)
        self.echo(f"stopped {self.what}" + (f" (SIGKILL for pids {killed})" if killed else ""))

    def spawn(self, cmd: list[str], log_name: str) -> subprocess.Popen:
        """Start ``cmd`` with its output in ``out/log_name``."""
        f = open(self.out / log_name, "w", encoding="utf-8")
        self.logs.append(f)
        self.echo("$ " + shlex.join(cmd) + f"   > {self.out / log_name}")
        p = subprocess.Popen(cmd, env=self.env, cwd=self.out, stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.started.append(p)
        return p

    def stream(self, cmd: list[str], log_name: str, *, deadline: float, timeout: float) -> None:
        """Run ``cmd`` to its end, its output echoed and kept in ``out/log_name``; RuntimeError
        when it fails, TimeoutError past ``deadline`` (a ``time.perf_counter()`` value)."""
        self.echo("$ " + shlex.join(cmd))
        self.known += _descendants([p.pid for p in self.started])
        with open(self.out / log_name, "w", encoding="utf-8") as f:
            run = subprocess.Popen(cmd, env=self.env, cwd=self.out, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
            self.started.append(run)
            for line in run.stdout:
                self.echo(line.rstrip("\n"))
                f.write(line)
                seen = {q.pid for q in self.known}
                self.known += [p for p in _descendants([s.pid for s in self.started]) if p.pid not in seen]
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"flwr run exceeded {timeout:.0f} s")
            run.wait()
        if run.returncode != 0:
            raise RuntimeError(f"flwr run exited with code {run.returncode}; see {self.out / log_name}")


def _new_result(result_path: Path, earlier: tuple | None, out: Path) -> dict:
    """The ServerApp's result of this run: a file that is not the ``earlier`` one, with every
    round it announced; RuntimeError naming the logs otherwise."""
    import json

    if not result_path.is_file() or _identity(result_path) == earlier:
        raise RuntimeError(f"the ServerApp wrote no {'new ' if earlier else ''}{result_path}"
                           f"{' (the earlier one is kept)' if earlier else ''}; see {out / 'flwr-run.log'} and "
                           f"{out / 'superlink.log'}")
    result = json.loads(result_path.read_text(encoding="utf-8"))
    if len(result["rounds"]) != result["num_rounds"]:
        raise RuntimeError(f"the run stopped after round {len(result['rounds'])} of {result['num_rounds']}; see "
                           f"{out / 'flwr-run.log'}")
    return result


def _summary(result: dict) -> str:
    from fraq.federated.results import summarize

    s = summarize(result)
    return (f"{result['method']}: {s['rounds']} rounds, accuracy {s['accuracy_pct']:.2f}%, downlink "
            f"{s['downlink_pct_flora']:.1f}% of FLoRA ({s['downlink_params']:.0f} params / client / round), "
            f"aggregation {s['agg_ms_mean']:.1f} ms, mean rank {s['rank_mean']:.1f}, "
            f"wall {result['wall_seconds']:.0f} s\nresults: {result['result_path']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fraq.federated.flower.local", description=__doc__.split("\n")[0])
    p.add_argument("--deployment", action="store_true",
                   help="deployment runtime: SuperLink plus one flower-supernode per client (default: simulation)")
    p.add_argument("--run-config", default="", metavar='"K=V K=V"',
                   help="flwr run --run-config overrides of apps/flower/pyproject.toml, e.g. \"num-server-rounds=3\"")
    p.add_argument("--clients", type=int, default=2, help="SuperNodes to start; must equal the run config's clients")
    p.add_argument("--app", type=Path, default=None, help="the Flower App directory (default: apps/flower)")
    p.add_argument("--out", type=Path, default=None, help="default: results/flower-local/<UTC time>")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the run is stopped")
    a = p.parse_args(argv)
    out = a.out or Path("results/flower-local") / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    try:
        result = run_local(out, app_dir=a.app, run_config=a.run_config, clients=a.clients, deployment=a.deployment,
                           timeout=a.timeout, echo=lambda s: print(s, flush=True))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    except (RuntimeError, TimeoutError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted; the SuperLink is stopped", file=sys.stderr, flush=True)
        return 130
    print(_summary(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
