# Two commands: `make run` (a node on SQLite with the Spark journal) and `make test` (everything).
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3
PORT ?= 8080
MYPY_CACHE_DIR ?= $(HOME)/.cache/toymb/mypy
# Twice the 2 cores: many tests wait on sockets, brokers and JVM starts, and a fourth worker fills
# those waits. With 4 the CPU was busy throughout the run (pytest 11 min 35 s on a warm machine).
PYTEST_WORKERS ?= 4
# --no-loadscope-reorder: xdist otherwise hands out the groups first, by their number of tests, and
# only then the single tests; the suite's own order (tests/conftest.py: longest work first) holds.
PYTEST_ARGS ?= -q -rs -p no:cacheprovider --dist loadgroup --no-loadscope-reorder
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
# Every Python process a run starts (nodes, journal drivers, Spark's Python workers, pytest's
# workers, CLI subprocesses) imports its modules from bytecode cached in __pycache__ (git- and
# docker-ignored), compiled once, even when the calling environment sets PYTHONDONTWRITEBYTECODE:
# with it set nothing is ever cached and each process compiles what it imports again. Measured on
# the loaded 2-core machine: importing broker.cli and broker.app 1.44 CPU-s -> 0.44, pyspark.daemon
# (each Spark Python daemon) 0.35 -> 0.10, Spark's data source planner worker 0.60 -> 0.18; a
# node's start to /ready and stop 1.5-1.6 -> 0.6-0.7, a journal job on an empty store 11.2-13.4 ->
# 9.7-10.4, collecting the suite (each pytest worker does) 9.6-10.8 -> 3.6.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install run serve journal test services services-stop docker lint typecheck bench clean

# --no-compile: pip otherwise compiles every module it installs, all of PySpark's included; most
# are never imported. Measured on the loaded 2-core machine, a fresh venv from a warm pip cache:
# 35.5 CPU-s with it, 17.5-20.2 without. Python compiles (and caches, see PYTHONDONTWRITEBYTECODE
# above) the modules a run imports on first use instead.
$(BIN)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile -e '.[journal,nats,dev]'
	touch $@

install: $(BIN)/.installed

# A node on 127.0.0.1:$(PORT) with SQLite under ./data, and the journal job writing ./data/journal.
run: install
	@command -v java >/dev/null || { echo "the journal needs Java 17 (apt-get install openjdk-17-jre-headless)"; exit 1; }
	@set -m; $(BIN)/toymb serve --port $(PORT) & node=$$!; \
	trap 'kill $$journal $$node 2>/dev/null; wait' EXIT INT TERM; \
	for i in $$(seq 100); do curl -fs http://127.0.0.1:$(PORT)/ready >/dev/null && break; sleep 0.2; done; \
	$(BIN)/toymb journal run & journal=$$!; \
	echo "ToyMB node on http://127.0.0.1:$(PORT), journal in ./data/journal; Ctrl-C stops both"; \
	wait $$node

serve: install
	$(BIN)/toymb serve --port $(PORT)

services:
	bash services/all.sh start

services-stop:
	bash services/all.sh stop

# The Docker engine (installed and started when missing) and the offline base image; the compose
# cluster's test builds the images from there. `bash services/docker.sh stop` stops the engine.
docker:
	bash services/docker.sh start

# services/setup.sh: the services, the Docker engine and the compose cluster's images start in the
# background while the venv installs; the Spark JVM's class archive is built beside the checkers.
# A failed part stops everything setup started and names its log. Then the suite in parallel
# (pytest-xdist). No test restarts a shared service, so workers cannot disturb each other; the
# slowest tests are listed at the end, pass or fail.
test:
	@bash services/setup.sh $(BIN)
	$(BIN)/pytest $(PYTEST_ARGS) -n $(PYTEST_WORKERS) --durations=30

# Every checker `make test` enforces: ruff (rules in pyproject.toml), mypy --strict on every package.
# mypy's cache is the machine's, not the clone's: a fresh clone then checks only what changed (a
# cached module whose path or mtime differs is used only when its source hashes the same): on the
# 2-core machine a new clone's check took 0.4 CPU-s against 21 with an empty cache.
lint: install
	$(BIN)/ruff check broker driver journal_spark nats_bridge bench tests
	$(BIN)/mypy --cache-dir "$(MYPY_CACHE_DIR)" broker driver journal_spark nats_bridge bench

bench: install services
	bash services/apt.sh wrk
	$(BIN)/toymb bench

clean:
	rm -rf $(VENV) data bench/out .pytest_cache .mypy_cache .ruff_cache
