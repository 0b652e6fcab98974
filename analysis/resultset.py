"""One call from a results directory to checked, tidy frames: :func:`load`.

    import analysis
    res = analysis.load()          # $FRAQ_RESULTS, else results/reproduce/results here or above
    res["fig3"]                    # one row per result file of that experiment
    res.all                        # every row

:func:`analysis.loaders.load_results` reads files; :func:`load` also refuses what would
make a figure or a verdict wrong:

- no result files: :class:`NoResults`, saying what to run;
- a file that is not JSON, not a result object, in an older format (without the keys
  every result of this format has), without the fields its experiment's figure needs or with one of
  them of the wrong type (a name where a number belongs): skipped with a warning naming
  the file and what is wrong;
- results of different configurations (``size``, ``device``, ``dtype``; the model
  ``preset`` of Fig. 1 and Fig. 4): :class:`MixedResults`, naming each configuration
  and how many files it has; ``select={"size": "reduced"}`` keeps one;
- federated results of one variant run under different settings (another number of
  rounds, clients, learning rate, data set, schedule: any key under :data:`SETTING_SECTIONS`),
  which the table and the paired verdicts would mix: :class:`MixedResults` naming the
  keys that differ and their values (variants may differ from one another: each is
  reported apart, and the report names what differs);
- results of different commits: kept, with a warning listing the commits.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis.loaders import integral, load_results
from analysis.notes import Commits, Skipped
from fraq._fields import LABELS, LISTS, REQUIRED, ROWS, absent, kind, typed  # the table the runner reads too

__all__ = ["load", "Results", "NoResults", "MixedResults", "default_dir", "REQUIRED",
           "IDENTITY", "ONE_PRESET", "LABELS", "LISTS", "ROWS", "SETTING_SECTIONS", "NOT_SETTINGS", "setting_columns",
           "setting_mixes"]

DEFAULT = Path("results") / "reproduce" / "results"
"""Where ``make run`` writes, relative to the repository root."""

IDENTITY = ("size", "device", "dtype")
"""What a run was: results that differ in any of these are not drawn together."""

ONE_PRESET = ("fig1", "fig4_rank")
"""Experiments whose figure is captioned by one model preset."""

SETTING_SECTIONS = ("model.", "dataset.", "partition.", "federated.", "train.")
"""A federated result's setting: its config's columns under these sections. Results of one
variant must agree on all of them to share a table row or a paired verdict."""

NOT_SETTINGS = ("dataset.data_dir",)
"""Setting columns that say where, not what: the published files are checked by sha256
wherever they lie, so two copies are one data set."""


class NoResults(FileNotFoundError):
    """No readable result file where results were expected."""


class MixedResults(ValueError):
    """Results of more than one configuration in one directory."""


def default_dir() -> Path:
    """``$FRAQ_RESULTS``, else ``results/reproduce/results`` under the current directory or
    the nearest parent that has one (so a notebook finds the repository's results from
    ``analysis/notebooks/`` as from the root)."""
    if os.environ.get("FRAQ_RESULTS"):
        return Path(os.environ["FRAQ_RESULTS"])
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / DEFAULT).is_dir():
            return d / DEFAULT
    return DEFAULT


def _hint(path: Path) -> str:
    return (f"run `make run` in the repository root (or `python -m benchmarks.run --out {path}`), or set "
            "FRAQ_RESULTS to a results directory")


class Results:
    """Checked result rows: ``res[experiment]`` (an empty frame for one not run),
    ``res.all``, ``res.experiments``, ``res.path`` and ``res.configuration``
    (``{column: value}`` shared by every row)."""

    def __init__(self, path: Path, rows: pd.DataFrame, integer_columns: Iterable[str] = ()):
        self.path = path
        self.all = rows
        self.integer_columns = list(integer_columns)
        self.experiments = sorted(rows["experiment"].dropna().unique()) if not rows.empty else []
        self.configuration = {c: rows[c].dropna().iloc[0] for c in (*IDENTITY, "git_sha")
                              if c in rows and rows[c].notna().any()}

    def __getitem__(self, experiment: str) -> pd.DataFrame:
        rows = self.all[self.all["experiment"] == experiment]
        return integral(rows.dropna(axis=1, how="all").reset_index(drop=True), self.integer_columns)

    def __contains__(self, experiment: str) -> bool:
        return experiment in self.experiments

    def __repr__(self) -> str:
        config = ", ".join(f"{k}={str(v)[:10]}" for k, v in self.configuration.items())
        counts = self.all.groupby("experiment").size().to_dict() if not self.all.empty else {}
        return f"Results({str(self.path)!r}, {config}; files per experiment: {counts})"


def _label(v) -> str:
    return "unrecorded" if v is None or (isinstance(v, float) and v != v) else str(v)


def _mix(rows: pd.DataFrame, col: str, where: str) -> str | None:
    """A description of the values of ``col`` (with file counts) if there is more than one."""
    if col not in rows:
        return None
    counts = rows[col].map(_label).value_counts()
    if len(counts) < 2:
        return None
    return f"{col}{f' {where}' if where else ''}: " + ", ".join(f"{v} ({n} files)" for v, n in counts.items())


def _valid(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` without the files missing their figure's fields (:data:`REQUIRED`) or with
    one of another type (:func:`fraq._fields.typed`), each named in a warning."""
    keep = []
    for i, r in rows.iterrows():
        need = [c for c in REQUIRED.get(r["experiment"], ()) if c not in r.index or absent(r[c])]
        if need:
            warnings.warn(Skipped(f"skipped {r['file']}: malformed {r['experiment']} result "
                                  f"(no {', '.join(need)})"),
                          stacklevel=3)
            continue
        wrong = [f"{c}={_show(r[c])} is not {kind(c)}" for c in REQUIRED.get(r["experiment"], ()) if not typed(c, r[c])]
        if wrong:
            warnings.warn(Skipped(f"skipped {r['file']}: malformed {r['experiment']} result ({'; '.join(wrong)})"),
                          stacklevel=3)
            continue
        keep.append(i)
    # infer_objects: a column a skipped file made mixed (a name among numbers) becomes numeric again
    return rows.loc[keep].reset_index(drop=True).infer_objects()


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def setting_columns(fed: pd.DataFrame) -> list[str]:
    """The columns of federated rows ``fed`` that are part of their setting (:data:`SETTING_SECTIONS`)."""
    return sorted(c for c in fed.columns if c.startswith(SETTING_SECTIONS) and c not in NOT_SETTINGS)


def _key(v) -> str:
    """A hashable, printable form of a setting value (lists included; NaN: not set)."""
    import json

    from fraq._json import finite  # the standard library only, as the grammar

    if absent(v):
        return "unset"
    return json.dumps(finite(v), sort_keys=True, allow_nan=False) if isinstance(v, (list, dict)) else str(v)


def setting_mixes(fed: pd.DataFrame) -> list[str]:
    """One description per variant of federated rows ``fed`` whose files differ in a setting
    key: ``"variant dir0.1 mixes federated.rounds: 4 (27 files), 8 (27 files)"``; empty when
    every variant is one setting."""
    if fed.empty or "variant" not in fed:
        return []
    cols = setting_columns(fed)
    out = []
    for variant, g in fed.groupby("variant", sort=True):
        diff = []
        for c in cols:
            counts = g[c].map(_key).value_counts()
            if len(counts) > 1:
                diff.append(f"{c}: " + ", ".join(f"{v} ({n} files)" for v, n in counts.items()))
        if diff:
            out.append(f"federated variant {variant} mixes settings, " + "; ".join(diff))
    return out


def load(path: str | Path | None = None, *, select: dict | None = None) -> Results:
    """The result files under ``path`` (default :func:`default_dir`) as checked frames.

    ``select`` keeps the rows whose columns equal the given values (e.g. ``{"size":
    "tiny"}``) before the configuration check.

    Raises:
        NoResults: no readable result file under ``path`` (the message says what to run).
        MixedResults: results of more than one configuration (the message names them).
    """
    if path is None and default_dir() == DEFAULT and not DEFAULT.exists():
        raise NoResults(f"no {DEFAULT} in {Path.cwd()} or any parent: {_hint(DEFAULT)}")
    path = Path(path) if path is not None else default_dir()
    if not path.exists() or (path.is_dir() and not any(path.rglob("*.json"))):
        raise NoResults(f"no result files under {path}: {_hint(path)}")
    rows = load_results(path, current=True)
    integer_columns = rows.attrs.get("integer_columns", [])
    if not rows.empty:
        rows = _valid(rows)
    if rows.empty:
        raise NoResults(f"no readable result file under {path} (see the warnings): {_hint(path)}")
    for col, value in (select or {}).items():
        if col not in rows:
            raise KeyError(f"select: no column {col!r} in the results under {path}")
        rows = rows[rows[col].map(_label) == _label(value)]
    if rows.empty:
        raise NoResults(f"no result under {path} matches select={select}")
    mixes = [m for m in (_mix(rows, c, "") for c in IDENTITY) if m]
    for exp in ONE_PRESET:
        mixes += [m for m in [_mix(rows[rows["experiment"] == exp], "preset", f"({exp})")] if m]
    fed = rows[rows["experiment"] == "federated"].dropna(axis=1, how="all")
    mixes += setting_mixes(fed)
    if mixes:
        raise MixedResults(f"{path} holds results of more than one configuration, which one figure would mix: "
                           + "; ".join(mixes) + ". Write each run to its own --out directory, or keep one with "
                           "load(path, select={...}).")
    if "git_sha" in rows and rows["git_sha"].nunique() > 1:
        counts = rows["git_sha"].map(lambda s: _label(s)[:10]).value_counts()
        warnings.warn(Commits(f"{path} holds results of {len(counts)} commits: "
                              + ", ".join(f"{s} ({n} files)" for s, n in counts.items())), stacklevel=2)
    return Results(path, rows.reset_index(drop=True), integer_columns)
