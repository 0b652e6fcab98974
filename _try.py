import os, tempfile, torch
os.environ["FRAQ_KERNEL_TABLE"] = tempfile.mktemp(suffix=".json")
from benchmarks.cases import build_model
from benchmarks.experiments import tables123
from benchmarks.experiments.table_rows import table_rows
from fraq.presets import ModuleGroup, Preset
tiny = Preset("tiny", (ModuleGroup("q", 12, 12, 3), ModuleGroup("up", 20, 12, 2)), ranks=(2, 2), alphas=(4.0, 4.0))
model = build_model(tiny, seed=1)
for m in table_rows(tiny):
    if tables123.row_applicable(m, tiny): continue
    for subset in (False, True):
        job = tables123.prepare(model, m, subset=subset, roof_sample=2e-4)
        r = job.row
        print(m, subset, r.get("roof_s"), r.get("roof_kernels"), r.get("roof_skipped", "")[:30], {k: round(v, 3) for k, v in job.steps.items()})
