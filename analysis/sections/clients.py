"""Fig. 3's third axis: runtime, memory, FLOPs and fidelity against the number of clients.

Rows are the ``clients`` experiment's result files (``python -m benchmarks.run
clients``): one per (shape, K, method), clients of rank r_k, so the stacked rank is
r = K r_k, and every method cuts by the energy rule at the same tau. The paper's appendix
("General-Rank Formulation and Asymptotic Complexity") keeps FRAQ valid past r = d with
s = min(d, r): O(d r s + s r D + s^2 D + s^3), linear in r once r > d, where the dense
path pays O(d D r) to form the update and then its SVD. The report states FRAQ's growth
exponent in K up to r = d and from r = d on, where FRAQ and the dense path (FlexLoRA)
cross, and whether each method's float32 result and rank hold against float64. Nothing
here measures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import kernel_variants
from analysis.figures import FLOOR, legend_top, measured_columns
from analysis.sections import Figure, Section
from analysis.style import described, display_name, log_labels, styles
from analysis.verdicts import exact, judge, looks, milliseconds, paired

__all__ = ["TITLE", "WHAT", "crossings", "detail", "draw", "figure", "growth", "label", "lines", "summary"]

reads = ("clients",)

FIDELITY = 1e-6
"""The float32 result's error above the float64 optimum every exact method stays under."""

GROWTH = 1.15
"""Past r = d the paper's cost is linear in r: a fitted exponent of K up to this counts as
linear (the fixed per-call cost and the s^3 eigensolver bend a short fit by a few percent)."""

ROWS = [("ms", "runtime (ms)"), ("peak_mib", "tensor peak memory (MiB)"), ("gflop", "counted GFLOP"),
        ("excess", "float32 error in quadrature\nabove the float64 optimum")]
"""The figure's rows, one metric each."""

CROSS, EPS = "#777777", "#999999"
"""Colours of the r = d line (dashed) and of float32's eps (dotted), both in the legend: a
label written at the line would run past the panel's edge where r = d falls near the
largest K."""


def draw(res) -> list[Section]:
    cl = res["clients"]
    fig = Figure("fig_clients", figure(cl), cl, detail(cl), WHAT)
    return [Section(TITLE, "\n".join(lines(cl) + kernel_variants.sweep_lines(summary(cl), ["d", "D", "K"],
                                                                             "clients sweep")), fig)]


def label(method: str) -> str:
    """"FRAQ", "FLoRIST", "FlexLoRA", or "FRAQ (<backend>)" for ``fraq:<backend>``
    (:func:`analysis.style.display_name`, for a method of a result without ``display_name``)."""
    return display_name(method)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, method, K): ``shape`` ("768x3072"), ``label``, ``ms`` (median)
    with ``q25_ms``/``q75_ms``, ``peak_mib``, ``gflop`` (counted), ``excess`` (in
    quadrature, mean over modules; ``excess_plain``: relative error minus the optimum),
    ``energy_kept_min``, ``r_over_d``."""
    d = described(measured_columns(df))
    d["shape"] = d["d"].astype(int).astype(str) + "x" + d["D"].astype(int).astype(str)
    d["label"] = d["method_name"]
    d["r_over_d"] = d["r"] / d["d"]
    return d.sort_values(["d", "D", "method", "K"]).reset_index(drop=True)


def _style(look: dict) -> dict:
    """Line keywords of one method (:func:`analysis.style.styles`): a variant of a known
    method (FRAQ's other backends, a method on another kernel) dotted, in its own shade of its
    family's colour and its own marker; the paper's method above the others."""
    return dict(color=look["color"], marker=look["marker"], linestyle=":" if look["variant"] else "-",
                zorder=look["zorder"])


def figure(df: pd.DataFrame):
    """Runtime, tensor peak memory, counted FLOPs and the float32 error above the float64
    optimum (in quadrature, as Fig. 3 draws it; dotted: float32 eps) against K (log axes),
    one column per shape, r = d dashed; both reference lines are in the legend."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    d = summary(df)
    look = styles(d)
    shapes = list(dict.fromkeys(d["shape"]))
    fig, axes = plt.subplots(len(ROWS), len(shapes), figsize=(4.6 * len(shapes), 3.2 * len(ROWS)), squeeze=False)
    for col, shape in enumerate(shapes):
        sub = d[d["shape"] == shape]
        dd, rk = int(sub["d"].iloc[0]), int(sub["client_rank"].iloc[0])
        for row, (y, ylabel) in enumerate(ROWS):
            ax = axes[row, col]
            for name in reversed(list(look)):  # the paper's method last: on top of any curve it lies on
                s = sub[(sub["label"] == name) & sub[y].notna()]
                if s.empty:
                    continue
                values = s[y].clip(lower=FLOOR) if y == "excess" else s[y]
                ax.plot(s["K"], values, linewidth=1.5, gid=name, **_style(look[name]))
                if y == "ms" and not look[name]["variant"]:
                    ax.fill_between(s["K"], s["q25_ms"], s["q75_ms"], color=look[name]["color"], alpha=0.15,
                                    linewidth=0)
            ax.axvline(dd / rk, color=CROSS, linestyle="--", linewidth=1)
            if y == "excess":
                ax.axhline(np.finfo(np.float32).eps, color=EPS, linestyle=":", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            log_labels(ax.yaxis)
            ks = sorted(sub["K"].unique())
            ax.set_xticks(ks)
            ax.set_xticklabels([str(int(k)) for k in ks], rotation=90 if len(ks) > 8 else 0)
            ax.xaxis.set_minor_formatter(NullFormatter())  # the Ks alone: no "3 x 2^4" between them
            ax.set_xlabel(f"clients K (rank {rk} each)")
            ax.set_ylabel(ylabel)
            what = "error in quadrature" if y == "excess" else ylabel.split(" (")[0]
            ax.set_title(f"({'abcdefghijkl'[row * len(shapes) + col]}) {what}, {shape.replace('x', ' x ')}")
    handles = [Line2D([], [], linewidth=1.5, label=n, **_style(v)) for n, v in look.items()]
    handles += [Line2D([], [], color=CROSS, linestyle="--", linewidth=1, label="r = K r_k reaches d"),
                Line2D([], [], color=EPS, linestyle=":", linewidth=1, label="float32 eps")]
    legend_top(fig, handles, [h.get_label() for h in handles], 5)
    return fig


def growth(s: pd.DataFrame, side: str) -> float:
    """Least-squares exponent of the median time in K over the points with r <= d
    (``side="below"``) or r >= d (``"above"``); NaN with fewer than two."""
    pts = s[s["r"] <= s["d"]] if side == "below" else s[s["r"] >= s["d"]]
    if pts["K"].nunique() < 2:
        return float("nan")
    return float(np.polyfit(np.log(pts["K"].astype(float)), np.log(pts["ms"].astype(float)), 1)[0])


def crossings(a: pd.DataFrame, b: pd.DataFrame) -> list[tuple[float, str]]:
    """Where the median times of ``a`` and ``b`` (rows of one shape) swap order: K
    interpolated log-linearly between the neighbouring points, with which one is faster
    after it (``"a"`` or ``"b"``)."""
    m = a.set_index("K")["ms"].to_frame("a").join(b.set_index("K")["ms"].to_frame("b"), how="inner").sort_index()
    lr = np.log(m["a"] / m["b"]).to_numpy()
    ks = np.log(m.index.to_numpy(float))
    out = []
    for i in range(1, len(lr)):
        if np.sign(lr[i]) != np.sign(lr[i - 1]) and lr[i] != 0:
            t = lr[i - 1] / (lr[i - 1] - lr[i])
            out.append((float(np.exp(ks[i - 1] + t * (ks[i] - ks[i - 1]))), "a" if lr[i] < 0 else "b"))
    return out


TITLE = "Clients: runtime, memory, FLOPs and fidelity against the number of clients"

WHAT = ("FRAQ, its other exact backends, FLoRIST and FlexLoRA (the dense path: B A formed, a thin SVD) on K clients "
        "of one shape, every method cutting by the same energy rule; the stacked rank r = K r_k passes d at the "
        "dashed line.")


def detail(df: pd.DataFrame) -> str:
    """The figure's caption after the machine line: sizes, threshold, what the bands are."""
    c = df.iloc[0]
    return (f"clients of rank {int(c['client_rank'])}, tau = {c['tau']:g}, {int(c['modules'])} module(s) per call; "
            "median, band = IQR; tensor peak memory above the inputs; error in quadrature, dotted: float32 eps")


def lines(df: pd.DataFrame, dense: str = "flexlora") -> list[str]:
    """The report's statements: per shape FRAQ's growth exponents before and after r = d
    (the paper's linear-past-d claim judged on the repeats), where FRAQ and the dense path
    cross, the largest FRAQ / dense ratio past r = d, and per method the float32 error above
    the float64 optimum and the energy its rank keeps against float64's."""
    d = summary(df)
    out = []
    for shape, sub in d.groupby("shape", sort=False):
        out += _shape_lines(shape, sub, dense)
    return out + [_fidelity_line(d), _energy_line(d)]


def _shape_lines(shape: str, sub: pd.DataFrame, dense: str) -> list[str]:
    """One shape: each method's exponents of K below and above r = d, FRAQ's linearity past
    r = d, and FRAQ against the dense path."""
    dd, rk = int(sub["d"].iloc[0]), int(sub["client_rank"].iloc[0])
    fr = sub[sub["method"] == "fraq"].sort_values("K")
    de = sub[sub["method"] == dense].sort_values("K")
    head = f"- {shape.replace('x', ' x ')} (r = d at K = {dd / rk:g}):"
    if len(fr) < 2:
        return [f"{head} FRAQ measured at fewer than two K."]
    exps = ", ".join(f"{s['label'].iloc[0]} {_k(growth(s, 'below'))} / {_k(growth(s, 'above'))}"
                     for m, s in sub.groupby("method", sort=False))
    out = [f"{head} time ~ K^a up to r = d / from r = d: {exps}."]
    above = fr[fr["r"] >= dd]
    if above["K"].nunique() >= 2:
        out.append(_linear_line(shape, above))
    if not de.empty:
        out += _dense_lines(shape, sub, fr, de, dense)
    return out


def _linear_line(shape: str, above: pd.DataFrame) -> str:
    """The paper's appendix: past r = d FRAQ's cost is linear in r; its fitted exponent of K
    over the points at r >= d below :data:`GROWTH`, judged on the repeats."""
    lk = np.log(above["K"].to_numpy(float))
    groups = {f"FRAQ K={int(r['K'])}": milliseconds(r) for _, r in above.iterrows()}
    keys = list(groups)

    def slope(g):
        ly = np.log(np.stack([np.asarray(g[k], float) for k in keys]))
        dx = (lk - lk.mean()).reshape((-1,) + (1,) * (ly.ndim - 1))
        return (dx * (ly - ly.mean(axis=0))).sum(axis=0) / (dx ** 2).sum()

    v = judge(groups, slope, below=GROWTH, claim=f"FRAQ's time linear in K past r = d on {shape}", machine=above)
    return (f"  - Paper (appendix): past r = d FRAQ's cost is linear in r (s = min(d, r) = d). Ours {v.bold()} "
            f"(tested: exponent below {GROWTH}): {v.measured('.2f', prefix='K^')} over K = "
            f"{int(above['K'].min())}..{int(above['K'].max())}.")


def _dense_lines(shape: str, sub: pd.DataFrame, fr: pd.DataFrame, de: pd.DataFrame, dense: str) -> list[str]:
    """Where FRAQ and the dense path cross, and FRAQ no slower than it past r = d (the
    largest ratio over those K, paired where both were timed in the same rounds)."""
    dd, rk = int(sub["d"].iloc[0]), int(sub["client_rank"].iloc[0])
    cross = crossings(fr, de)
    names = {"a": "FRAQ", "b": label(dense)}
    where = "; ".join(f"at K ~ {k:.0f} (r ~ {k * rk:.0f} = {k * rk / dd:.2f} d) {names[w]} becomes the faster"
                      for k, w in cross) or ("never: FRAQ is faster at every K" if
                                             np.less(*fr.set_index("K")["ms"].align(de.set_index("K")["ms"],
                                                                                    join="inner")).all()
                                             else f"never: {label(dense)} is faster at every K")
    out = [f"  - FRAQ against the dense path ({label(dense)}): they cross {where}."]
    fk, ek = fr.set_index("K"), de.set_index("K")
    past = [k for k in fk.index if k in ek.index and k * rk >= dd]
    if not past:
        return out
    groups = {}
    for k in past:
        groups[f"FRAQ K={k}"], groups[f"{label(dense)} K={k}"] = milliseconds(fk.loc[k]), milliseconds(ek.loc[k])

    def worst(g):
        return np.max(np.stack([g[f"FRAQ K={k}"] / g[f"{label(dense)} K={k}"] for k in past]), axis=0)

    same = paired(*[pd.DataFrame([fk.loc[k], ek.loc[k]]) for k in past])
    v = judge(groups, worst, below=1.0, claim=f"FRAQ no slower than {label(dense)} past r = d on {shape}",
              machine=sub, paired=same, looks=looks(*[pd.DataFrame([fk.loc[k], ek.loc[k]]) for k in past]))
    how = ("the two timed in the same rounds" if same else
           "timed in separate runs; `python -m benchmarks.roofline --clients SIZE` times the pairs "
           "interleaved")
    return out + [f"  - The appendix's costs put FRAQ below the dense path past r = d (which forms the d x D "
                  f"update, O(d D r), before its SVD). "
                  f"Ours {v.bold()} (tested: the largest FRAQ / {label(dense)} time at r >= d below 1): "
                  f"{v.measured('.2f')} ({how})."]


def _fidelity_line(d: pd.DataFrame) -> str:
    """Every method's float32 error above the float64 optimum below :data:`FIDELITY` (exact)."""
    worst = d.groupby("label", sort=False).agg(excess=("excess_plain", "max"), quad=("excess", "max"))
    v = exact(float(worst["excess"].max()), below=FIDELITY)
    return (f"- Float32 fidelity: every method within {FIDELITY:g} of the float64 optimum at its own rank, at "
            f"every K and shape: {v.bold()} (exact); the largest relative error above it "
            + ", ".join(f"{n} {w['excess']:.1e}" for n, w in worst.iterrows())
            + " (in quadrature, the float32 rounding a truncation does not square away: "
            + ", ".join(f"{n} {w['quad']:.1e}" for n, w in worst.iterrows()) + ").")


def _energy_line(d: pd.DataFrame) -> str:
    """Every method's rank keeps at least tau of the float64 energy, or the points where not."""
    short = d[d["energy_kept_min"] < d["tau"] - 1e-6]
    if short.empty:
        return "- The energy rule: every method's rank keeps at least tau of the float64 energy at every point."
    pts = [f"{r['label']} {r['shape']} K={int(r['K'])} keeps {r['energy_kept_min']:.4f} (float64 rank "
           f"{_first(r['rank_float64'])}, chosen {_first(r['ranks'])})" for _, r in short.iterrows()]
    return (f"- The energy rule: at {len(short)} point(s) a rank keeps less than tau = {d['tau'].iloc[0]:g} of "
            f"the float64 energy (its float32 total misses part of the spectrum): " + "; ".join(pts) + ".")


def _k(x: float) -> str:
    """``K^a`` of a fitted exponent; where there was nothing to fit (fewer than two K), says so."""
    return f"K^{_a(x)}" if np.isfinite(x) else "no fit (fewer than two K)"


def _a(x: float) -> str:
    """An exponent to two decimals, never "-0.00"."""
    return f"{round(x, 2) + 0.0:.2f}"


def _first(x):
    return x[0] if isinstance(x, (list, tuple)) and len(x) == 1 else x
