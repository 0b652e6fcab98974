"""Results files -> tidy pandas DataFrames: one row per measurement, the machine as columns.

Three sources, each a tool's one format:

- :func:`load_results`: the project's own result files, one JSON per result as
  :func:`benchmarks.results.write_result` writes them (``experiment``, ``config``,
  ``result``, ``machine``, ``versions``, ``device``, ...), from every writer: the runner,
  the experiments (backends, aggregators, eig_precision), the report and the demo;
- :func:`load_asv`: asv's result files (``.asv/results/<machine>/<commit>-<env>.json``,
  format version 2), one row per benchmark and parameter combination;
- :func:`load_pytest_benchmark`: the JSON of ``pytest --benchmark-json`` /
  ``--benchmark-save``, one row per benchmark, ``extra_info`` as columns.

Machine columns are prefixed ``machine.`` everywhere, so frames from different sources
concatenate and can be grouped by machine. A file that cannot be read, or is not in the
expected format, is skipped with a warning naming it; nothing here measures.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis.notes import Skipped

__all__ = ["load_results", "load_asv", "load_pytest_benchmark", "explode_per_matrix", "paper", "integral"]

RESULT_KEYS = ("experiment", "config", "result", "machine")
"""Keys a project result file must have (see :mod:`benchmarks.results`)."""


def paper() -> dict:
    """The paper's numbers (``analysis/paper.json``): the one place they are written down."""
    return json.loads((Path(__file__).with_name("paper.json")).read_text())

FORMAT_KEYS = ("key", "versions", "git_sha", "device", "threads")
"""Keys the current format has beyond :data:`RESULT_KEYS`: a file without them is in an
older format (``load_results(..., current=True)`` skips it, naming it)."""


def _flat(prefix: str, d: dict | None) -> dict:
    """``{prefix.key: value}``, nested dicts flattened with dots."""
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flat(key, v))
        else:
            out[key] = v
    return out


def _files(paths: str | Path | Iterable) -> list[Path]:
    """The JSON files under a directory (none if it does not exist: an experiment not run),
    or the files given."""
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        if not p.exists():
            return []
        return sorted(p.rglob("*.json")) if p.is_dir() else [p]
    return [Path(p) for p in paths]


def _read(f: Path) -> dict | None:
    """The JSON object in ``f``, or None after a warning naming the file."""
    try:
        rec = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        warnings.warn(Skipped(f"skipped {f}: not readable as JSON ({exc})"), stacklevel=4)
        return None
    if not isinstance(rec, dict):
        warnings.warn(Skipped(f"skipped {f}: a JSON {type(rec).__name__}, not a result object"), stacklevel=4)
        return None
    return rec


def _records(paths: str | Path | Iterable) -> Iterable[tuple[Path, dict]]:
    """(file, parsed JSON object) for every JSON object under ``paths``; a warning naming
    each file that cannot be read or does not hold a JSON object."""
    for f in _files(paths):
        rec = _read(f)
        if rec is not None:
            yield f, rec


def load_results(paths: str | Path | Iterable, experiment: str | None = None, *,
                 current: bool = False) -> pd.DataFrame:
    """The project's result files under ``paths`` (a directory, searched recursively, or a
    list of files) as one row each.

    Columns: ``experiment``, ``file``, the config's keys, the result's keys (nested dicts
    flattened with dots: ``timing.median``), ``machine.*``, ``versions.*``, ``device``,
    ``dtype``, ``threads``, ``git_sha``, ``loadavg``, ``steal`` (None where a file
    does not record it), ``created``. A JSON file without
    the format's keys (:data:`RESULT_KEYS`) is skipped with a warning naming it and the
    missing keys, and so is one whose config, result, machine or versions is not an object;
    ``current=True`` also skips, naming it, a file in an older format (without
    :data:`FORMAT_KEYS`). ``experiment`` filters.
    """
    rows, kinds = [], {}
    for f, rec in _records(paths):
        missing = [k for k in RESULT_KEYS if k not in rec]
        if missing:
            warnings.warn(Skipped(f"skipped {f}: not a result file (no {', '.join(missing)})"), stacklevel=2)
            continue
        bad = [k for k in ("config", "result", "machine", "versions") if k in rec and not isinstance(rec[k], dict)]
        if bad:
            warnings.warn(Skipped(f"skipped {f}: malformed result file ({', '.join(bad)} not a JSON object)"),
                          stacklevel=2)
            continue
        old = [k for k in FORMAT_KEYS if k not in rec] if current else []
        if old:
            warnings.warn(Skipped(f"skipped {f}: older result format (no {', '.join(old)}); rerun its experiment"),
                          stacklevel=2)
            continue
        if experiment is not None and rec.get("experiment") != experiment:
            continue
        row = {"experiment": rec.get("experiment"), "key": rec.get("key"), "file": str(f)}
        row.update(_flat("", rec["config"]))
        row.update(_flat("", rec["result"]))
        for k, v in row.items():
            if v is not None:
                kinds[k] = kinds.get(k, True) and isinstance(v, int) and not isinstance(v, bool)
        row.update(_flat("machine", rec.get("machine")))
        row.update(_flat("versions", rec.get("versions")))
        for k in ("device", "dtype", "threads", "git_sha", "loadavg", "steal", "created"):
            row[k] = rec.get(k)
        rows.append(row)
    df = pd.DataFrame(rows)
    # the config's and result's keys written as JSON integers in every file that has them:
    # a column that is float only for the NaN of the files without it (Results[...] and
    # integral() turn them back into integers)
    df.attrs["integer_columns"] = _Shared(sorted(k for k, ok in kinds.items() if ok))
    return df


class _Shared(tuple):
    """A tuple of names that ``copy.deepcopy`` returns as itself. pandas deep-copies a frame's
    ``attrs`` into the result of every operation on it (``__finalize__``): a plain list of
    column names there made the report spend seconds in ``deepcopy`` (about 48,000 copies of
    a 44-name list on ``make run``'s results); it is immutable, so one copy is all it needs."""

    def __deepcopy__(self, memo):
        return self


def integral(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """``df`` with each of ``columns`` that has no missing value as int64 (a parameter
    prints ``768``, not ``768.0``, in a table, a pivot's header and a tick label)."""
    out = df
    for c in columns:
        if c in df and df[c].dtype.kind == "f" and df[c].notna().all() and (df[c] == df[c].round()).all():
            if out is df:
                out = df.copy()
            out[c] = df[c].astype("int64")
    return out


def explode_per_matrix(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """One row per matrix from rows holding per-matrix lists in ``columns`` (same length)."""
    if df.empty:
        return df
    out = df.explode(columns, ignore_index=True)
    for c in columns:
        out[c] = pd.to_numeric(out[c])
    return out


def load_asv(results_dir: str | Path) -> pd.DataFrame:
    """asv results (``results_dir/<machine>/*.json``, asv's format version 2) as rows.

    One row per benchmark, parameter combination and commit: ``benchmark`` (e.g.
    ``bench_recompress.Sweep.time_run``), ``kind`` (time / track / peakmem / mem), one
    column per parameter name (from ``benchmarks.json``, ``param0``... if absent; values
    as asv stores them, quoted strings unquoted; a parameter named like one of the fixed
    columns, e.g. ``Sweep``'s ``value``, becomes ``param.<name>``), ``value`` (the
    measurement; None for a skipped or failed combination), ``unit``,
    ``q25``/``q75``/``ci99_lo``/``ci99_hi`` where asv recorded them, ``commit``, ``date``,
    and the machine as ``machine.*``.
    """
    root = Path(results_dir)
    meta = (_read(root / "benchmarks.json") or {}) if (root / "benchmarks.json").exists() else {}
    rows = []
    for mdir in sorted(p for p in root.iterdir() if p.is_dir()):
        machine = {}
        if (mdir / "machine.json").exists():
            machine = _flat("machine", _read(mdir / "machine.json"))
        for f, rec in _records(sorted(f for f in mdir.glob("*.json") if f.name != "machine.json")):
            if not isinstance(rec.get("results"), dict):
                warnings.warn(Skipped(f"skipped {f}: not an asv result file (no 'results' object)"), stacklevel=2)
                continue
            cols = rec.get("result_columns", ["result", "params"])
            for name, entry in rec.get("results", {}).items():
                fields = dict(zip(cols, entry))
                params = fields.get("params") or []
                info = meta.get(name, {})
                names = info.get("param_names") or [f"param{i}" for i in range(len(params))]
                combos = list(itertools.product(*params)) if params else [()]
                values = fields.get("result")
                values = values if isinstance(values, list) else [values] * len(combos)

                def stat(key, i):
                    s = fields.get(key)
                    return s[i] if isinstance(s, list) and i < len(s) else None

                for i, combo in enumerate(combos):
                    row = {"benchmark": name, "kind": name.rsplit(".", 1)[-1].split("_", 1)[0],
                           "value": values[i] if i < len(values) else None, "unit": info.get("unit"),
                           "q25": stat("stats_q_25", i), "q75": stat("stats_q_75", i),
                           "ci99_lo": stat("stats_ci_99_a", i), "ci99_hi": stat("stats_ci_99_b", i),
                           "commit": rec.get("commit_hash"), "date": rec.get("date"), "env": rec.get("env_name"),
                           "file": str(f)}
                    row.update({(f"param.{n}" if n in row else n): _unquote(v) for n, v in zip(names, combo)})
                    row.update(machine)
                    rows.append(row)
    return pd.DataFrame(rows)


def _unquote(v):
    if isinstance(v, str) and len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    try:
        return int(v)
    except (TypeError, ValueError):
        pass
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def load_pytest_benchmark(paths: str | Path | Iterable) -> pd.DataFrame:
    """pytest-benchmark JSON files (``--benchmark-json`` or ``.benchmarks/**``) as rows.

    One row per benchmark: ``name``, ``fullname``, ``group``, ``param.*``, the stats in
    seconds (``median``, ``iqr``, ``q1``, ``q3``, ``min``, ``max``, ``mean``, ``stddev``,
    ``rounds``), ``extra.*`` (the suite's FLOPs, memory, errors, threads), ``commit``, and
    the machine as ``machine.*`` (pytest-benchmark's ``machine_info``).
    """
    rows = []
    for f, rec in _records(paths):
        if "benchmarks" not in rec:
            continue
        machine = _flat("machine", {k: v for k, v in (rec.get("machine_info") or {}).items() if k != "cpu"})
        cpu = (rec.get("machine_info") or {}).get("cpu") or {}
        machine["machine.cpu"] = cpu.get("brand_raw") if isinstance(cpu, dict) else cpu
        commit = (rec.get("commit_info") or {}).get("id")
        for b in rec["benchmarks"]:
            row = {"name": b.get("name"), "fullname": b.get("fullname"), "group": b.get("group"),
                   "commit": commit, "datetime": rec.get("datetime"), "file": str(f)}
            row.update(_flat("param", b.get("params") or {}))
            row.update({k: v for k, v in (b.get("stats") or {}).items() if k != "data"})
            row.update(_flat("extra", b.get("extra_info") or {}))
            row.update(machine)
            rows.append(row)
    return pd.DataFrame(rows)
