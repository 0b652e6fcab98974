"""Every figure ``analysis`` draws, laid out as it is saved, passes a reviewer's look:

- every text (tick labels, axis labels, titles, annotations, legend entries, the caption)
  lies inside the figure, or above it for the figure legend, which sits above the panels by
  design and is kept by ``bbox_inches="tight"`` (:func:`analysis.style.save`); a text
  written in a panel lies inside that panel, and a clipped text inside its clip box;
- no two texts overlap (their rendered boxes, as ``tests/test_analysis.py::text_overlaps``);
- every labelled line, collection or bar series is in a legend, and every unlabelled line
  (a reference line such as float32's eps) has its colour and line style in a legend;
- no legend covers a plotted marker or bar, and a figure legend is no wider than its figure;
- methods are told apart (:func:`method_problems`): distinct colours, FRAQ on top, line
  styles the legend defines, every panel's axes labelled.

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
        if b.x0 < fig_box.x0 - SLACK or b.x1 > fig_box.x1 + SLACK:  # an inline figure cuts it at the sides
            problems.append(f"the figure legend is wider than the figure ({b.bounds} past {fig_box.bounds})")
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
    assert method_problems(figs["federated_accuracy"]) == []


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


# ----------------------------------------------------------------------------- methods told apart


def _method(line) -> str | None:
    """The method a line draws: its ``gid`` (the figures that keep method lines out of the legend
    name them so), else its legend label; None for an unnamed line (a band's edge, a reference)."""
    gid = line.get_gid()
    if gid:
        return gid
    label = line.get_label()
    return None if label.startswith("_") else label


def _family(name: str) -> str:
    """``FlexLoRA (kernel=fraq)`` -> ``FlexLoRA``: the method a variant is a variant of."""
    return name.split(" (")[0]


def _filled(line) -> bool:
    face = line.get_markerfacecolor()
    return not (isinstance(face, str) and face in ("white", "none")) and _hex(face) != "#ffffff"


KNOWN = {_family(name) for name in style.COLORS}
"""The methods' families (a reference line such as the optimum is drawn above them on purpose)."""


def method_problems(fig) -> list[str]:
    """What keeps a reader from telling the methods of ``fig`` apart:

    - two methods' lines in one panel closer in colour than CIE76 delta-E
      :data:`analysis.style.MIN_DELTA_E` (methods of different families always; a method and
      its variant, or two variants, unless their line style or marker differs too);
    - FRAQ's line not on top (the highest zorder, drawn after every other method's at it);
    - two lines of one method in one panel on the same points (one hides the other);
    - a line whose style and marker fill match no legend entry's where the legend defines
      them (``batched`` solid and filled, ``unbatched`` dashed and hollow);
    - a panel that draws a method with no x label in its column or no y label in its row."""
    problems = []
    handles = [h for lg in _legends(fig) for h in lg.legend_handles]
    texts = [t.get_text() for lg in _legends(fig) for t in lg.get_texts()]
    modes = {(_style(h)[1], _filled(h)) for h, t in zip(handles, texts) if t in ("batched", "unbatched")}
    grid = [(ax, ax.get_subplotspec()) for ax in fig.axes if ax.get_subplotspec() is not None]
    for ax in fig.axes:
        where = f"panel {ax.get_title()!r}"
        lines = [(i, ln, _method(ln)) for i, ln in enumerate(ax.get_lines()) if _method(ln) and len(ln.get_xdata())]
        for a, (_, la, ma) in enumerate(lines):
            for _, lb, mb in lines[a + 1:]:
                if ma == mb:
                    if la.get_linestyle() == lb.get_linestyle() and \
                            [list(map(float, x)) for x in la.get_xydata()] == [list(map(float, x)) for x in lb.get_xydata()]:
                        problems.append(f"{where}: two lines of {ma} on the same points")
                    continue
                de = style.delta_e(la.get_color(), lb.get_color())
                differs = (la.get_linestyle(), la.get_marker()) != (lb.get_linestyle(), lb.get_marker())
                if de <= style.MIN_DELTA_E and (_family(ma) != _family(mb) or not differs):
                    problems.append(f"{where}: {ma} and {mb} in colours {de:.1f} apart (delta-E)")
        if modes:
            for _, ln, m in lines:
                if (_style(ln)[1], _filled(ln)) not in modes:
                    problems.append(f"{where}: {m} drawn {_style(ln)[1]}, markers "
                                    f"{'filled' if _filled(ln) else 'hollow'}: not a mode of the legend")
        ranked = [t for t in lines if t[1].get_gid() or _family(t[2]) in KNOWN]  # not "Optimal", a bound
        if any(m == style.HIGHLIGHT for *_, m in ranked):
            top = max(ranked, key=lambda t: (t[1].get_zorder(), t[0]))  # matplotlib draws by zorder, stably
            if top[2] != style.HIGHLIGHT:
                problems.append(f"{where}: {top[2]} drawn over FRAQ")
        if lines:
            spec = ax.get_subplotspec()
            col = [o for o, s in grid if s.colspan == spec.colspan]
            row = [o for o, s in grid if s.rowspan == spec.rowspan]
            if not any(o.get_xlabel().strip() for o in col):
                problems.append(f"{where}: no x label in its column")
            if not any(o.get_ylabel().strip() for o in row):
                problems.append(f"{where}: no y label in its row")
    return list(dict.fromkeys(problems))


NAMED = {"fig3_scalability", "fig_clients"}
"""Figures whose method lines are named by ``gid`` (their legend lists methods and line styles
apart)."""


@pytest.mark.integration  # several seconds: the end-to-end tier
def test_every_figure_at_the_tiny_size_tells_its_methods_apart(tiny, tmp_path):
    figs = saved_figures(tiny, tmp_path)
    assert NAMED <= set(figs), sorted(figs)
    for name in NAMED:  # every method of the legend is named on its lines
        drawn = {ln.get_gid() for ax in figs[name].axes for ln in ax.get_lines()} - {None}
        legend = {t.get_text() for lg in _legends(figs[name]) for t in lg.get_texts()}
        assert drawn and drawn <= legend and "FRAQ" in drawn, (name, drawn, legend)
    found = {name: method_problems(fig) for name, fig in figs.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_the_method_checks_find_what_they_look_for():
    """Each check fails on the defect it names: two variants in one colour and marker, FRAQ
    under another method, a mode the legend does not define, a panel without labels."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], color="#6A3D9A", marker="o", gid="FRAQ")
    ax.plot([1, 2], [1, 2], color="#E66101", marker=".", gid="FlexLoRA (kernel=fraq)")
    ax.plot([1, 2], [2, 3], color="#E66101", marker=".", gid="FlexLoRA (kernel=rsvd)")
    ax.plot([1, 2], [3, 4], color="#E66101", marker="^", linestyle="-", markerfacecolor="white", gid="FlexLoRA")
    ax.plot([1, 2], [3, 4], color="#E66101", marker="^", linestyle="-", markerfacecolor="white", gid="FlexLoRA")
    ax.plot([1, 2], [2, 4], color="#B15928", marker="P", gid="rSVD")
    fig.legend([Line2D([], [], color="k", marker="o"),
                Line2D([], [], color="k", linestyle="--", marker="o", markerfacecolor="white")],
               ["batched", "unbatched"])
    found = " | ".join(method_problems(fig))
    for what in ("FlexLoRA (kernel=fraq) and FlexLoRA (kernel=rsvd) in colours", "drawn over FRAQ",
                 "two lines of FlexLoRA on the same points", "FlexLoRA drawn -, markers hollow",
                 "no x label", "no y label"):
        assert what in found, (what, found)
    assert "FlexLoRA and rSVD" not in found  # 22 apart in delta-E: told apart
    plt.close(fig)


def test_the_paper_methods_colours_are_told_apart():
    """Any two of the paper's methods (drawn side by side in the federated figure), and any
    of them and a variant's shade, lie more than MIN_DELTA_E apart."""
    from itertools import combinations

    colors = dict(style.COLORS)
    for family in ("FRAQ", "FLoRIST", "FlexLoRA"):
        for i, (to, t) in enumerate(style.VARIANT_SHADES[:2]):
            colors[f"{family} variant {i}"] = style.shade(style.COLORS[family], to, t)
    close = [(a, b, round(style.delta_e(ca, cb), 1)) for (a, ca), (b, cb) in combinations(colors.items(), 2)
             if style.delta_e(ca, cb) <= style.MIN_DELTA_E]
    assert not close, close


def test_fig3_of_one_point_draws_that_point_and_names_what_is_missing(tiny_results, tmp_path):
    """A run that timed one point (a GPU call: the d sweep at one d, batched, no FLOPs
    counted) draws that point in every panel it has, no empty panel, and its caption names
    the sweep and the metric it lacks."""
    from analysis.resultset import load
    from analysis.sections import fig3

    style.setup()
    out = tmp_path / "results" / "fig3"
    out.mkdir(parents=True)
    for f in (Path(tiny_results) / "fig3").glob("d-*-batched-d32-*.json"):
        rec = json.loads(f.read_text())
        rec["result"].pop("counted_flops", None)
        (out / f.name).write_text(json.dumps(rec))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = load(tmp_path / "results")
        (sec, _) = fig3.draw(res)
    fig = sec.figure.fig
    assert len(fig.axes) == 3, [ax.get_title() for ax in fig.axes]  # time, memory, error; the d column
    assert all(ax.get_lines() for ax in fig.axes), [ax.get_title() for ax in fig.axes if not ax.get_lines()]
    assert "not drawn: the r sweep, counted GFLOP (batched)" in sec.figure.detail, sec.figure.detail
    assert layout_problems(fig) == [] and method_problems(fig) == []


def test_a_legend_wider_than_its_figure_takes_more_rows():
    """A figure legend never reaches past the figure's left or right edge (a notebook's
    inline figure cuts it there): :func:`analysis.figures.legend_top` takes fewer columns."""
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.lines import Line2D

    from analysis.figures import legend_top

    style.setup()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2], [1, 2])
    labels = [f"FlexLoRA (kernel=method {i})" for i in range(8)]
    legend_top(fig, [Line2D([], [], color="k") for _ in labels], labels, len(labels))
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = fig.legends[0].get_window_extent(renderer)
    assert box.x0 >= fig.bbox.x0 - SLACK and box.x1 <= fig.bbox.x1 + SLACK, (box.bounds, fig.bbox.bounds)
    plt.close(fig)
