"""How methods are shown (names, order, colours and markers, read from the result files), the house
plot style, and caption lines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import forked
from analysis.atomic import write_together

__all__ = ["COLORS", "EXTRA_COLORS", "EXTRA_MARKERS", "HIGHLIGHT", "MARKERS", "MIN_DELTA_E", "NAMES", "PAPER_ORDER",
           "VARIANT_MARKERS", "VARIANT_SHADES", "described", "delta_e", "display_name", "method_parts", "legend_key",
           "shade", "styles", "setup", "caption", "save", "integers", "num", "formatted", "log_labels", "log_tick"]

# A method is shown by what its result files say of it (benchmarks.measure.described: the
# runner writes ``display_name``, ``family`` and ``paper_order`` from the aggregator's class).
# NAMES and PAPER_ORDER answer for result files that carry no description (the committed
# docs/results/** and the federated harness's), by registry name; any other name is shown
# as it is written.
NAMES = {"fraq": "FRAQ", "florist": "FLoRIST", "flexlora": "FlexLoRA", "flora": "FLoRA",
         "fraq-paper": "FRAQ (paper config.)", "qr-svd": "QR-QR-SVD", "rsvd": "rSVD", "fedex-lora": "FedEx-LoRA",
         "fedit": "FedIT", "lora-a2": "LoRA-A²", "florg": "FLoRG"}
"""Display names of the methods of result files without ``display_name``, by registry name
(in legend order: the Fig. 4 verdicts, analysis.sections.fig4, list methods in this order)."""
PAPER_ORDER = {"flora": 1, "fedex-lora": 2, "fedit": 3, "lora-a2": 4, "flexlora": 5, "florg": 6, "florist": 7,
               "fraq": 8, "fraq-paper": 8}
"""Rows in the paper's Tables 1-3 of the methods of result files without ``paper_order``."""

COLORS = {"FRAQ": "#6A3D9A", "FLoRIST": "#1B9E77", "FlexLoRA": "#E66101", "FLoRA": "#555555",
          "FRAQ (paper config.)": "#CAB2D6", "QR-QR-SVD": "#08306B", "rSVD": "#E6AB02", "FedEx-LoRA": "#999999",
          "FedIT": "#377EB8", "LoRA-A²": "#A6761D", "FLoRG": "#E7298A"}
MARKERS = {"FRAQ": "o", "FLoRIST": "s", "FlexLoRA": "^", "FLoRA": "D", "FRAQ (paper config.)": "o",
           "QR-QR-SVD": "v", "rSVD": "P", "FedEx-LoRA": "P", "FedIT": "v", "LoRA-A²": "X", "FLoRG": "<"}
"""The paper's methods' fixed colours and markers, by display name: any two lie more than
:data:`MIN_DELTA_E` apart (QR-QR-SVD navy, not FedIT's blue; rSVD gold, not FlexLoRA's orange),
so methods drawn side by side never share a colour. A method not here is drawn in a shade of
its family's colour (a variant: ``FRAQ (cholesky)``, :data:`VARIANT_SHADES`) or, with no known
family, in the next of :data:`EXTRA_COLORS` (:func:`styles`)."""
EXTRA_COLORS = ["#D62728", "#17BECF", "#BCBD22", "#8C564B", "#7570B3", "#2CA02C", "#66A61E", "#E377C2"]
EXTRA_MARKERS = ["*", "h", "p", "d", "8", ">", "H", "x"]
"""Colours and markers of methods outside :data:`COLORS`, assigned in legend order."""
VARIANT_SHADES = (("white", 0.45), ("black", 0.35), ("white", 0.7), ("black", 0.55))
VARIANT_MARKERS = ("d", "h", "p", "8")
"""The n-th variant of a known method (in legend order) is drawn in its family's colour mixed
with white or black by the n-th fraction (lighter, darker, lighter still, ...) and with the
n-th marker: the family's hue says which method it is a variant of, the lightness and the
marker tell it from the method and from its other variants (two variants of FlexLoRA in one
colour and one marker could not be told apart)."""
MIN_DELTA_E = 10.0
"""CIE76 colour difference (Euclidean distance in CIELAB) two methods' colours keep at least:
about 2.3 is a just-noticeable difference; above 10 two thin lines are told apart at a glance."""
HIGHLIGHT = "FRAQ"
"""The paper's method: its lines are drawn above every other method's (``zorder``), never hidden
under a method whose values coincide with its own (FlexLoRA on FRAQ's kernel)."""


def method_parts(method) -> tuple[str, str]:
    """(registry name, options text) of a method written in :mod:`fraq.methods`' grammar, read by
    its one parser (:class:`fraq.methods.MethodSpec`, which imports no torch):
    ``"fraq:tau=0.95"`` -> ``("fraq", "tau=0.95")``. A name :data:`NAMES` holds whole is its own
    name; text the grammar refuses (a table's label such as ``"fraq (tau=0.95)"``, the key-less
    ``"fraq:cholesky"``) is split at its first ``:``, as written."""
    from fraq.methods import MethodSpec

    text = str(method)
    if text in NAMES:
        return text, ""
    try:
        spec = MethodSpec.parse(text)
    except ValueError:
        name, _, options = text.partition(":")
        return name, options
    return spec.name, ",".join(f"{k}={v}" for k, v in spec.options)


def display_name(method: str, recorded=None) -> str:
    """The name a method is shown by: ``recorded`` (the result's ``display_name``) when
    given, else :data:`NAMES`'s for its registry name, followed by the options of
    ``name:options`` in parentheses (``fraq:cholesky`` -> ``FRAQ (cholesky)``); a name
    :data:`NAMES` lacks is shown as it is written."""
    if isinstance(recorded, str) and recorded:
        return recorded
    method = str(method)
    if method in NAMES:
        return NAMES[method]
    name, options = method_parts(method)
    base = NAMES.get(name, name)
    return f"{base} ({options})" if options else base


def _base(method: str) -> str:
    """The registry name of ``name:options`` (a name :data:`NAMES` holds whole stays whole)."""
    return method_parts(method)[0]


def _column(df: pd.DataFrame, col: str) -> pd.Series:
    return df[col] if col in df else pd.Series(None, index=df.index, dtype=object)


def described(df: pd.DataFrame, method: str = "method") -> pd.DataFrame:
    """``df`` with ``method_name`` (:func:`display_name`), ``method_family`` (the display
    name of the method without its options) and ``method_order`` (its row in the paper's
    Tables 1-3, NaN for a method the paper does not compare), each from the result's own
    ``display_name``, ``family`` and ``paper_order`` where it carries them."""
    out = df.copy()
    names = out[method].astype(str)
    out["method_name"] = [display_name(m, r) for m, r in zip(names, _column(out, "display_name"))]
    out["method_family"] = [f if isinstance(f, str) and f else display_name(_base(m))
                            for m, f in zip(names, _column(out, "family"))]
    recorded = pd.to_numeric(_column(out, "paper_order"), errors="coerce")
    fallback = names.map(lambda m: PAPER_ORDER.get(_base(m)))
    out["method_order"] = recorded.where(recorded.notna(), pd.to_numeric(fallback, errors="coerce"))
    return out


def legend_key(name: str, order) -> tuple:
    """Legends list the paper's methods first in the reverse of its tables' order (FRAQ, the
    paper's method, then FLoRIST, FlexLoRA, ...), then the others by name."""
    known = order is not None and order == order
    return (0, -float(order), name) if known else (1, 0.0, name)


def styles(d: pd.DataFrame) -> dict[str, dict]:
    """Display name -> ``color``, ``marker``, ``variant`` (True for a variant of a known
    method: a shade of its family's colour and a marker of its own, :data:`VARIANT_SHADES`)
    and ``zorder`` (:data:`HIGHLIGHT`'s above the others) for every method of ``d`` (a frame from
    :func:`described`), in legend order (:func:`legend_key`): the paper's methods keep
    their colours (:data:`COLORS`), any other takes the next of :data:`EXTRA_COLORS`, so a
    method the analysis has never heard of is still drawn and labelled."""
    seen = d.drop_duplicates("method_name")
    rows = sorted(zip(seen["method_name"], seen["method_family"], seen["method_order"]),
                  key=lambda t: legend_key(t[0], t[2]))
    out, extra, variants = {}, 0, {}
    for name, family, _ in rows:
        if name in COLORS:
            out[name] = dict(color=COLORS[name], marker=MARKERS[name], variant=False)
        elif family in COLORS:
            n = variants[family] = variants.get(family, -1) + 1
            to, t = VARIANT_SHADES[n % len(VARIANT_SHADES)]
            out[name] = dict(color=shade(COLORS[family], to, t), marker=VARIANT_MARKERS[n % len(VARIANT_MARKERS)],
                             variant=True)
        else:
            out[name] = dict(color=EXTRA_COLORS[extra % len(EXTRA_COLORS)],
                             marker=EXTRA_MARKERS[extra % len(EXTRA_MARKERS)], variant=False)
            extra += 1
        out[name]["zorder"] = 3 if name == HIGHLIGHT else 2
    return out


def shade(color, to: str, t: float) -> str:
    """``color`` mixed with ``to`` (``"white"`` or ``"black"``) by the fraction ``t``, as hex."""
    from matplotlib.colors import to_hex, to_rgb

    a, b = to_rgb(color), to_rgb(to)
    return to_hex(tuple((1 - t) * x + t * y for x, y in zip(a, b)))


def delta_e(a, b) -> float:
    """CIE76 colour difference of two matplotlib colours: the Euclidean distance of their
    CIELAB coordinates (sRGB, D65 white)."""
    import numpy as np
    from matplotlib.colors import to_rgb

    def lab(c):
        rgb = np.asarray(to_rgb(c), float)
        lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
        xyz /= np.array([0.95047, 1.0, 1.08883])
        f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
        return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])

    return float(np.linalg.norm(lab(a) - lab(b)))


def num(x) -> str:
    """A parameter as text: an integral number as an integer (``256``, not ``256.0``; a column
    that holds a NaN somewhere is float in pandas), anything else in ``g`` notation."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if f != f or f in (float("inf"), -float("inf")):
        return str(x)
    return str(int(f)) if f == int(f) else f"{f:g}"


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` as text for display: each number column in one format chosen from the whole
    column (:func:`analysis.columns.column_format`), a missing value as an empty cell, the
    index and column labels' numbers through :func:`num` (``d 768``, not ``d 768.0``)."""
    from analysis.columns import column_format

    out = pd.DataFrame(index=df.index, columns=df.columns, dtype=object)
    for i in range(df.shape[1]):
        col = df.iloc[:, i]
        if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            fmt = column_format(col)
            out.iloc[:, i] = [("" if x is pd.NA or x != x else fmt(x)) for x in col]
        else:
            out.iloc[:, i] = ["" if x is None or x is pd.NA or (isinstance(x, float) and x != x) else str(x)
                              for x in col]

    def label(x):
        if not isinstance(x, float):
            return x
        return f"{x:g}" if abs(x) >= 1e6 else num(x)  # kappa 1e+10, not 10000000000

    def labels(index: pd.Index) -> pd.Index:
        if isinstance(index, pd.MultiIndex):
            return pd.MultiIndex.from_tuples([tuple(label(x) for x in t) for t in index], names=index.names)
        return pd.Index([label(x) for x in index], name=index.name)

    out.index, out.columns = labels(df.index), labels(df.columns)
    return out


def integers(df: pd.DataFrame, columns) -> pd.DataFrame:
    """``df`` with each of ``columns`` whose values are all integral (NaN aside) as pandas'
    nullable ``Int64``, so a table prints ``768`` rather than ``768.0``."""
    out = df.copy()
    for c in columns:
        if c in out:
            vals = pd.to_numeric(out[c], errors="coerce")
            if vals.notna().any() and vals.dropna().eq(vals.dropna().round()).all() and \
                    vals.notna().sum() == out[c].notna().sum():
                out[c] = vals.round().astype("Int64")
    return out


PLAIN_LOG = (1e-4, 1e5)
"""A log axis whose view lies in this range is labelled in plain decimals (``0.0005``, ``500``,
``20000``): six characters at most, which a reader compares with the report's text."""


def log_tick(x: float, plain: bool = True) -> str:
    """A log axis's tick label without matplotlib's ``2 x 10^0``: a plain decimal
    (``0.002``, ``2``, ``20000``) within :data:`PLAIN_LOG` when ``plain``, else a compact
    e-notation (``2e-7``, ``1e6``)."""
    if x == 0 or x != x:
        return ""
    if plain and PLAIN_LOG[0] <= abs(x) < PLAIN_LOG[1]:
        return f"{x:.6g}"
    mantissa, _, exponent = f"{x:.1e}".partition("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def log_labels(axis, minor: bool = True) -> None:
    """Labels of a base-10 log axis (``ax.yaxis``) in one notation for the whole axis, never
    matplotlib's ``2 x 10^0``:

    - a view inside :data:`PLAIN_LOG`: plain decimals (:func:`log_tick`), ``0.0005`` to ``20000``;
    - a view of several decades beyond it: its decades as ``10^k`` (minor ticks unlabelled);
    - a view of under about a decade beyond it, where matplotlib labels minor ticks: every
      label in compact e-notation, ``2e-7``, ``5e-7``, ``1e-6``.

    Minor ticks (with ``minor``) are labelled where matplotlib labels them, but at 2 and 5
    times a power of ten where it would label 2, 3, 4 and 6 times it (a view holding at most
    one power of ten and spanning over 0.4 decade): 3 and 4 lie 0.12 decade apart, closer
    than a label's height on a panel a few inches tall. ``minor=False`` leaves them
    unlabelled."""
    import math

    from matplotlib.ticker import LogFormatter, NullFormatter

    class OneNotation(LogFormatter):
        def set_locs(self, locs=None):
            super().set_locs(locs)
            if self._sublabels is not None and 1 < len(self._sublabels) < 9:  # matplotlib's subset
                self._sublabels = {1, 2, 5}

        def __call__(self, x, pos=None):
            if not super().__call__(x, pos):  # labelled where matplotlib labels one
                return ""
            lo, hi = sorted(abs(v) for v in self.axis.get_view_interval())
            if PLAIN_LOG[0] <= lo and hi < PLAIN_LOG[1]:
                return log_tick(x)
            if self._sublabels == {1}:  # several decades: matplotlib labels the decades alone
                return f"$\\mathdefault{{10^{{{round(math.log10(x))}}}}}$"
            return log_tick(x, plain=False)

    axis.set_major_formatter(OneNotation(labelOnlyBase=False))
    axis.set_minor_formatter(OneNotation(labelOnlyBase=False) if minor else NullFormatter())


def setup() -> None:
    """Seaborn's paper context with fonts readable at column width, and constrained layout.

    Constrained layout is the figures' layout engine, so it applies whenever a figure is
    drawn: a notebook's inline figure is laid out as the saved file is (titles, tick
    labels and axis labels of neighbouring panels kept apart), not only in :func:`save`.
    It leaves matplotlib's backend alone, so a notebook shows its figures inline; scripts
    that only write files (:mod:`analysis.reproduce`) choose Agg themselves."""
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", font_scale=1.25,
                  rc={"axes.titlesize": 12, "legend.fontsize": 10, "figure.dpi": 110, "savefig.dpi": 160,
                      "pdf.fonttype": 42, "figure.constrained_layout.use": True})


def _first(df: pd.DataFrame, col: str, default: str = "?"):
    if col in df and df[col].notna().any():
        vals = df[col].dropna().unique()
        return ",".join(str(v) for v in vals[:3])
    return default


def _device(df: pd.DataFrame) -> str:
    """"GPU <name>" for rows measured on a CUDA device, "CPU" otherwise (from the results)."""
    devices = set(df["device"].dropna().astype(str)) if "device" in df else set()
    if any(d.startswith("cuda") for d in devices):
        return f"GPU {_first(df, 'machine.gpu', 'unknown')} ({_first(df, 'device')}, driver " \
               f"{_first(df, 'machine.gpu_driver')}, CUDA {_first(df, 'machine.cuda')}, " \
               f"cuSOLVER {_first(df, 'machine.cusolver')})"
    return "CPU"


def caption(df: pd.DataFrame, extra: str = "") -> str:
    """Device, machine, dtype, thread count and versions of the rows behind a figure, one line,
    all read from the rows (the result files)."""
    sha = _first(df, "git_sha", _first(df, "machine.git_sha"))
    # a run from a source archive (no git) has no commit: its package version names the source
    fraq_v = str(sha)[:10] if sha != "?" else f"{_first(df, 'versions.fraq')} (no git commit recorded)"
    threads = _first(df, "threads", _first(df, "machine.threads"))
    torch_v = _first(df, "versions.torch", _first(df, "machine.torch"))
    dtype = _first(df, "dtype", "float32")
    line = (f"{_device(df)}; {_first(df, 'machine.cpu')} ({_first(df, 'machine.cores')} cores, "
            f"BLAS {_first(df, 'machine.blas')}); {dtype}; {threads} torch thread(s); torch {torch_v}, "
            f"python {_first(df, 'machine.python')}; fraq {fraq_v}")
    if "loadavg" in df and pd.to_numeric(df["loadavg"], errors="coerce").notna().any():
        la = pd.to_numeric(df["loadavg"], errors="coerce")
        line += f"; 1-min load average {la.min():.1f}-{la.max():.1f}"
    return f"{line}. {extra}" if extra else line


CAPTION_CHAR_IN = 7.5 * 0.6 / 72
"""Inches one character of the 7.5-point caption takes at most on average (a sans-serif
character is about 0.5-0.6 em wide)."""


def caption_width(width_in: float) -> int:
    """Characters per caption line on a figure ``width_in`` inches wide: what fits in it
    less its 1% left margin, at most 150 (a line longer than that is hard to read)."""
    return max(40, min(150, int(0.98 * width_in / CAPTION_CHAR_IN)))


def save(fig, out: Path, name: str, cap: str, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Write ``name``.png and .pdf (``formats``) with the caption line under the axes.

    The files appear whole (:func:`analysis.atomic.write_together`): one that cannot be
    written raises OSError naming it, and the old figures stay. Inside
    :func:`analysis.forked.in_children` a forked child writes them while the caller goes on,
    and the error is raised when the block ends."""
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    text = "\n".join(textwrap.wrap(cap, caption_width(fig.get_size_inches()[0])))
    fig.text(0.01, 0.005, text, ha="left", va="bottom", fontsize=7.5, color="#333333")
    lines = text.count("\n") + 1
    bottom = (0.17 * lines + 0.1) / fig.get_size_inches()[1]
    # the caption's strip is kept free below the panels; a figure-level legend sits above the
    # figure (analysis.figures), outside the layout's box: bbox_inches="tight" keeps it in the file
    engine = fig.get_layout_engine()
    if isinstance(engine, ConstrainedLayoutEngine):
        engine.set(rect=(0, bottom, 1, 1 - bottom))  # (left, bottom, width, height)
    else:
        fig.tight_layout(rect=(0, bottom, 1, 1))  # (left, bottom, right, top)
    paths = [out / f"{name}.{ext}" for ext in formats]
    try:  # each written beside its target, all renamed into place once all are written (analysis.atomic)
        return forked.write(paths, lambda: write_together(
            paths, lambda tmp, target: fig.savefig(tmp, format=target.suffix[1:], bbox_inches="tight")))
    finally:
        plt.close(fig)
