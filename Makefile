# The README's commands. Set-up is the first two lines of the README; `make setup` runs them.
PY := .venv/bin/python

.PHONY: setup run demo test test-slow test-all bench-roofline reproduce reproduce-paper figures

setup:
	python3 -m venv .venv
	.venv/bin/pip install torch==2.13.0 -e ".[dev]"

run:
	$(PY) -m fraq

test:
	$(PY) -m pytest -m "not slow" --benchmark-skip -q

test-slow:
	$(PY) -m pytest -m slow --benchmark-skip -q

test-all:
	$(PY) -m pytest --benchmark-skip -q

bench-roofline:
	$(PY) -m pytest tests/bench/test_roofline.py --benchmark-only -s

reproduce:
	$(PY) -m analysis.reproduce

reproduce-paper:
	$(PY) -m analysis.reproduce --paper

figures:
	$(PY) -m analysis.reproduce --figures-only
