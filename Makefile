# Developer entry points. CI (.ci/run) prepares the machine, then runs `make test`.
#
#   make install      venv + editable install with the dev extras, and runtrail_native (Rust)
#   make test         ruff check, mypy, then the test suite (PYTEST_WORKERS=3 processes)
#   make lint         ruff check + ruff format --check + mypy
#   make bench        runtrail against Quix Streams and the bare client (BENCH_ARGS), in its own
#                     venv: the bench extra's quixstreams pins an older confluent-kafka
#   make kafka-up     local single-node Kafka (RUNTRAIL_KAFKA_PORT, RUNTRAIL_STATE_DIR apply)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# test files run in this many processes (each starts its own broker); 0 runs them in this one
PYTEST_WORKERS ?= 3

BENCH_ARGS ?= --events 300000 --profile

.PHONY: bench venv install native test lint typecheck kafka-up kafka-down kafka-status kafka-fetch topics

venv: $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: venv
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(MAKE) --no-print-directory native

# the compiled consume path (shared/runtrail_native, Rust through maturin): optional for users,
# installed for development so the suite runs the path the services run
native: venv
	$(BIN)/python -m pip install -q ./shared/runtrail_native

typecheck:
	$(BIN)/mypy

lint: typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test:
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory typecheck
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

kafka-fetch:
	$(BIN)/runtrail kafka fetch

kafka-up:
	$(BIN)/runtrail kafka up

kafka-down:
	$(BIN)/runtrail kafka down

kafka-status:
	$(BIN)/runtrail kafka status

topics:
	$(BIN)/runtrail topics ensure

BENCH_VENV ?= .venv-bench

bench:
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[bench]'
	$(BENCH_VENV)/bin/python -m pip install -q ./shared/runtrail_native
	$(BENCH_VENV)/bin/python -m bench.compare $(BENCH_ARGS)
