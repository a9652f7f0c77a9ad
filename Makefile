# Everything a fresh machine needs is installed from pyproject.toml into .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench synth clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --progress-bar off -e '.[local,worker,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/squall demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check functions stacks tests benchmarks worker_images app.py
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

synth: $(STAMP)
	$(BIN)/python app.py

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache
