"""The committed report of one published data set: ``docs/results/federated/<data set>/``.

    python -m analysis.federated_report --results RUN --long LONG --out docs/results/federated/banking77

Reads the result files of a named setting's run (``python -m fraq.federated --config
banking77 --out RUN``) and of its 4x longer schedule on one seed (``--out LONG``, the same
setting with ``--rounds`` four times larger, :data:`LONG_FACTOR`), and writes into
``--out``:

- ``report.md``: per variant the accuracy mean and 95% interval over seeds beside the
  paper's Table 1, downlink as % of FLoRA beside the paper's percentage, the best and
  second-best compressed-downlink method marked as the paper marks them, the paired
  per-seed verdicts on the paper's claims, and how far the scaled schedule is from the
  4x longer one on its seed; the publishers cited with their licences;
- ``figures/federated_accuracy.png``: the accuracy curves;
- ``README.md``: machine, date, load, wall time and commit, all read from the result files.

Every file is written beside its target and renamed into place (:mod:`analysis.atomic`).
Nothing here measures.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import pandas as pd

from analysis import notes
from analysis.atomic import cannot_write
from analysis.reproduce import Built
from analysis.style import method_parts

__all__ = ["LONG_FACTOR", "build", "main"]

LONG_FACTOR = 4
"""The longer schedule's rounds over the scaled one's."""

LICENCES = {
    "banking77": ("BANKING77", "Casanueva, Temčinas, Gerz, Henderson, Vulić. *Efficient Intent Detection with Dual "
                  "Sentence Encoders.* NLP4ConvAI 2020, arXiv:2003.04807", "CC BY 4.0",
                  "github.com/PolyAI-LDN/task-specific-datasets (`banking_data/`): `train.csv` (10,003 examples) for "
                  "training, `test.csv` (3,080) for evaluation, 77 intents"),
    "clinc150": ("CLINC150", "Larson, Mahendran, Peper, Clarke, Lee, Hill, Kummerfeld, Leach, Laurenzano, Tang, Mars. "
                 "*An Evaluation Dataset for Intent Classification and Out-of-Scope Prediction.* EMNLP-IJCNLP 2019, "
                 "doi:10.18653/v1/D19-1131", "CC BY 3.0",
                 "github.com/clinc/oos-eval (`data/data_full.json`): in-scope only, its `train` list (15,000 "
                 "examples) for training and its `test` list (4,500) for evaluation, 150 intents; the `val` list and "
                 "the out-of-scope examples are not used"),
}
"""Per published data set: its name, the publication to cite, its licence, the files and splits used."""


def _paper_key(spec: str) -> str:
    """``"fraq:tau=0.95"`` -> ``"fraq (tau=0.95)"``: the paper's table keys (analysis/paper.json)."""
    name, opts = method_parts(spec)
    return f"{name} ({opts})" if opts else name


def _alpha_column(alpha: float) -> int | None:
    """The paper's Table 1 column of a Dirichlet alpha: 0 for Dir(0.1), 1 for Dir(0.02)."""
    return {0.1: 0, 0.02: 1}.get(round(float(alpha), 4))


def _table(runs, df, variant: str, data: str) -> str:
    from analysis import tables
    from analysis.sections import federated
    from analysis.loaders import paper

    p = paper()
    down = p["tables123"]["roberta-base"]
    acc = p.get("table1_accuracy", {}).get(data, {})
    alpha = df.loc[df["variant"] == variant, "partition.alpha"].iloc[0] if "partition.alpha" in df else math.nan
    col = _alpha_column(alpha) if math.isfinite(alpha) else None
    t = federated.table(runs, variant)
    specs = {name: m for m, name in federated.shown(runs[runs["variant"] == variant]).items()}
    paper_acc, paper_down = [], []
    for name in t["Method"]:
        key = _paper_key(specs.get(name, ""))
        paper_acc.append(f"{acc[key][col]:.2f}" if col is not None and key in acc else "")
        paper_down.append(f"{down[key][0]:.1f}" if key in down else "")
    t.insert(2, "Paper accuracy (%)", paper_acc)
    t.insert(4, "Paper downlink (% FLoRA)", paper_down)
    return tables.markdown(t)


def _schedule(df, long_df, data: str) -> list[str]:
    """How far the scaled schedule's final accuracy is from the 4x longer one, on the long run's seed."""
    from analysis.sections import federated

    if long_df is None or long_df.empty:
        return ["The 4x longer schedule was not run: no comparison."]
    rounds = int(df["federated.rounds"].iloc[0])
    long_rounds = int(long_df["federated.rounds"].iloc[0])
    lc = federated.curves(long_df)
    names = federated.shown(lc)
    main = federated.runs(df)
    seeds = sorted(lc["seed"].unique())
    variants = sorted(lc["variant"].unique())
    lines = [f"One seed ({', '.join(map(str, seeds))}) of {', '.join(f'`{v}`' for v in variants)} run for "
             f"{long_rounds} rounds instead of {rounds} (everything else the same; the state after round {rounds} is "
             f"the scaled run's final state, so its accuracy there is the scaled schedule's):", "",
             f"| Method | round {rounds} (scaled) | round {long_rounds} ({long_rounds // max(rounds, 1)}x) | "
             f"difference (points) | scaled run's own |", "|---|---:|---:|---:|---:|"]
    for m in federated._order(lc["method"]):
        for v in variants:
            for s in seeds:
                g = lc[(lc["method"] == m) & (lc["variant"] == v) & (lc["seed"] == s)].set_index("round")["accuracy"]
                if rounds not in g.index or long_rounds not in g.index:
                    continue
                own = main[(main["method"] == m) & (main["variant"] == v) & (main["seed"] == s)]["accuracy"]
                own_txt = f"{own.iloc[0]:.2f}" if len(own) else "not run"
                lines.append(f"| {names[m]} | {g[rounds]:.2f} | {g[long_rounds]:.2f} | "
                             f"{g[long_rounds] - g[rounds]:+.2f} | {own_txt} |")
    lines += ["", "The last column is the same point in the scaled run itself: equal to the first when the two "
              "runs computed the same rounds bit for bit."]
    return lines


FEDERATED_DOC = Path(__file__).resolve().parents[1] / "docs" / "federated.md"
"""The harness's documentation, which the README links to (its section on the published data sets)."""


def _doc_link(out: Path) -> str:
    """The link to :data:`FEDERATED_DOC` from a README written in ``out``: relative, as the
    repository's markdown links are, so that it works wherever ``out`` is."""
    import os

    return Path(os.path.relpath(FEDERATED_DOC, Path(out).resolve())).as_posix()


def _readme(df, long_df, data: str, out: Path) -> str:
    frames = [df] + ([long_df] if long_df is not None and not long_df.empty else [])
    parts = []
    for name, d in zip(("the run", "the 4x longer run"), frames):
        created = pd.to_datetime(d["created"])
        start = (created - pd.to_timedelta(d["wall_seconds"], unit="s")).min()
        la = pd.to_numeric(d["loadavg"], errors="coerce")
        parts.append(f"- {name.capitalize()}: {len(d)} points, {start:%Y-%m-%d %H:%M}-{created.max():%H:%M} "
                     f"(local time of the machine), {(created.max() - start).total_seconds() / 60:.1f} min from the "
                     f"first point's start to the last point's end (loading and encoding the data before it not "
                     f"included); 1-minute load average {la.min():.1f}-{la.max():.1f} at the points' ends.")
    c = df.iloc[0]
    sha = sorted(set(str(x)[:10] for x in df["git_sha"].dropna()))
    title = LICENCES.get(data, (data,))[0]
    return "\n".join([
        f"# {title}: federated fine-tuning", "",
        f"[report.md](report.md): accuracy over seeds per variant beside the paper's Table 1, downlink beside the "
        f"paper's, the paired verdicts and the 4x longer schedule; the curves under [figures/](figures/).", "",
        f"- Machine: {c.get('machine.cpu')}, {c.get('machine.cores')} cores, BLAS {c.get('machine.blas')}, torch "
        f"{c.get('machine.torch')}, {int(c.get('threads'))} torch thread(s), python {c.get('machine.python')}.",
        *parts,
        f"- Commit: {', '.join(sha)}.", "",
        "Drawn from the result files by `python -m analysis.federated_report`; the commands that produce it are in "
        f"[docs/federated.md]({_doc_link(out)}#the-published-data-sets). The result files themselves are not in "
        "this folder.", ""])


def build(results: Path, long: Path | None, out: Path) -> Built:
    """Write ``out/report.md``, ``out/figures/federated_accuracy.png`` and ``out/README.md``;
    return the report's path and the notes it lists under *Not measured or skipped*
    (:class:`analysis.reproduce.Built`; not issued again). Raises :class:`analysis.resultset.NoResults` /
    :class:`~analysis.resultset.MixedResults` (a mix of settings) and OSError (a file that
    cannot be written: the old one stays)."""
    import matplotlib

    matplotlib.use("Agg")
    from analysis import style
    from analysis.sections import federated
    from analysis.atomic import write_text
    from analysis.resultset import load
    from analysis.sections.federated import _setting, titles

    style.setup()
    caught: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load(results)["federated"]
        long_df = load(long)["federated"] if long is not None else None
        data = str(df["dataset.name"].iloc[0]) if "dataset.name" in df else "?"
        runs = federated.runs(df)
        variants = federated.variants(runs, df)
        heads = titles(df, variants)
        name, cite, licence, files = LICENCES.get(data, (data, "", "", ""))
        body = [f"# {name}: federated fine-tuning over seeds, beside the paper's Table 1", "",
                f"**Data.** {name}: {cite}; licence {licence}. Files: {files}." if cite else "", "",
                f"**Setting.** {_setting(df, variants)}", "", federated.HOW, "",
                "The paper's columns are RoBERTa-base's (Table 1, 30 rounds of 200 steps on a GPU): beside ours for "
                "the ranking of the methods and the downlink, not for the accuracy values.", ""]
        for v in variants:
            body += [f"## {heads[v]}", "", _table(runs, df, v, data), "", *federated.verdict_lines(runs, v), ""]
        body += ["Bold: best accuracy among the compressed-downlink methods (below 100% of FLoRA's downlink), "
                 "underlined: second best, by the mean over seeds, as the paper marks them. " + federated.share_note(df),
                 "",
                 "## The accuracy curves", "", "![accuracy per round](figures/federated_accuracy.png)", "",
                 "## The scaled schedule against a 4x longer one", "", *_schedule(df, long_df, data), ""]
        fig = federated.figure(federated.curves(df), variants, heads)
    found = notes.collected(caught)
    if found:
        body += ["## Not measured or skipped", "", *notes.section(found), ""]
    band = "mean over seeds, band = 95% t-interval (none on FRAQ's dashed setting)"
    style.save(fig, out / "figures", "federated_accuracy", style.caption(df, band), ("png",))
    write_text(out / "README.md", _readme(df, long_df, data, out))
    return Built(write_text(out / "report.md", "\n".join(body)), tuple(found))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.federated_report", description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, required=True, help="the run's --out (holding results/federated/)")
    ap.add_argument("--long", type=Path, help="the 4x longer run's --out (one seed)")
    ap.add_argument("--out", type=Path, required=True, help="where report.md, README.md and figures/ go")
    args = ap.parse_args(argv)
    from analysis.resultset import MixedResults, NoResults

    for flag, path in (("--results", args.results), ("--long", args.long)):
        if path is not None and not (path / "results").is_dir():
            print(f"error: {flag}(={str(path)!r}) holds no results/ directory (give a run's --out)", file=sys.stderr)
            return 2
    try:
        built = build(args.results / "results", None if args.long is None else args.long / "results", args.out)
    except (NoResults, MixedResults) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {cannot_write(exc)}", file=sys.stderr)
        return 1
    print(f"report: {built.report}")
    if built.notes:  # one line for all of them: the report lists each
        print(built.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
