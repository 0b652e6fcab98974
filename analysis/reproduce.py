"""The paper's server-side figures and tables, drawn from result files alone.

    .venv/bin/python -m analysis.reproduce [--out DIR]

Reads ``DIR/results/`` (written by the runner, ``python -m benchmarks.run --out
DIR/results``; ``make run`` does both) and rebuilds every figure (PNG and PDF,
``DIR/figures/``) and table, and ``DIR/report.md``: the tables, the figures embedded, and
our numbers beside the paper's claims, figure by figure. Captions (device, machine,
threads, versions) come from the result files. Nothing here measures. ``DIR`` defaults
to ``results/reproduce`` (git-ignored). A ``DIR`` holding ``results.tar.gz`` and no
``results/`` (what ``python -m benchmarks.gpu_check --out DIR`` writes) is unpacked first.

The report is one loop over :data:`SECTIONS`, the registry of its sections: each is a
module of :mod:`analysis.sections` that says which experiments it reads and draws its
part (:class:`analysis.sections.Section`). A section whose experiments were not run is
left out; one that has some of them but not all, or whose drawing fails, is named under
*Not measured or skipped* (:class:`analysis.notes.NotDrawn`) and the others are drawn. What
the report leaves out is listed there, and counted in one line on the console.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from analysis import forked, notes
from analysis.atomic import cannot_write

__all__ = ["SECTIONS", "Built", "build", "build_report", "main", "section_module"]


def build(out: Path, *, pdf: bool = True) -> Path:
    """Figures, tables and ``report.md`` from the files under ``out/results``; the report's
    path (:func:`build_report`, which also returns what it left out)."""
    return build_report(out, pdf=pdf).report


@dataclass(frozen=True)
class Built:
    """A report written: ``report``, its path, and ``notes``, the warnings of
    :mod:`analysis.notes` it lists under *Not measured or skipped*."""

    report: Path
    notes: tuple[Warning, ...]

    def summary(self) -> str:
        """One line counting the notes by kind (:func:`analysis.notes.summary`), "" if none."""
        return notes.summary(self.notes, str(self.report))


def build_report(out: Path, *, pdf: bool = True) -> Built:
    """Figures, tables and ``report.md`` from the files under ``out/results``; ``pdf=False``
    writes PNG figures only (a report to commit) and links no PDF.

    Raises :class:`analysis.NoResults` (nothing to draw: the message says what to run; when
    files were there but none could be read, it names each with why, and ``report.md`` lists
    them under *Not measured or skipped*) and :class:`analysis.MixedResults` (more than one
    configuration: the message names them). Every note raised while loading and judging (a skipped file, a point
    not measured, a
    busy machine, a section not drawn, results of several commits: :mod:`analysis.notes`)
    is listed in the report's *Not measured or skipped* section and returned, not issued
    again: the report says what is missing, verdict by verdict, and :func:`main` prints one
    line that counts it. Other warnings (a library's deprecation, numpy's arithmetic) are
    issued again once the report is written (a build that raises reports its error
    alone). Every figure and the report are written beside their targets and renamed into
    place (:mod:`analysis.atomic`): one that cannot be written raises OSError naming it,
    and the old file stays.
    """
    from analysis.atomic import write_text
    from analysis.resultset import NoResults

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            text = _build(out, pdf)
        except NoResults as exc:
            unread = [n for n in notes.collected(caught) if isinstance(n, notes.Skipped)]
            if not unread:  # no result file at all: the message says what to run
                raise
            report = write_text(out / "report.md", _noted(UNREAD.format(n=len(unread)), unread))
            raise NoResults(f"{str(exc).replace(' (see the warnings)', '')}\n" + "\n".join(f"- {n}" for n in unread)
                            + f"\n(listed in {report}, under 'Not measured or skipped')") from None
    found = notes.collected(caught)
    report = write_text(out / "report.md", _noted(text, found))  # whole: beside, then renamed into place
    for w in caught:  # once written: a build that fails says its error alone
        if not issubclass(w.category, UserWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return Built(report, tuple(found))


UNREAD = ("# FRAQ server-side reproduction\n\nNothing is drawn: none of the {n} result file(s) under `results/` "
          "could be read; each is named below, with why.\n")
"""The report of a results directory whose every file was skipped."""


def _noted(text: str, found: list) -> str:
    """``text`` with the *Not measured or skipped* section listing ``found`` (nothing when empty)."""
    if not found:
        return text
    return text + ("\n## Not measured or skipped\n\nPoints not measured, verdicts withheld, sections not drawn "
                   "and files skipped (no verdict above rests on them), and results of more than one commit:\n\n"
                   + "\n".join(notes.section(found)) + "\n")


SECTIONS: dict[str, str] = {
    "tables123": "tables123",
    "gpu": "gpu",
    "federated": "federated",
    "table4": "table4",
    "table4_steps": "table4_steps",
    "florist_steps": "florist_steps",
    "pipeline": "pipeline",
    "fig3": "fig3",
    "clients": "clients",
    "clients_models": "clients_models",
    "fig4": "fig4",
    "flexlora_precision": "flexlora_precision",
    "fig1": "fig1",
    "trained": "trained",
    "peft": "peft",
    "backends": "backends",
    "backend_stages": "backend_stages",
}
"""The report's sections (their modules in :mod:`analysis.sections`), in the report's
order: the paper's headline tables first. Adding a figure or a table is a module there
and a line here."""


def section_module(name: str) -> ModuleType:
    """The module of report section ``name``."""
    if name not in SECTIONS:
        raise ValueError(f"section(={name!r}) is not one of {', '.join(SECTIONS)}")
    return importlib.import_module(f"analysis.sections.{SECTIONS[name]}")


def _build(out: Path, pdf: bool = True) -> str:
    from analysis import style
    from analysis.resultset import load
    from analysis.verdicts import HOW

    style.setup()
    _unpack(out)
    res = load(out / "results")
    figs = out / "figures"
    parts: list[str] = []
    made: list[tuple[str, str]] = []
    with forked.in_children():  # figures written in forked children while the next are drawn; all done after
        parts += _sections(res, figs, made, pdf)

    from analysis.sections.federated import SMOKE, is_smoke

    smoke = is_smoke(res.all)
    federated = bool(res.experiments) and set(res.experiments) <= {"federated"}
    head = ["# FRAQ smoke run: no verdicts" if smoke else
            "# FRAQ federated fine-tuning" if federated else "# FRAQ server-side reproduction", ""]
    if not (smoke or federated):
        from analysis.sections import headline

        head += headline.lines(res)  # what was found, per claim, above the statistics
    size = res.configuration.get("size")
    head.append(f"Measured on {style.caption(res.all)}" + (f"; size `{size}`" if size else "") + ". ")
    rebuilt = ("Every figure and table below is rebuilt from the JSON files under `results/` by "
               "`python -m analysis.reproduce --out <this directory>`. ")
    head += [rebuilt + (SMOKE if smoke else FEDERATED if federated else
                        "Statements marked **agrees**/**disagrees** compare our numbers with the paper's text; the "
                        "paper measured on a GH200 GPU, this run on the device named in each caption, so only ratios "
                        "and trends are comparable. " + HOW), "", "## Figures", ""]
    head += [f"- `figures/{n}.png`: {w}" for n, w in made] + [""]
    return "\n".join(head) + "\n" + "\n".join(parts)


FEDERATED = ("Statements marked **agrees**/**disagrees** compare our accuracies with the paper's claims (Section 5, "
             "Tables 1-3: federated fine-tuning on GPUs, at its own schedule, model and data); the setting below says "
             "what this run trains against the paper's, and the section says how each interval is computed.")
"""What the head of a federated run's report says in place of the server-side reproduction's."""


def _unpack(out: Path) -> None:
    """``out/results.tar.gz`` unpacked into ``out/results/`` when that does not exist (its
    members must be ``results/<experiment>/<key>.json`` files, and the folders ``results/``
    and ``results/<experiment>/`` that ``tar czf results.tar.gz results`` records, which are
    skipped; another member is refused). The archive is read whole first
    (:func:`fraq._archive.open_tar_gz`: gzip's checksum verified), so a damaged one is
    refused with a ValueError naming it, and left as it is.

    The files are written into a folder beside and renamed into place whole, so an
    interrupted unpacking leaves no ``results/`` behind and the next run unpacks again
    (a partial folder would be drawn as if it were the whole run). That folder is
    ``.results-unpacking-<pid>-XXXXXXXX`` (:func:`fraq._leftovers.own_folder`): one a killed
    unpacking left (SIGKILL skips the ``finally``) is removed by the next call, once its pid
    is gone."""
    import shutil

    from fraq._archive import open_tar_gz  # the standard library only, as the grammar
    from fraq._leftovers import own_folder, remove_dead  # the standard library only, as the grammar

    if out.is_dir():
        remove_dead(".results-unpacking-", out)
    pack = out / "results.tar.gz"
    if (out / "results").exists() or not pack.is_file():
        return
    tmp = own_folder(".results-unpacking-", out)
    try:
        with open_tar_gz(pack) as tar:
            members = [m for m in tar.getmembers() if not _folder(m)]
            bad = [m.name for m in members if not (m.isfile() and m.name.startswith("results/")
                                                    and ".." not in m.name and m.name.endswith(".json"))]
            if bad:
                raise ValueError(f"{pack} holds {bad[0]!r}: only results/<experiment>/<key>.json files are unpacked")
            for m in members:
                target = tmp / m.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(m).read())
        (tmp / "results").mkdir(exist_ok=True)
        (tmp / "results").rename(out / "results")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"unpacked {pack} into {out / 'results'}")



def _sections(res, figs: Path, made: list, pdf: bool) -> list[str]:
    """Every section's markdown in :data:`SECTIONS`' order, its figures saved under ``figs``
    (listed in ``made``): a section whose experiments have no results, or whose drawing
    fails, is a note instead (:class:`analysis.notes.NotDrawn`)."""
    parts: list[str] = []
    for name in SECTIONS:
        mod = section_module(name)
        have = [e for e in mod.reads if not res[e].empty]
        if len(have) < len(mod.reads):
            if have:
                missing = ", ".join(e for e in mod.reads if e not in have)
                warnings.warn(notes.NotDrawn(f"section {name!r} not drawn: it reads {', '.join(mod.reads)}, and "
                                             f"{missing} has no results (python -m benchmarks.run "
                                             f"{missing.replace(',', '')})"), stacklevel=2)
            continue
        try:
            drawn = [_render(sec, figs, made, pdf) for sec in mod.draw(res)]
        except OSError:  # a figure that cannot be written ends the run (main: one error line), the old one kept
            raise
        except Exception as exc:  # one section's failure is named in the report; the others are still drawn
            warnings.warn(notes.NotDrawn(f"section {name!r} not drawn: {type(exc).__name__}: {exc}"), stacklevel=2)
            continue
        parts += drawn
    return parts

def _folder(member) -> bool:
    """Whether a member of ``results.tar.gz`` is the folder ``results/`` or one under it."""
    name = member.name.rstrip("/")
    return member.isdir() and ".." not in name and (name == "results" or name.startswith("results/"))


def _render(sec, figs: Path, made: list, pdf: bool = True) -> str:
    """A section's markdown; its figure saved under ``figs`` and listed in ``made``."""
    from analysis import style

    text = f"{'#' * sec.level} {sec.title}\n\n"
    f = sec.figure
    if f is not None:
        style.save(f.fig, figs, f.name, style.caption(f.rows, f.detail), ("png", "pdf") if pdf else ("png",))
        made.append((f.name, f.what))
        link = f"[PDF](figures/{f.name}.pdf). " if pdf else ""
        text += f"![{sec.title}](figures/{f.name}.png)\n\n{link}{f.what}\n\n"
    return text + sec.body + "\n"


def _unwritable(out: Path) -> str | None:
    """Why the report cannot be written into ``out`` (not a directory, or it or its
    ``figures/`` not writable), or None. A missing ``out`` is left to the loader, which says
    what to run."""
    import os

    for where in (out, out / "figures"):
        if not os.path.lexists(where):
            continue
        if not where.is_dir():
            return f"{where} is not a directory"
        if not os.access(where, os.W_OK | os.X_OK):
            return f"directory {where} is not writable"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.reproduce", description=__doc__.split("\n")[0].replace("``", ""))
    ap.add_argument("--out", type=Path, default=Path("results/reproduce"),
                    help="directory holding results/ (figures/ and report.md are written there)")
    ap.add_argument("--no-pdf", action="store_true", help="PNG figures only, and no PDF links (a report to commit)")
    args = ap.parse_args(argv)
    unwritable = _unwritable(args.out)
    if unwritable is not None:  # before drawing anything
        print(f"error: --out(={str(args.out)!r}): {unwritable} (figures/ and report.md are written there)",
              file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")  # a script that writes files: no display
    from analysis.resultset import MixedResults, NoResults

    try:
        built = build_report(args.out, pdf=not args.no_pdf)
    except (NoResults, MixedResults, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a figure or the report could not be written (read-only, disk full, ulimit -f)
        print(f"error: {cannot_write(exc)}", file=sys.stderr)
        return 1
    print(f"figures: {args.out / 'figures'}\nreport:  {built.report}")
    if built.notes:  # one line for all of them: the report lists each
        print(built.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
