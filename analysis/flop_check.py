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
- *measured / predicted*, and whether it is within the factor :data:`TARGET` either way;
- under it, the **kernel-rate check** (:func:`kernel_rate`): the ratio this machine's kernel
  rates predict, the row's roofline over FRAQ's (``roof_s``: every kernel of the call timed
  alone at its shapes, :func:`benchmarks.experiments.tables123.call_roofs`, the quantity Table
  5's *time / kernels' own time* divides by), and measured / predicted as a number, with no
  word: the roofline is a floor of each call, so the ratio of two floors predicts the ratio of
  the times only as far as both calls spend alike above their kernels' own time.

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

__all__ = ["NO_KERNEL_TIMES", "REFERENCE", "TARGET", "flop_check_lines", "kernel_rate", "kernel_times_note",
           "reference_row"]

TARGET = 1.5
"""The project's target: an at-its-best row's time / FRAQ's within this factor (either way) of
its FLOP count's prediction, on the CPU, in the same run."""


def side(q: float, target: float) -> str:
    """Measured / predicted ``q`` against ``target``, in words: within it, or outside on the
    side it falls (faster than its FLOP count predicts: a peer not held back; slower: one
    that is, the case the target exists for)."""
    if 1 / target <= q <= target:
        return f"within {target:g}x"
    return f"outside {target:g}x ({'faster' if q < 1 else 'slower'} than its FLOP count predicts)"


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


NO_KERNEL_TIMES = "no kernel times in these results"
"""What the report says, once, where no row carries a roofline (results written before rows
recorded one, or a size that does not time them)."""


def _roof(row) -> float:
    v = pd.to_numeric(pd.Series([row.get("roof_s")]), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) and v > 0 else math.nan


def _has_roofs(rows: pd.DataFrame) -> bool:
    return "roof_s" in rows and pd.to_numeric(rows["roof_s"], errors="coerce").gt(0).any()


def _on_gpu(rows: pd.DataFrame) -> bool:
    return "device" in rows and rows["device"].astype(str).str.startswith("cuda").any()


def kernel_times_note(rows: pd.DataFrame) -> str:
    """The one sentence for Tables 1-3's rows (every preset's) when none carries a roofline on a
    CPU: the kernel-rate check is then absent from every line, said here once; "" otherwise."""
    if rows.empty or _on_gpu(rows) or _has_roofs(rows):
        return ""
    return (f"Kernel-rate check: {NO_KERNEL_TIMES} (a row's roofline, `roof_s`, every kernel of its call timed "
            "alone at this machine's rates).")


def kernel_rate(rows: pd.DataFrame, peer: pd.DataFrame, fraq: pd.DataFrame, measured: float) -> str | None:
    """The kernel-rate check's text for ``peer`` over ``fraq`` (rows of one preset's ``rows``): the
    smallest roofline among ``peer`` over the largest among ``fraq``, as the measured ratio takes
    the smaller time over the larger round by round, and ``measured`` / that prediction; a row
    without a roofline named with its reason (``roof_skipped``); None when no row of ``rows``
    has one (:func:`kernel_times_note` says so once) or on a GPU."""
    if _on_gpu(rows) or not _has_roofs(rows):
        return None
    o, f = [pd.to_numeric(d["roof_s"], errors="coerce") if "roof_s" in d else pd.Series(dtype=float)
            for d in (peer, fraq)]
    missing = [r for d, v in ((peer, o), (fraq, f)) for (_, r), x in zip(d.iterrows(), v) if not (x > 0)]
    if missing:
        return "no kernel times for " + "; ".join(
            r["shown"] + (f" ({r['roof_skipped']})" if isinstance(r.get("roof_skipped"), str) else "")
            for r in missing)
    predicted = float(o.min() / f.max())
    threads = pd.to_numeric(pd.concat([peer, fraq]).get("threads", pd.Series(dtype=float)), errors="coerce")
    roof_threads = pd.to_numeric(pd.concat([peer, fraq]).get("roof_threads", pd.Series(dtype=float)),
                                 errors="coerce")
    apart = sorted(set(threads.dropna().astype(int)) - set(roof_threads.dropna().astype(int)))
    note = (f" (kernels timed at {', '.join(map(str, sorted(set(roof_threads.dropna().astype(int)))))} thread(s), "
            f"the rows at {', '.join(map(str, apart))})" if apart else "")
    return (f"this machine's kernels, each timed alone at its shapes, predict {predicted:.3g}x; measured / "
            f"predicted {measured / predicted:.2f}" + note)


RATE_HEAD = ("; under each, the kernel-rate check: the ratio of the two calls' rooflines (each kernel timed alone "
             "at its shapes at this machine's rates, the quantity Table 5's *time / kernels' own time* divides by) "
             "and measured / predicted, a number")


def _flops(row) -> float:
    v = pd.to_numeric(pd.Series([row.get("flops_full")]), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) and v > 0 else math.nan


def flop_check_lines(rows: pd.DataFrame) -> list[str]:
    """The check's lines for one preset's Tables 1-3 rows (:func:`analysis.sections.tables123.tables123_rows`):
    a head line with how many rows are within :data:`TARGET`, then one line per at-its-best row
    (module docstring); [] on a GPU or without such rows."""
    if rows.empty or _on_gpu(rows):
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
                     f"{side(q, TARGET)}.")
        rate = kernel_rate(rows, pd.DataFrame([r]), pd.DataFrame([f]), v.value)
        if rate is not None:
            lines.append(f"    - kernel-rate check, {label} / {flabel} (no verdict): {rate}.")
    tail = f" No FLOP count in these results: {', '.join(no_model)}." if no_model else ""
    count = f" {within} of {judged} rows within it." if judged else ""
    head = (f"- FLOP-model check at its best (the project's target, not a paper claim: each at-its-best row's time / "
            f"FRAQ's within {TARGET:g}x of its FLOP count's prediction, either way, on this CPU in the same run; "
            f"FLOPs from each row's own ranks, against FRAQ at the row's threshold where FRAQ ran at it, else at "
            f"tau = 0.95)" + (RATE_HEAD if _has_roofs(rows) else "") + ":" + count + tail)
    return [head] + lines
