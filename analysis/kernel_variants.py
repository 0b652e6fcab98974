"""Verdicts on the dense-SVD methods run on FRAQ's kernel, against their own dense path.

A method whose dense SVD also runs on FRAQ's kernel is measured twice, on the default
dense path (``flexlora``) and on the kernel (``flexlora:kernel=fraq``: the sweeps' method and
Tables 1-3's row spec, labelled ``flexlora (kernel=fraq)`` there), in the same paired rounds. Per such method the
report says how much faster the kernel variant is and whether its outputs agree:

- **speed**: the dense path's time over the kernel's, round by round where the two were
  timed together (:func:`analysis.verdicts.judge`, paired); over several points, the
  smallest per-point ratio (the claim "faster at every point");
- **outputs**: in Tables 1-3, each kernel row's ``agreement`` record
  (:mod:`benchmarks.measure.kernel_agreement`): every client's update as far from the exact
  aggregate as the dense path's, to twice the rounding of a product of the factors, its
  ``ratio_max`` at most 1 (an exact verdict); in the sweeps, both variants' float32 error
  above the float64 optimum at their rank (relative error minus the optimum) under
  :data:`FIDELITY` at every point (the fidelity every exact method of the clients sweep is
  held to), the error in quadrature beside it.

A kernel variant's name is its dense path's with ``kernel=<kernel>`` among its options;
nothing here knows the methods.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.verdicts import exact, judge, looks, not_measured, ours, paired

__all__ = ["FIDELITY", "dense_of", "sweep_lines", "table_lines"]

FIDELITY = 1e-6
"""The float32 result's error above the float64 optimum (relative) that the sweeps' exact
methods stay under (:data:`analysis.sections.clients.FIDELITY`)."""


def dense_of(method: str) -> str | None:
    """The dense path of a kernel variant's spec (``flexlora:kernel=fraq`` ->
    ``flexlora``, options other than ``kernel`` kept in order), or None for any other name."""
    name, _, rest = str(method).partition(":")
    items = [s for s in rest.split(",") if s]
    kernel = [s for s in items if s.split("=", 1)[0] == "kernel"]
    if not kernel or kernel[0].split("=", 1)[1] == "dense":
        return None
    others = [s for s in items if s.split("=", 1)[0] != "kernel"]
    return name + (":" + ",".join(others) if others else "")


def milliseconds(rows: pd.DataFrame) -> np.ndarray:
    return 1e3 * np.asarray(rows["timing.samples"].iloc[0], dtype=float)


def sweep_lines(df: pd.DataFrame, point: list[str], what: str) -> list[str]:
    """One line per kernel variant among the sweep results ``df`` (Fig. 3's or the clients
    sweep's, as :func:`analysis.figures.measured_columns` gives them: ``method``,
    ``method_name``, ``timing.samples``/``timing.group``, ``excess_plain`` and ``excess``):
    its speed-up over its dense path at the points (``point``: the columns that name one)
    where both were measured, and both variants' fidelity there. ``what`` names the sweep
    in the claims."""
    out = []
    names = df["method_name"] if "method_name" in df else df.get("display_name", df["method"])
    shown = dict(zip(df["method"], names))
    for kernel in sorted({m for m in df["method"] if dense_of(m) is not None}):
        dense = dense_of(kernel)
        k_rows, d_rows = df[df["method"] == kernel], df[df["method"] == dense]
        both = k_rows.merge(d_rows[point], on=point)
        label, dlabel = shown.get(kernel, kernel), shown.get(dense, dense)
        if both.empty:
            out.append(f"- {label}: no point of the {what} where {dlabel} was measured too.")
            continue
        groups, pairs, sets = {}, [], []
        sub = pd.concat([k_rows, d_rows])  # the two methods' rows: each point selected from these alone
        for _, p in both[point].drop_duplicates().iterrows():
            at = " ".join(f"{c}={p[c]}" for c in point)
            sel = np.logical_and.reduce([(sub[c] == p[c]).to_numpy() for c in point])
            kr, dr = sub[sel & (sub["method"] == kernel).to_numpy()], sub[sel & (sub["method"] == dense).to_numpy()]
            groups[f"{dlabel} {at}"], groups[f"{label} {at}"] = milliseconds(dr), milliseconds(kr)
            pairs.append((f"{dlabel} {at}", f"{label} {at}"))
            sets.append(pd.concat([kr, dr]))
        ratios = [np.median(groups[a]) / np.median(groups[b]) for a, b in pairs]
        v = judge(groups, lambda g: np.min(np.stack([g[a] / g[b] for a, b in pairs]), axis=0), above=1.0,
                  claim=f"{label} faster than {dlabel} on the {what}", machine=pd.concat(sets),
                  paired=paired(*sets), looks=looks(*sets))
        speed = ours(v, f"{v.value:.3g}x at the least", ".3g", "x",
                      test=f"{dlabel}'s time over {label}'s above 1 at each of the {len(pairs)} points both ran, "
                           "the smallest ratio")
        by = pd.concat(sets).groupby("method")
        worst, quad = by["excess_plain"].max(), by["excess"].max()
        fid = exact(float(worst.max()), below=FIDELITY)
        out.append(f"- {label} against {dlabel} ({what}): {speed}; median speed-ups {min(ratios):.3g}x to "
                   f"{max(ratios):.3g}x. Outputs: both within {FIDELITY:g} of the float64 optimum at their rank at "
                   f"every such point, {fid.bold()} (exact): the largest relative error above it, {label} "
                   f"{worst.get(kernel, np.nan):.1e}, {dlabel} {worst.get(dense, np.nan):.1e} (in quadrature, "
                   f"the float32 rounding a truncation does not square away: {quad.get(kernel, np.nan):.1e} and "
                   f"{quad.get(dense, np.nan):.1e}).")
    return out


def table_lines(rows: pd.DataFrame) -> list[str]:
    """One line per kernel row of one preset's Tables 1-3 rows (:func:`analysis.sections.tables123.tables123_rows`:
    ``method``, ``spec``, ``kernel``, ``agreement``, ``samples`` and the pairing's fields): its
    speed-up over its dense row (the row whose spec is :func:`dense_of` its own), paired, and
    its ``agreement`` record's exact verdict."""
    out = []
    for _, r in rows[rows["kernel"].notna() & (rows["kernel"] != "dense")].iterrows():
        a = r["agreement"] if isinstance(r["agreement"], dict) else {}
        dense = dense_of(r["spec"])
        d = rows[rows["spec"] == dense]
        dense_label = a.get("reference") or (d["method"].iloc[0] if len(d) else dense)
        label = r.get("display_name") or r["method"]
        dlabel = (d["display_name"].iloc[0] if len(d) and isinstance(d["display_name"].iloc[0], str)
                  else dense_label)
        here = rows[rows["method"] == r["method"]]
        groups = {dlabel: np.asarray(d["samples"].iloc[0] if len(d) else [], float) * 1e3,
                  label: np.asarray(r["samples"], float) * 1e3}
        missing = [k for k, g in groups.items() if g.size == 0]
        claim = f"{label} faster than {dlabel}"
        if not len(d):  # the dense path at these options is no row of the table (a like-for-like row's):
            speed = None  # no time to compare, and nothing missing; the outputs are still compared
        elif missing:
            v = not_measured(claim, [f"{k} ({_why(d if k == dlabel else here)})" for k in missing])
            speed = ours(v, "")
        else:
            compared = pd.concat([d, here])
            v = judge(groups, lambda g: g[dlabel] / g[label], above=1.0, claim=claim, machine=compared,
                      paired=paired(compared))
            speed = ours(v, f"{v.value:.3g}x faster", ".3g", "x", test=f"{dlabel}'s time over {label}'s above 1")
            dm, km = float(np.median(groups[dlabel])), float(np.median(groups[label]))
            speed += f" (medians {dm:.4g} ms and {km:.4g} ms: {dm / km:.3g}x)"
        if not a or "skipped" in a:
            why = a.get("skipped", "no agreement record in these results")
            agree = ours(not_measured(f"{label}'s outputs agree with {dlabel}'s", [f"{label} ({why})"]), "")
        else:
            va = exact(float(a["ratio_max"]), below=1.0)
            agree = ours(va, f"on {a.get('modules_compared_on', 'the modules compared')}, every client's update "
                              f"is as close to the exact aggregate as {dlabel}'s, within {a['bound_min']:.2g} of the "
                              f"aggregate's norm (the largest difference {a['error_difference_max']:.2g}, "
                              f"{a['ratio_max']:.2g} of that bound, over {int(a['compared'])} distinct update(s) "
                              f"and warm start(s)); the products themselves differ by at most "
                              f"{a['product_difference_max']:.2g} of the aggregate's norm",
                          test="each update's error against the aggregate the same to twice the rounding of a "
                               "product of the factors")
        if speed is None:
            out.append(f"- {label} against {dlabel} (not a row of this table, so not timed here): outputs: {agree}.")
        else:
            out.append(f"- {label} against {dlabel}: {speed}. Outputs: {agree}.")
    return out


def _why(row: pd.DataFrame) -> str:
    """Why a row has no samples: its ``skipped`` reason, or that it has none."""
    if len(row) and isinstance(row["skipped"].iloc[0], str):
        return row["skipped"].iloc[0].split(";")[0]
    return "no samples"
