# Two commands for a fresh machine with python3 and make: `make demo`, `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,http,cli,bench,agents,agent-framework,adk,postgres,web,otel,mcp]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sharedesk demo --path ./sharedesk-data

lint: $(STAMP)
	$(BIN)/ruff check sharedesk tests bench
	$(BIN)/ruff format --check sharedesk tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python -m bench all

clean:
	rm -rf $(VENV) sharedesk-data .pytest_cache .mypy_cache .ruff_cache
