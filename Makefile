# Two commands: `make run` serves the playground, `make test` runs the tests.
# Both perform the same idempotent setup first (scripts/setup.sh).
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 7860

.PHONY: setup run test lint bench fuzz clean

setup:
	@bash scripts/setup.sh

run: setup
	$(PY) -m cfsm serve --host $(HOST) --port $(PORT)

test: setup
	$(VENV)/bin/ruff check engine viz app cfsm tests scripts
	$(VENV)/bin/ruff format --check engine viz app cfsm tests scripts
	$(PY) -m pytest -q -p no:cacheprovider --durations=25

lint: setup
	$(VENV)/bin/ruff check engine viz app cfsm tests scripts
	$(VENV)/bin/ruff format --check engine viz app cfsm tests scripts

bench: setup
	$(PY) -m cfsm bench --names 10

clean:
	rm -rf $(VENV) bench-results test-artifacts

fuzz: setup
	CFSM_FUZZ=long $(PY) -m pytest -q -p no:cacheprovider tests/backends/test_fuzz.py
