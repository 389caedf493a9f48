# The one runner: `make run` and `make test` each bootstrap .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make test` (and the benchmarks) also install the optional extras the tests exercise
# (discord.py, matrix-nio, DBOS with psycopg); `make run` stays as small as the default install.
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-postgres demo bench fuzz soak clean install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,discord,matrix,dbos]'
	touch $(TEST_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/wakeline serve

test: $(TEST_STAMP)
	$(BIN)/python -m pytest

# The store-level suites again with the store on PostgreSQL (a throwaway cluster the tests
# start; engine "dbos"). `make test-postgres PG_TESTS=tests` runs everything there.
PG_TESTS ?= tests/unit tests/integration
test-postgres: $(TEST_STAMP)
	WAKELINE_TEST_DATABASE=postgres $(BIN)/python -m pytest $(PG_TESTS)

demo: $(STAMP)
	$(BIN)/wakeline demo

bench: $(TEST_STAMP)
	$(BIN)/python bench/all.py

fuzz: $(STAMP)
	WAKELINE_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest tests/unit/http/test_fuzz.py tests/unit/providers/test_guard_properties.py

soak: $(STAMP)
	$(BIN)/python bench/soak.py --minutes 30

clean:
	rm -rf $(VENV) build *.egg-info
