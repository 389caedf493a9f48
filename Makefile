# The one runner: `make run` and `make test` each bootstrap .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-postgres demo bench fuzz soak clean install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/wakeline serve

test: $(STAMP)
	$(BIN)/python -m pytest

# The store-level suites again with the store on PostgreSQL (a throwaway cluster the tests
# start; engine "dbos"). `make test-postgres PG_TESTS=tests` runs everything there.
PG_TESTS ?= tests/unit tests/integration
test-postgres: $(STAMP)
	WAKELINE_TEST_DATABASE=postgres $(BIN)/python -m pytest $(PG_TESTS)

demo: $(STAMP)
	$(BIN)/wakeline demo

bench: $(STAMP)
	$(BIN)/python bench/all.py

fuzz: $(STAMP)
	WAKELINE_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest tests/unit/http/test_fuzz.py tests/unit/providers/test_guard_properties.py

soak: $(STAMP)
	$(BIN)/python bench/soak.py --minutes 30

clean:
	rm -rf $(VENV) build *.egg-info
