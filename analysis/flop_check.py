"""The FLOP-model check of Tables 1-3's at-its-best rows, against the project's own target.

Each peer at its best (a row on a ``kernel``: FLoRIST ``kernel=qr``, FlexLoRA ``kernel=rsvd``
and ``kernel=fraq``, FLoRG ``kernel=gram``, FedSVD and FedMomentum ``kernel=fraq``) should take
the time its FLOP count predicts relative to FRAQ, within :data:`TARGET`, on the CPU in the same
run: a row far slower than its count says is a peer left artificially slow (or FRAQ helped), one
far faster a model that misses what runs. Per row:

- *measured*: its time over FRAQ's, round by round where both were timed in the same paired
  rounds (:func:`analysis.verdicts.judge`), with its interval;
- *predicted*: its routine-true analytic FLOPs (``flops_full``: the routines the code calls,
  counted from the ranks each row selected, so a row whose rank differs from FRAQ's compares at
  its own) over FRAQ's;
- *measured / predicted*, and whether it is within the factor :data:`TARGET` either way.

The FRAQ row compared against is the one at the row's own threshold where FRAQ ran at it (FLoRIST's
like-for-like rows at tau = 0.80 and 0.95), else FRAQ at tau = 0.95, the reference of *time /
FRAQ's*. It is a check of this project's implementations against their FLOP counts, not a claim of
the paper: no agrees/disagrees, and the lines stand apart from any GPU claim; on a GPU no line is
printed (a FLOP count does not predict launch-bound kernels). Rows are recognised by their columns
(``kernel``, ``tau``, ``flops_full``); nothing here knows the methods.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.verdicts import judge, paired, samples

__all__ = ["REFERENCE", "TARGET", "flop_check_lines", "reference_row"]

TARGET = 1.5
"""The project's target: an at-its-best row's time / FRAQ's within this factor (either way) of
its FLOP count's prediction, on the CPU, in the same run."""

REFERENCE = "fraq:tau=0.95"
"""FRAQ's row a peer is compared with when FRAQ has none at the peer's threshold."""


def reference_row(rows: pd.DataFrame, row) -> pd.Series | None:
    """FRAQ's row for ``row`` among one preset's ``rows``: FRAQ at ``row``'s threshold where it
    ran at it, else :data:`REFERENCE`; None when neither is there."""
    fraq = rows[rows["name"] == "fraq"]
    tau = pd.to_numeric(pd.Series([row.get("tau")]), errors="coerce").iloc[0]
    if pd.notna(tau):
        same = fraq[pd.to_numeric(fraq["tau"], errors="coerce") == tau]
        if len(same):
            return same.iloc[0]
    ref = fraq[fraq["spec"] == REFERENCE]
    return ref.iloc[0] if len(ref) else None


def _flops(row) -> float:
    v = pd.to_numeric(pd.Series([row.get("flops_full")]), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) and v > 0 else math.nan


def flop_check_lines(rows: pd.DataFrame) -> list[str]:
    """The check's lines for one preset's Tables 1-3 rows (:func:`analysis.sections.tables123.tables123_rows`):
    a head line with how many rows are within :data:`TARGET`, then one line per at-its-best row
    (module docstring); [] on a GPU or without such rows."""
    if rows.empty or ("device" in rows and rows["device"].astype(str).str.startswith("cuda").any()):
        return []
    best = rows[rows["kernel"].notna() & (rows["kernel"].astype(str) != "dense")]
    if best.empty:
        return []
    lines, within, judged, no_model = [], 0, 0, []
    for _, r in best.iterrows():
        f = reference_row(rows, r)
        label = r["shown"] + (" (extrapolated)" if isinstance(r.get("extrapolated"), str) else "")
        if f is None or math.isnan(_flops(r)) or math.isnan(_flops(f)):
            no_model.append(r["shown"])
            continue
        flabel = f["shown"]
        predicted = _flops(r) / _flops(f)
        groups = {label: samples(r["samples"]) * 1e3, flabel: samples(f["samples"]) * 1e3}
        both = pd.DataFrame([r, f])
        v = judge(groups, lambda g, a=label, b=flabel: g[a] / g[b], above=1.0, machine=both,
                  paired=paired(both), claim=f"FLOP-model check: {label} / {flabel} time")
        head = f"  - {label} / {flabel}: "
        if not math.isfinite(v.value) or v.word == "no verdict":
            lines.append(head + f"predicted {predicted:.3g}x; measured: {v.interval()}.")
            continue
        q = v.value / predicted
        ok = 1 / TARGET <= q <= TARGET
        judged += 1
        within += ok
        spread = (f" [{v.lo / predicted:.2f}, {v.hi / predicted:.2f}]" if v.has_interval and v.lo < v.hi else "")
        lines.append(head + f"measured {v.measured('.3g', unit='x')}; the routine-true FLOP model predicts "
                     f"{predicted:.3g}x; measured / predicted {q:.2f}{spread}: "
                     f"{'within' if ok else 'outside'} {TARGET:g}x.")
    tail = f" No FLOP count in these results: {', '.join(no_model)}." if no_model else ""
    count = f" within for {within} of {judged} rows." if judged else ""
    head = (f"- FLOP-model check at its best (the project's target, not a paper claim: each at-its-best row's time / "
            f"FRAQ's within {TARGET:g}x of its FLOP count's prediction, either way, on this CPU in the same run; "
            f"FLOPs from each row's own ranks, against FRAQ at the row's threshold where FRAQ ran at it, else at "
            f"tau = 0.95):" + count + tail)
    return [head] + lines
