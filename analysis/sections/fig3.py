"""Figure 3 (runtime, memory, FLOPs and fidelity against r and d) and Table 5 (FLOPs)."""

from __future__ import annotations

from analysis import agreement, figures, style, tables
from analysis.sections import Figure, Section

reads = ("fig3",)


def draw(res) -> list[Section]:
    f3 = res["fig3"]
    fig = Figure("fig3_scalability", figures.fig3_scalability(f3), f3,
                 f"{int(f3['modules'].iloc[0])} square modules per call, clients of rank "
                 f"{int(f3['client_rank'].iloc[0])}, output rank {int(f3['p'].iloc[0])}; median, band = IQR; "
                 "tensor peak memory above the inputs",
                 "Runtime and tensor peak memory against total rank r and hidden size d; batched solid, "
                 "unbatched dashed.")
    t5 = tables.table5_flops(f3)
    table5 = ("Batched points of the Fig. 3 sweeps, all modules of one call. *Table 5 GFLOP*: the paper's "
              "leading-order formulas; *model (code)*: the same pipelines with the constants of what the code runs "
              "(`fraq.flops.analytic_flops(model='full')`); *counted*: FlopCounterMode with LAPACK formulas "
              "(`benchmarks.measure.count_flops`). *% of GEMM bound*: the counted FLOPs at the rate of a 2048^3 "
              "float32 GEMM measured in the same process, over the time: a bound only as far as every kernel could "
              "run at GEMM's rate, which LAPACK's reductions cannot; *% of roofline*: the call's roofline (every kernel "
              "it runs timed alone at its own shapes, the larger of its FLOP time and its bytes at the copy bandwidth "
              "of its size, summed; `benchmarks.measure.kernels`, one torch thread) over the time. "
              f"{style.caption(f3)}.\n\n" + tables.markdown(t5) + "\n\n"
              + "\n".join(agreement.table5_lines(t5)))
    mem = tables.memory_crosscheck(f3)
    cross = ("" if mem.empty else
             "\n\nThe tensor peak (torch's allocator, above the inputs) cross-checked by the process's resident set: its "
             "growth over one call in a fresh process at one thread, a second call (*warm*, after freed heap memory is "
             "handed back) and the first (*cold*, the libraries' own set-up included; "
             "`benchmarks.measure.rss`). Warm growth well above the tensor peak would be memory the libraries "
             "allocate outside torch.\n\n" + tables.markdown(mem))
    return [Section("Figure 3: runtime and peak memory",
                    "\n".join(agreement.fig3_lines(figures.fig3_summary(f3))) + cross, fig),
            Section("Table 5: FLOPs, analytic next to counted next to measured time", table5)]
