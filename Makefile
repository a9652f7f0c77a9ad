# Everything a fresh machine needs is installed from pyproject.toml into .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench synth clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --progress-bar off -e '.[local,worker,dev]'
	# TensorFlow Serving's gRPC API (squall predict --grpc, the local model server). Its
	# package requires `tensorflow`, which would install beside tensorflow-cpu over the
	# same files; its generated modules need only tensorflow-cpu's protos and grpcio.
	$(BIN)/python -m pip install --quiet --progress-bar off --no-deps 'tensorflow-serving-api==2.21.0'
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
