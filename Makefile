# The README's commands. Set-up is the first two lines of the README; `make setup` runs them.
PY := .venv/bin/python

.PHONY: setup run demo test test-slow test-all asv-check bench bench-quick bench-pytest bench-roofline regress \
	bench-gpu reproduce reproduce-paper figures federated federated-smoke flower-local flower-deployment peft-example

setup:
	python3 -m venv .venv
	.venv/bin/pip install torch==2.13.0 -e ".[dev,bench,analysis,fl]"

# The main job: the reduced reproduction of every server-side figure and table. Measurements
# (the one runner) write results/reproduce/results; analysis only draws from those files.
# Both runs are resumable: a rerun measures only the points whose results are missing
# (RERUN=1 measures everything again). FRAQ_BENCH_DEVICE=cuda runs it on a GPU.
OUT ?= results/reproduce
run: reproduce

# FRAQ alone on the model presets (latency, ranks, downlink, error vs float64).
demo:
	$(PY) -m benchmarks.demo

test:
	$(PY) -m pytest -m "not slow" --benchmark-skip -q

test-slow:
	$(PY) -m pytest -m slow --benchmark-skip -q

test-all:
	$(PY) -m pytest --benchmark-skip -q

asv-check:
	.venv/bin/asv machine --yes >/dev/null
	.venv/bin/asv check --python=same

bench:
	.venv/bin/asv machine --yes >/dev/null
	.venv/bin/asv run --python=same --set-commit-hash $$(git rev-parse HEAD)

bench-quick:
	.venv/bin/asv machine --yes >/dev/null
	.venv/bin/asv run --python=same --quick --set-commit-hash $$(git rev-parse HEAD)

bench-pytest:
	.venv/bin/pytest tests/bench --benchmark-only

# The last N commits of main recorded with asv (one machine name: asv's own for this host) and
# compared with asv's statistics. BENCH=REGEX restricts the suite; QUICK=1 takes one sample per
# benchmark (a smoke test: timings then get "not enough samples", never a verdict).
N ?= 2
FACTOR ?= 1.5
regress:
	$(PY) -m benchmarks.regress --commits $(N) --factor $(FACTOR) $(if $(BENCH),--bench '$(BENCH)') $(if $(QUICK),--quick)

# FRAQ over its roofline and FLoRIST at 1 and 2 threads; FRAQ_BENCH_BACKEND picks the backend.
bench-roofline:
	$(PY) -m benchmarks.roofline

reproduce:
	$(PY) -m benchmarks.run --out $(OUT)/results $(if $(RERUN),--rerun)
	$(PY) -m analysis.reproduce --out $(OUT)

# Its own directory (the analysis refuses one holding two sizes); OUT=DIR on the command line chooses it.
PAPER_OUT ?= $(if $(filter command line,$(origin OUT)),$(OUT),results/reproduce-paper)
reproduce-paper:
	$(PY) -m benchmarks.run --size paper --out $(PAPER_OUT)/results $(if $(RERUN),--rerun)
	$(PY) -m analysis.reproduce --out $(PAPER_OUT)

figures:
	$(PY) -m analysis.reproduce --out $(OUT)

# Tables 1-3's latency columns, Fig. 3 and Table 4 on a GPU (DEVICE=cuda:N for another one).
DEVICE ?= cuda
bench-gpu:
	$(PY) -m benchmarks.run fig3 table4 tables123 --size paper --device $(DEVICE) --out results/gpu/results
	$(PY) -m analysis.reproduce --out results/gpu

# every method over the setting's seeds and rank variants, one result file per run (a rerun keeps the
# finished runs and continues an interrupted one), then the report: results/federated/quick/report.md
FEDERATED_OUT = results/federated/quick
federated:
	$(PY) -m fraq.federated --out $(FEDERATED_OUT) $(if $(wildcard $(FEDERATED_OUT)/results/federated/*.json $(FEDERATED_OUT)/checkpoints/*.pt),--resume)
	$(PY) -m analysis.reproduce --out $(FEDERATED_OUT)

flower-local:
	$(PY) -m fraq.federated.flower.local

flower-deployment:
	$(PY) -m fraq.federated.flower.local --deployment

peft-example:
	rm -rf results/peft-example
	.venv/bin/fraq example-adapters results/peft-example
	.venv/bin/fraq aggregate results/peft-example/client0 results/peft-example/client1 results/peft-example/client2 --weights 120 80 40 --tau 0.95 -o results/peft-example/merged --report

federated-smoke:
	$(PY) -m fraq.federated --config smoke --out results/federated/smoke --overwrite --no-progress
	$(PY) -m analysis.reproduce --out results/federated/smoke
