# Developer entry points. CI (.ci/run) prepares the machine, then runs `make test`.
#
#   make install      venv + editable install with the dev extras, and runtrail_native (Rust),
#                     versions pinned by the lock (constraints.txt)
#   make lock         write the locks anew (constraints.txt, constraints-bench.txt): the newest
#                     versions pyproject.toml allows
#   make test         ruff check, import contracts, then the whole suite in tiers
#                     (tests/tiers.py) with mypy beside it
#   make test-fast    the tier that needs no broker: the inner loop
#   make lint         ruff check + ruff format --check + mypy
#   make bench        runtrail against Quix Streams and the bare client (BENCH_ARGS), in its own
#                     venv and lock: the bench extra's quixstreams pins an older confluent-kafka
#   make kafka-up     local single-node Kafka (RUNTRAIL_KAFKA_PORT, RUNTRAIL_STATE_DIR apply)

# the interpreter the venv is made from: the distribution's Python 3.11 where it has one, since
# Debian builds it with profile-guided and link-time optimisation, which a version manager's
# default build lacks (the unit tier: about a tenth less CPU); else python3
PYTHON ?= $(shell /usr/bin/python3.11 -c 'import ensurepip, venv' >/dev/null 2>&1 \
	&& echo /usr/bin/python3.11 || echo python3)
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# each test's seconds in the last make test; copy over tests/durations.json to reorder the suite
DURATIONS_OUT ?= .ci/durations.json
# mypy's output in make test (it runs beside the suite)
MYPY_LOG ?= .ci/mypy.log
# tests run in this many processes (tests/tiers.py): the three fault lanes, which mostly wait out
# their outages, and three that take every other unit of work as they come free (the lanes'
# workers too, once their lane is done); the run's one shared broker starts on the first test
# that needs it. With four in all the cores stood about 30 % idle while the long units ran; with
# six, about 5 % on a loaded machine and 20 % on a quiet one (seven passed once on a quiet one,
# 6 % faster, but more concurrency is what the load-only failures came from)
PYTEST_WORKERS ?= 6
# the suite's brokers: the C1 compiler alone starts a broker on about half the CPU (the suite's
# only: a benchmark's broker runs as deployed, with the full compiler)
test test-fast: export RUNTRAIL_KAFKA_JVM_OPTIONS ?= -XX:TieredStopAtLevel=1

# compiled modules are kept (__pycache__, ignored by git) even where the environment says not to
# write them: without them every test process compiles every test module again (collecting the
# unit tier takes 28 s instead of 12 on this machine)
unexport PYTHONDONTWRITEBYTECODE

BENCH_ARGS ?= --events 300000 --profile

.PHONY: bench venv install lock native test test-fast lint typecheck kafka-up kafka-down kafka-status kafka-fetch topics

venv: $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv installs from the lock in seconds; it is itself pinned there
$(BIN)/uv: constraints.txt | venv
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt uv

install: venv $(BIN)/uv
	$(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt -e '.[dev]'
	$(MAKE) --no-print-directory native

lock:
	bash tools/lock.sh

# the compiled consume path (shared/runtrail_native, Rust through maturin): optional for users,
# installed for development so the suite runs the path the services run; built once per
# content hash of its sources (tools/native_wheel.py), then reused
native: venv $(BIN)/uv
	$(BIN)/uv pip install -q --python $(BIN)/python --reinstall-package runtrail-native \
		"$$($(BIN)/python tools/native_wheel.py)"

typecheck:
	$(BIN)/mypy

lint: typecheck
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff format --check .

# mypy (most of a minute on one core from a clean clone) runs beside the suite rather than
# before it; the target fails if either does, and prints mypy's verdict after the suite's.
# One process collects the suite first, beside mypy: it compiles every module collection
# imports once, where the workers, started together on a clean clone, would each compile all of
# them (46.9 s to the first test from a clean clone with six workers, 35.7 s with it); its
# errors, if any, are the suite's own and are reported by the run that follows
test:
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	@mkdir -p .ci; $(BIN)/mypy >$(MYPY_LOG) 2>&1 & typecheck=$$!; status=0; \
	$(BIN)/python -m pytest -q --collect-only $(PYTEST_ARGS) >/dev/null 2>&1 || true; \
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 \
		--record-durations=$(DURATIONS_OUT) $(PYTEST_ARGS) || status=$$?; \
	if wait $$typecheck; then tail -n 1 $(MYPY_LOG); \
	else cat $(MYPY_LOG); echo "make test: mypy failed" >&2; status=1; fi; \
	exit $$status

# the tier that needs no broker (no services): the inner loop; work stealing keeps the three
# processes busy to the end (its tests are short, no lane or shared stack to keep together)
test-fast:
	RUNTRAIL_TEST_FAST=1 $(BIN)/python -m pytest -q -n 3 --dist worksteal -m unit --durations=5 $(PYTEST_ARGS)

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

# the bench venv from its own lock (constraints-bench.txt), through the dev venv's uv, and the
# compiled path's cached wheel (the same interpreter: tools/native_wheel.py builds it once)
bench: $(BIN)/uv
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BIN)/uv pip install -q --python $(BENCH_VENV)/bin/python -c constraints-bench.txt \
		-e '.[bench]'
	$(BIN)/uv pip install -q --python $(BENCH_VENV)/bin/python --reinstall-package runtrail-native \
		"$$($(BENCH_VENV)/bin/python tools/native_wheel.py)"
	$(BENCH_VENV)/bin/python -m bench.compare $(BENCH_ARGS)
