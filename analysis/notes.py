"""What the analysis could not judge or draw, as warnings of a few kinds, and how a report lists them.

Every function of :mod:`analysis` that leaves something out says so with a warning whose
category is one of the :class:`Note` kinds below (all :class:`UserWarning`, so a notebook
shows them as it shows any warning):

- :class:`NotMeasured`: no verdict on a claim, a point it covers not measured;
- :class:`Busy`: no verdict on a timing claim, the machine busy while it was measured
  (:func:`analysis.verdicts.busy`, by the thresholds here: :data:`BUSY_LOAD`,
  :data:`BUSY_STEAL`, which the report's list restates);
- :class:`NotDrawn`: a report section not drawn;
- :class:`Skipped`: a result file skipped (unreadable, malformed, an older format);
- :class:`Commits`: results of more than one commit drawn together;
- :class:`Note`: anything else a reader should know (samples that could not be paired).

A report (:mod:`analysis.reproduce`, :mod:`analysis.federated_report`) records them while it
is drawn and lists them under *Not measured or skipped* (:func:`section`), the busy
machine in one line however many verdicts it withheld; on the console it prints one line
that counts them (:func:`summary`), not one warning each.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BUSY_LOAD", "BUSY_STEAL", "Busy", "Commits", "Note", "NotDrawn", "NotMeasured", "Skipped", "collected",
           "section", "summary"]

BUSY_LOAD = 0.5
"""A run is busy (:func:`analysis.verdicts.busy` decides, a :class:`Busy` note says so) when
its 1-minute load average exceeds its own torch threads by more than this: something else
was runnable beside the timed threads for at least half of the last minute, on a machine
whose cores the run does not own."""

BUSY_STEAL = 0.05
"""A run is busy when more than this share of the CPU time went to other guests (KVM steal,
``/proc/stat``): the timed thread waited for its core, by more than the few per cent the
intervals resolve."""


class Note(UserWarning):
    """Something the analysis left out or a reader should know; the base of the kinds below."""

    counts = ""
    """What :func:`summary` counts a note of this kind under ("" : an other note)."""


class NotMeasured(Note):
    """No verdict on a claim: a point it covers was not measured (the message names it)."""

    counts = "not measured: {n} verdict{s}"


class Busy(Note):
    """No verdict on a timing claim: the machine was busy while its samples were measured.

    ``claim``: the claim, as the verdict line names it; ``reason``: the load or steal time
    that made the machine busy (:func:`analysis.verdicts.busy`)."""

    counts = "machine busy: {n} verdict{s} withheld"

    def __init__(self, claim: str, reason: str):
        super().__init__(f"no verdict on '{claim}': the machine was busy: {reason}")
        self.claim, self.reason = claim, reason


class NotDrawn(Note):
    """A report section not drawn (some of its experiments have no results, or drawing it failed)."""

    counts = "not drawn: {n} section{s}"


class Skipped(Note):
    """A result file skipped (the message names it and why)."""

    counts = "skipped: {n} file{s}"


class Commits(Note):
    """The results drawn come from more than one commit (the message counts the files of each)."""

    counts = "results of several commits"


KINDS = (NotMeasured, Busy, NotDrawn, Skipped, Commits, Note)
"""The kinds in the order :func:`summary` and :func:`section` give them."""


def collected(caught: Iterable) -> list[Warning]:
    """The notes among ``caught`` (:func:`warnings.catch_warnings` records), each once, in
    order: every :class:`UserWarning` (a plain one, from a library the analysis calls, is
    listed as an other note), duplicates (the same text) dropped."""
    out: dict[str, Warning] = {}
    for w in caught:
        if issubclass(w.category, UserWarning):
            out.setdefault(str(w.message), w.message if isinstance(w.message, Warning) else UserWarning(w.message))
    return list(out.values())


def _kind(note: Warning) -> type:
    return next((k for k in KINDS if isinstance(note, k)), Note)


def summary(notes: Iterable[Warning], where: str) -> str:
    """One line counting ``notes`` by kind, pointing at ``where`` (the report that lists
    them): ``"not measured: 3 verdicts; not drawn: 1 section (listed in report.md)"``;
    "" when there are none."""
    notes = list(notes)
    parts = []
    for kind in KINDS:
        n = sum(_kind(x) is kind for x in notes)
        if n:
            parts.append(kind.counts.format(n=n, s="" if n == 1 else "s") if kind.counts
                         else f"{n} other note{'' if n == 1 else 's'}")
    return f"{'; '.join(parts)} (listed in {where}, under 'Not measured or skipped')" if parts else ""


def section(notes: Iterable[Warning]) -> list[str]:
    """The markdown bullets of *Not measured or skipped*: one per note, in the order of
    :data:`KINDS`, except the busy machine, said in one bullet that names the claims
    withheld under each distinct reason."""
    notes = list(notes)
    lines = []
    for kind in KINDS:
        mine = [x for x in notes if _kind(x) is kind]
        if not mine:
            continue
        if kind is Busy:
            reasons: dict[str, list[str]] = {}
            for x in mine:
                reasons.setdefault(x.reason, []).append(f"'{x.claim}'")
            lines.append(f"- The machine was busy (load average above the run's threads + {BUSY_LOAD:g}, or steal time "
                         f"above {100 * BUSY_STEAL:g}%) "
                         f"while the samples of {len(mine)} timing claim{'' if len(mine) == 1 else 's'} were measured; "
                         "no verdict on them: " + "; ".join(f"{', '.join(c)} ({r})" for r, c in reasons.items()))
        else:
            lines += [f"- {x}" for x in mine]
    return lines
