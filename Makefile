# The README's commands. Set-up is the first two lines of the README; `make setup` runs them.
# A bare `make` prints every target: what it writes and its time (docs/performance.md).
PY := .venv/bin/python

help: ## nothing (this list)
	@python3 fraq/_make_help.py

.PHONY: help setup run demo test test-integration tiny-fixture test-slow test-all asv-check bench bench-quick bench-publish bench-pytest bench-pytest-compare bench-roofline regress \
	bench-gpu gpu-check gpu-campaign reproduce reproduce-paper figures federated federated-smoke flower-local flower-deployment peft-example

setup: ## .venv/ (the README's two set-up commands)
	python3 -m venv .venv
	.venv/bin/pip install torch==2.13.0 -e ".[dev,bench,analysis,fl]"

# The main job: the reduced reproduction of every server-side figure and table. Measurements
# (the one runner) write results/reproduce/results; analysis only draws from those files.
# Both runs are resumable: a rerun measures only the points whose results are missing
# (RERUN=1 measures everything again). FRAQ_BENCH_DEVICE=cuda runs it on a GPU.
OUT ?= results/reproduce
run: reproduce ## results/reproduce/{results,figures,report.md} (as reproduce)

# FRAQ alone on the model presets (latency, ranks, downlink, error vs float64).
demo: ## nothing (prints FRAQ on the model presets)
	$(PY) -m benchmarks.demo

test: ## nothing (the quick tests)
	$(PY) -m pytest -m "not slow and not integration" --benchmark-skip -q

# the end-to-end flows (CI runs them after `make test`)
test-integration: ## nothing (the end-to-end tests)
	$(PY) -m pytest -m "integration and not slow" --benchmark-skip -q

# the recorded tiny run the analysis tests draw (tests/tiny_fixture.py): after an experiment's
# points or result fields change
tiny-fixture: ## tests/data/tiny-results.tar.gz
	$(PY) tests/tiny_fixture.py

test-slow: ## nothing (the slow tests)
	$(PY) -m pytest -m slow --benchmark-skip -q

test-all: ## nothing (every test)
	$(PY) -m pytest --benchmark-skip -q

# asv names an "existing" environment after the interpreter's path (.venv/bin/python and
# .venv/bin/python3 would be two histories): every target below, and benchmarks.regress
# (benchmarks.regress.asv_python), records under this one. --show-stderr prints each skip's reason.
ASV := $(PY) -m asv
ASV_PYTHON := $(abspath $(PY))

asv-check: ## .asv/ machine record
	$(ASV) machine --yes >/dev/null
	$(ASV) check --python=$(ASV_PYTHON)

bench: ## .asv/results (this commit, full statistics)
	$(ASV) machine --yes >/dev/null
	$(ASV) run --python=$(ASV_PYTHON) --show-stderr --set-commit-hash $$(git rev-parse HEAD)

bench-quick: ## .asv/results (this commit, one sample each)
	$(ASV) machine --yes >/dev/null
	$(ASV) run --python=$(ASV_PYTHON) --show-stderr --quick --set-commit-hash $$(git rev-parse HEAD)

# asv's dashboard in .asv/html, with the scripts and styles it loads from CDNs served from
# there (benchmarks/vendor): it needs no network. Its pages load JSON, so view it through a
# local server (`.venv/bin/asv preview`, or `python -m http.server -d .asv/html`), not file://.
# Published beside .asv/html and swapped in whole: a running preview keeps serving.
bench-publish: ## .asv/html (the dashboard)
	$(PY) -m benchmarks.publish

# pytest-benchmark's quick checks; SAVE=NAME also saves the run as a baseline (.benchmarks/).
# Rounds and timing are pytest-benchmark's own calibration, at least 50 rounds: with fewer,
# the minimum moved by up to 45% between runs on a loaded 2-core machine (docs/performance.md).
BENCH_PYTEST := --benchmark-only --benchmark-min-rounds=50
bench-pytest: ## nothing; SAVE=NAME: a baseline in .benchmarks/
	$(PY) -m pytest tests/bench $(BENCH_PYTEST) $(if $(SAVE),--benchmark-save=$(SAVE))

# The same against the last saved baseline; fails on a slowdown beyond BENCH_FAIL (docs/benchmarks.md).
# Without a saved baseline it says so in one line before running anything.
BENCH_FAIL ?= 25
bench-pytest-compare: ## .benchmarks/compare-last.json
	@$(PY) -m benchmarks.pytest_baseline
	$(PY) -m pytest tests/bench $(BENCH_PYTEST) --benchmark-json=.benchmarks/compare-last.json
	$(PY) -m benchmarks.pytest_compare --new .benchmarks/compare-last.json --fail $(BENCH_FAIL)

# The last N commits of main recorded with asv (one machine name: asv's own for this host) and
# compared with asv's statistics. BENCH=REGEX restricts the suite; QUICK=1 takes one sample per
# benchmark (a smoke test: timings then get "not enough samples", never a verdict).
N ?= 2
FACTOR ?= 1.5
regress: ## .asv/results (the last N commits)
	$(PY) -m benchmarks.regress --commits $(N) --factor $(FACTOR) $(if $(BENCH),--bench '$(BENCH)') $(if $(QUICK),--quick)

# FRAQ over its roofline and FLoRIST at 1 and 2 threads; FRAQ_BENCH_BACKEND picks the backend.
bench-roofline: ## nothing (prints the roofline)
	$(PY) -m benchmarks.roofline

reproduce: ## results/reproduce/{results,figures,report.md} (OUT=DIR)
	$(PY) -m benchmarks.run --out $(OUT)/results $(if $(RERUN),--rerun)
	$(PY) -m analysis.reproduce --out $(OUT)

# Its own directory (the analysis refuses one holding two sizes); OUT=DIR on the command line chooses it.
PAPER_OUT ?= $(if $(filter command line,$(origin OUT)),$(OUT),results/reproduce-paper)
reproduce-paper: ## results/reproduce-paper/ (the paper's sizes)
	$(PY) -m benchmarks.run --size paper --out $(PAPER_OUT)/results $(if $(RERUN),--rerun)
	$(PY) -m analysis.reproduce --out $(PAPER_OUT)

figures: ## results/reproduce/{figures,report.md} from its results (OUT=DIR)
	$(PY) -m analysis.reproduce --out $(OUT)

# Tables 1-3's latency columns, Fig. 3 and Table 4 on a GPU (DEVICE=cuda:N for another one).
DEVICE ?= cuda
bench-gpu: ## results/gpu/
	$(PY) -m benchmarks.run fig3 table4 tables123 --size gpu --device $(DEVICE) --out results/gpu/results
	$(PY) -m analysis.reproduce --out results/gpu

# Everything the suite measures on a GPU inside BUDGET seconds, in one command: the device record, the
# CUDA tests, the paper-size experiments, the eigensolver and basis routes (docs/benchmarks.md).
GPU_OUT ?= results/gpu-check
BUDGET ?= 420
PARTS ?=
gpu-check: ## results/gpu-check/ (PARTS=a,b: those parts only)
	$(PY) -m benchmarks.gpu_check --out $(GPU_OUT) --device $(DEVICE) --budget-s $(BUDGET) $(if $(PARTS),--parts $(PARTS))
	@if tar -tzf $(GPU_OUT)/results.tar.gz 2>/dev/null | grep -q '\.json$$'; then \
		$(PY) -m analysis.reproduce --out $(GPU_OUT); else echo "no result files in $(GPU_OUT): no report drawn"; fi

# The points no GPU call has measured with this code on this kind of GPU, by priority, in one long-lived
# process inside BUDGET seconds, each added to CAMPAIGN_OUT/ledger.json as it is measured; the same
# command again goes on where it stopped (docs/benchmarks.md, "The campaign").
CAMPAIGN_OUT ?= results/gpu-campaign
gpu-campaign: ## results/gpu-campaign/ (results, ledger.json, campaign.log)
	$(PY) -m benchmarks.gpu_check --campaign --out $(CAMPAIGN_OUT) --device $(DEVICE) --budget-s $(BUDGET)

# every method over the setting's seeds and rank variants, one result file per run (a rerun keeps the
# finished runs and continues an interrupted one), then the report: results/federated/quick/report.md
FEDERATED_OUT = results/federated/quick
federated: ## results/federated/quick/ (results, report.md)
	$(PY) -m fraq.federated --out $(FEDERATED_OUT) $(if $(wildcard $(FEDERATED_OUT)/results/federated/*.json $(FEDERATED_OUT)/checkpoints/*.pt),--resume)
	$(PY) -m analysis.reproduce --out $(FEDERATED_OUT)

flower-local: ## results/flower-local/<time>/ (the Flower App, simulated)
	$(PY) -m fraq.federated.flower.local

flower-deployment: ## results/flower-local/<time>/ (Flower's deployment engine)
	$(PY) -m fraq.federated.flower.local --deployment

peft-example: ## results/peft-example/
	rm -rf results/peft-example
	.venv/bin/fraq example-adapters results/peft-example
	.venv/bin/fraq aggregate results/peft-example/client0 results/peft-example/client1 results/peft-example/client2 --weights 120 80 40 --tau 0.95 -o results/peft-example/merged --report

federated-smoke: ## results/federated/smoke/
	$(PY) -m fraq.federated --config smoke --out results/federated/smoke --overwrite --no-progress
	$(PY) -m analysis.reproduce --out results/federated/smoke
