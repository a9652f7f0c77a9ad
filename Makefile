# Everything a fresh machine needs is installed from pyproject.toml into .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench synth clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --progress-bar off -e '.[local,worker,console,dev]'
	# TensorFlow Serving's gRPC API (squall predict --grpc, the local model server). Its
	# package requires `tensorflow`, which would install beside tensorflow-cpu over the
	# same files; its generated modules need only tensorflow-cpu's protos and grpcio.
	$(BIN)/python -m pip install --quiet --progress-bar off --no-deps 'tensorflow-serving-api==2.21.0'
	# The console's browser tests drive Debian's Chromium through its chromedriver: install both
	# where missing (as root, or with sudo when it needs no password); nothing downloads a browser build.
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO=sudo; else \
	    echo "chromium and chromedriver are missing and cannot be installed without root: the browser tests will be skipped"; exit 0; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; }
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/squall demo

# Every test, spread over the machine's cores (pytest-xdist; worksteal evens out the
# long ones), with the 25 slowest named.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist worksteal --durations=25

# The inner loop: the pure unit tests and the quick integration ones, with Hypothesis's
# small profile. The slow tier (TensorFlow, CDK synthesis, the local runtime end to end)
# is marked `slow` by folder in tests/conftest.py, or by the test itself.
test-fast: $(STAMP)
	SQUALL_TEST_TIER=fast $(BIN)/python -m pytest -n auto --dist worksteal -m "not slow" --durations=10

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
