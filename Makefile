# The README's commands. Set-up is the first two lines of the README; `make setup` runs them.
PY := .venv/bin/python

.PHONY: setup run demo test test-slow test-all asv-check bench bench-quick bench-pytest bench-roofline bench-report regress \
	reproduce reproduce-paper figures federated federated-smoke flower-local flower-deployment peft-example

setup:
	python3 -m venv .venv
	.venv/bin/pip install torch==2.13.0 -e ".[dev,bench,analysis,fl]"

# The main job: the reduced reproduction of every server-side figure and table.
run: reproduce

# FRAQ alone on the model presets (latency, ranks, downlink, error vs float64).
demo:
	$(PY) -m fraq

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
	$(PY) -m pytest tests/bench --benchmark-only

N ?= 2
FACTOR ?= 1.5
regress:
	$(PY) -m benchmarks.regress --commits $(N) --factor $(FACTOR)

bench-report:
	$(PY) -m benchmarks.report all

bench-roofline:
	$(PY) -m pytest tests/bench/test_roofline.py --benchmark-only -s

reproduce:
	$(PY) -m analysis.reproduce

reproduce-paper:
	$(PY) -m analysis.reproduce --paper

figures:
	$(PY) -m analysis.reproduce --figures-only

federated:
	$(PY) -m fraq.federated

flower-local:
	$(PY) -m fraq.federated.flower.local

flower-deployment:
	$(PY) -m fraq.federated.flower.local --deployment

peft-example:
	rm -rf results/peft-example
	.venv/bin/fraq example-adapters results/peft-example
	.venv/bin/fraq aggregate results/peft-example/client0 results/peft-example/client1 results/peft-example/client2 --weights 120 80 40 --tau 0.95 -o results/peft-example/merged --report

federated-smoke:
	$(PY) -m fraq.federated --methods fedit fraq --clients 2 --rounds 1 --steps 5 --set dataset.train_per_intent=20 --set dataset.test_per_intent=5 --out results/federated/smoke --overwrite --no-progress
