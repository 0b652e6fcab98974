"""Figure 1: per-client downlink against the number of clients and the local rank."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import figures
from analysis.verdicts import exact, holds, not_measured, ours
from analysis.sections import Figure, Section

reads = ("fig1",)


def draw(res) -> list[Section]:
    f1 = res["fig1"]
    lm, lf = int(f1["layers_measured"].iloc[0]), int(f1["layers_full"].iloc[0])
    fig = Figure("fig1_downlink", figures.fig1_downlink(f1), f1,
                 f"downlink counted by fraq.aggregators on {lm} of {lf} layers of every projection, scaled "
                 f"x{lf / lm:g} to the whole model; synthetic LoRA-like client spectra",
                 "Per-client downlink of the exact FLoRA stack and of FRAQ at 80/90/95% retained energy, against "
                 "the number of clients and the local rank.")
    return [Section("Figure 1: downlink", "\n".join(fig1_lines(f1)), fig)]


def fig1_lines(df: pd.DataFrame) -> list[str]:
    lines = []
    bad = df[~np.isfinite(pd.to_numeric(df["downlink_params_full"], errors="coerce"))]
    if not bad.empty:
        names = [f"{r.method} K={r.clients} r_k={r.client_rank}" for r in bad.itertuples()]
        v = not_measured("Fig. 1 downlink", names)
        return ["- Paper: exact stacking's per-client downlink grows with the client count and local rank. "
                + ours(v, "")]
    flora = df[df["method"] == "flora"].set_index(["clients", "client_rank"])["downlink_params_full"]
    grows = all(np.all(np.diff(flora.xs(rk, level="client_rank").sort_index().values) > 0)
                for rk in flora.index.get_level_values("client_rank").unique())
    lines.append(f"- Paper: exact stacking's per-client downlink grows with the client count and local rank. "
                 + ours(holds(grows), f"FLoRA's stack goes from {flora.min() / 1e6:.1f} M to "
                         f"{flora.max() / 1e6:.1f} M parameters per client over the grid")
                 + " (it is (m + n) K r_k per module).")
    fr = df[(df["method"] == "fraq") & (df["tau"].round(2) == 0.90)].set_index(["clients", "client_rank"])
    if not fr.empty:
        cut = 100 * (1 - fr["downlink_params_full"] / flora.reindex(fr.index))
        lines.append(f"- Paper: with at least 90% energy retained, recompression cuts the payload by 55.5-87.3% "
                     f"(real LLaMA-3.2-3B updates). "
                     + ours(exact(cut.min(), above=50), f"{cut.min():.1f}-{cut.max():.1f}%",
                             test="a cut of more than 50% at 90% energy")
                     + " (in kind; the spread depends on the synthetic spectra, not real adapters).")
    for tau in sorted(df["tau"].dropna().unique()):
        s = df[(df["method"] == "fraq") & (df["tau"] == tau)].set_index(["clients", "client_rank"])
        pct = 100 * s["downlink_params_full"] / flora.reindex(s.index)
        lines.append(f"  - FRAQ at {100 * tau:.0f}% energy: {pct.min():.1f}-{pct.max():.1f}% of the stack.")
    return lines
