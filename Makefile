# Two commands: `make run` (a node on SQLite with the Spark journal) and `make test` (everything).
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3
PORT ?= 8080
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: install run serve journal test services services-stop lint typecheck bench clean

$(BIN)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[journal,dev]'
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

test: install services
	$(BIN)/ruff check broker driver journal_spark bench tests
	$(BIN)/mypy --strict driver
	$(BIN)/pytest -q -rs -p no:cacheprovider

lint: install
	$(BIN)/ruff check broker driver journal_spark bench tests
	$(BIN)/mypy broker journal_spark
	$(BIN)/mypy --strict driver

bench: install services
	command -v wrk >/dev/null || apt-get install -y -q wrk || true
	$(BIN)/toymb bench

clean:
	rm -rf $(VENV) data bench/out .pytest_cache .mypy_cache .ruff_cache
