"""Every figure ``analysis`` draws, laid out as it is saved, passes a reviewer's look:

- every text (tick labels, axis labels, titles, annotations, legend entries, the caption)
  lies inside the figure, or above it for the figure legend, which sits above the panels by
  design and is kept by ``bbox_inches="tight"`` (:func:`analysis.style.save`); a text
  written in a panel lies inside that panel, and a clipped text inside its clip box;
- no two texts overlap (their rendered boxes, as ``tests/test_analysis.py::text_overlaps``);
- every labelled line, collection or bar series is in a legend, and every unlabelled line
  (a reference line such as float32's eps) has its colour and line style in a legend;
- no legend covers a plotted marker or bar.

The figures are built from the recorded tiny run (``tests/data/tiny-results.tar.gz``: the
same numbers on every machine), from a tiny run measured now (integration tier: a layout
that holds only for one machine's numbers fails there) and from the result files committed
under ``docs/results`` (slow).
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("pandas")
pytest.importorskip("seaborn")

from analysis import reproduce, style  # noqa: E402
from benchmarks.results import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PEFT = all(importlib.util.find_spec(m) is not None for m in ("peft", "transformers"))
"""FRAQ against peft's merge is measured (and its figure checked) where peft is installed (the fl extra)."""
SLACK = 1.0
"""Pixels a box may pass an edge or overlap another by (antialiasing, rounding)."""


# ----------------------------------------------------------------------------- the checks


def _drawn_texts(fig, renderer):
    """(text artist, its box) of every non-empty text actually drawn, drawing ``fig`` once."""
    from matplotlib.text import Text

    drawn, draw = [], Text.draw

    def record(self, r):
        draw(self, r)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self, self.get_window_extent(r)))

    Text.draw = record
    try:
        fig.draw(renderer)
    finally:
        Text.draw = draw
    return drawn


def _inside(box, outer) -> bool:
    return (box.x0 >= outer.x0 - SLACK and box.x1 <= outer.x1 + SLACK and box.y0 >= outer.y0 - SLACK
            and box.y1 <= outer.y1 + SLACK)


def _overlap(a, b) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK and min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK


def _hex(c) -> str:
    from matplotlib.colors import to_hex

    return to_hex(c, keep_alpha=False)


def _style(line) -> tuple[str, str]:
    ls = line.get_linestyle()
    return _hex(line.get_color()), "-" if ls in ("-", "solid") else ("none" if ls in ("None", "none", "") else ls)


def _colors(handle) -> list[str]:
    """The colours a legend handle shows (line, face or edge)."""
    import numpy as np

    out = []
    for get in ("get_color", "get_facecolor", "get_edgecolor"):
        if hasattr(handle, get):
            c = np.asarray(getattr(handle, get)(), dtype=object)
            rows = c if c.ndim == 2 else [c] if c.ndim == 1 and len(c) in (3, 4) else list(c.ravel())
            for x in rows:
                try:
                    out.append(_hex(tuple(x) if not isinstance(x, str) else x))
                except (TypeError, ValueError):
                    pass
    return out


def _legends(fig) -> list:
    return list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]


def layout_problems(fig) -> list[str]:
    """What a reviewer would object to in ``fig`` as drawn now (see the module's docstring)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Bbox

    canvas = FigureCanvasAgg(fig)
    fig.canvas = canvas
    renderer = canvas.get_renderer()
    texts = _drawn_texts(fig, renderer)
    fig_box = fig.bbox
    legends = _legends(fig)
    legend_boxes = [(lg, lg.get_window_extent(renderer)) for lg in legends]
    problems = []

    def owner_legend(t):
        return next((lg for lg in legends if t in lg.get_texts() or t is lg.get_title()), None)

    above = fig_box.frozen()
    for lg in fig.legends:  # the figure legend is drawn above the panels, inside the saved file
        b = lg.get_window_extent(renderer)
        above = Bbox.union([above, b]) if b.y0 >= fig_box.y1 - SLACK else above
    for t, box in texts:
        name = repr(t.get_text())
        lg = owner_legend(t)
        if not _inside(box, above if lg in fig.legends else fig_box):
            problems.append(f"{name} outside the figure ({box.bounds} not in {fig_box.bounds})")
        ax = t.axes
        if ax is not None and t in ax.texts and not _inside(box, ax.bbox):
            problems.append(f"{name} written in panel {ax.get_title()!r} reaches past its edge")
        clip = t.get_clip_box() if t.get_clip_on() else None
        if clip is not None and not _inside(box, clip):
            problems.append(f"{name} cut by its clip box")
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1:]:
            if _overlap(box_a, box_b):
                problems.append(f"texts overlap: {a.get_text()!r} and {b.get_text()!r}")

    labels = {t.get_text() for lg in legends for t in lg.get_texts()}
    handles = [h for lg in legends for h in lg.legend_handles]
    styles = {_style(h) for h in handles if isinstance(h, Line2D)}
    colors = {c for h in handles for c in _colors(h)}
    for ax in fig.axes:
        where = f"panel {ax.get_title()!r}"
        for line in ax.get_lines():
            label = line.get_label()
            if len(line.get_xdata()) == 0 or not line.get_visible():
                continue
            if not label.startswith("_"):
                if label not in labels:
                    problems.append(f"{where}: line {label!r} not in a legend")
            elif line.get_marker() not in ("_", "|") and not (
                    _style(line) in styles or (_style(line)[0], "-") in styles  # a method's other line style
                    or (_style(line)[1] == "none" and _style(line)[0] in colors)):  # its markers (errorbar)
                problems.append(f"{where}: an unlabelled line {_style(line)} matches no legend entry")
        for c in list(ax.collections) + list(ax.containers):
            label = c.get_label()
            if label and not label.startswith("_") and label not in labels:
                problems.append(f"{where}: {type(c).__name__} {label!r} not in a legend")
        points, bars = [], []  # what is plotted and in view, in display coordinates
        for line in ax.get_lines():
            if line.get_marker() not in (None, "", "None", "none") and len(line.get_xdata()):
                points += list(line.get_transform().transform(line.get_xydata()))
        for c in ax.collections:
            if isinstance(c, PathCollection):
                points += list(c.get_offset_transform().transform(c.get_offsets()))
        points = [("point", p) for p in points if ax.bbox.contains(*p)]
        for p in ax.patches:
            if isinstance(p, Rectangle) and p.get_height() and p.get_width():
                seen = Bbox.intersection(p.get_window_extent(renderer), ax.bbox)
                bars += [("bar", seen)] if seen is not None else []
        for lg, lbox in legend_boxes:
            for kind, m in points + bars:
                if lbox.contains(*m) if kind == "point" else _overlap(lbox, m):
                    problems.append(f"{where}: its legend covers a plotted {kind}")
                    break
    return list(dict.fromkeys(problems))


def saved_figures(results: Path, tmp: Path) -> dict[str, object]:
    """name -> Figure of every report section drawn from ``results``, laid out and saved as the
    report saves it (its caption line under the panels)."""
    import matplotlib

    matplotlib.use("Agg")
    from analysis.resultset import load

    style.setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = load(results)
        out = {}
        for name in reproduce.SECTIONS:
            mod = reproduce.section_module(name)
            if any(res[e].empty for e in mod.reads):
                continue
            for sec in mod.draw(res):
                f = sec.figure
                if f is not None:
                    style.save(f.fig, tmp, f.name, style.caption(f.rows, f.detail), ("png",))
                    out[f.name] = f.fig
    return out


# ----------------------------------------------------------------------------- the figures


def _drawn_from(results, out):
    """``results``' experiments that a figure draws copied to ``out``, with a backends
    experiment written as its runs write it (measuring it takes minutes) and the paper's
    four peft points (four models, the longest labels) from the tiny one's rows."""
    from conftest import tiny_copy

    tiny_copy(results, out, ("fig4_cond", "fig4_rank", "fig1", "fig3", "clients", "peft"))
    for i in range(6):
        for case, ms in (("roberta-base", 60.0 * 1.3**i), ("llama-3.2-3b", 210.0 + 70 * i)):
            write_result(out, "backends", f"{case}-{i}",
                         dict(section="lora", case=case, backend=f"backend-{i}", size="tiny"),
                         dict(exact=i != 5, gflop=0.3, gap_to_optimum=1e-13 * (i + 1) if i != 5 else 1e-3, ms_1t=ms,
                              iqr_ms_1t=1.0))
    peft = sorted((out / "peft").glob("*.json")) if (out / "peft").is_dir() else []
    if not peft:
        return out
    rec = json.loads(peft[0].read_text())
    for model, layers, p in (("minilm", None, 8), ("roberta-base", None, 8), ("llama-3.2-3b", 1, 8)):
        rec["config"].update(model=model, layers=layers, p=p)
        rec["key"] = f"{model}-L{layers or 'all'}-p{p}-tau0.95"
        (out / "peft" / f"{rec['key']}.json").write_text(json.dumps(rec))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_results):
    """The recorded tiny run's results of every experiment a figure draws (fixed numbers)."""
    return _drawn_from(tiny_results, tmp_path_factory.mktemp("layout") / "results")


EXPECTED = {"fig1_downlink", "fig3_scalability", "fig4_fidelity", "fig_clients", "fig_backends", "fig_peft"}


@pytest.mark.integration  # several seconds: the end-to-end tier
def test_every_figure_at_the_tiny_size_is_laid_out_for_a_reviewer(tiny, tmp_path):
    figs = saved_figures(tiny, tmp_path)
    assert EXPECTED <= set(figs), sorted(figs)
    found = {name: layout_problems(fig) for name, fig in figs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_every_figure_of_a_tiny_run_measured_here_is_laid_out_for_a_reviewer(tiny_runs, tmp_path):
    """The same on this machine's own numbers (the layout must hold for whatever a machine
    measures, not only for the recording's)."""
    figs = saved_figures(_drawn_from(tiny_runs, tmp_path / "results"), tmp_path / "figures")
    assert EXPECTED - ({"fig_peft"} if not PEFT else set()) <= set(figs), sorted(figs)
    found = {name: layout_problems(fig) for name, fig in figs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_the_federated_figure_is_laid_out_for_a_reviewer(tmp_path):
    """The federated report's figure, from result files as ``python -m fraq.federated`` writes
    them (two variants, every method, three seeds, six rounds)."""
    from test_federated_report import write_points

    write_points(tmp_path / "run", rounds=6)
    figs = saved_figures(tmp_path / "run" / "results", tmp_path / "figures")
    assert set(figs) == {"federated_accuracy"}
    assert layout_problems(figs["federated_accuracy"]) == []


def test_the_checks_find_what_they_look_for():
    """Each check fails on the defect it names: a label past its panel's edge, two texts on
    each other, a text past the figure, an unlabelled line and a labelled one outside the legend, a
    legend on a bar."""
    import matplotlib.pyplot as plt

    style.setup()
    fig, ax = plt.subplots(figsize=(4, 3))
    bars = ax.bar([0, 1], [2, 2], label="bars")
    ax.plot([0, 1], [1, 1], color="#123456", linestyle=":")
    ax.plot([0, 1], [2, 2], label="named")
    ax.text(0.98, 0.5, "a label that runs off", transform=ax.transAxes)
    ax.set_xticks([0, 0.02], ["crowded", "ticks"])
    ax.legend(handles=[bars], loc="upper left")
    fig.text(0.99, 0.5, "past the edge")
    found = " | ".join(layout_problems(fig))
    for what in ("reaches past its edge", "'past the edge' outside the figure",
                 "texts overlap: 'crowded' and 'ticks'", "unlabelled line",
                 "line 'named' not in a legend", "legend covers a plotted bar"):
        assert what in found, (what, found)
    plt.close(fig)


@pytest.mark.slow
@pytest.mark.parametrize("pack", sorted(ROOT.glob("docs/results/*/*/results.tar.gz")),
                         ids=lambda p: str(p.parent.relative_to(ROOT / "docs" / "results")))
def test_every_figure_of_a_committed_run_is_laid_out_for_a_reviewer(pack, tmp_path):
    """The committed runs' results (the paper's and reduced shapes: more ticks, longer labels,
    more clients) drawn and checked as the tiny run's."""
    from fraq.internals import open_tar_gz

    with open_tar_gz(pack) as tar:  # results/<experiment>/<key>.json files only (analysis.reproduce unpacks so)
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith("results/") and ".." not in m.name:
                (tmp_path / m.name).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / m.name).write_bytes(tar.extractfile(m).read())
    figs = saved_figures(tmp_path / "results", tmp_path / "figures")
    if not figs:  # a run of tables alone (a GPU call of Tables 1-3): nothing drawn, nothing to lay out
        assert {p.name for p in (tmp_path / "results").iterdir()} <= {"tables123", "workspace", "eigensolver"}
        pytest.skip("no figure in this run's results")
    found = {name: layout_problems(fig) for name, fig in figs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
