# Two commands for a newcomer: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/toollens demo --db demo.db

test: $(BIN)/.installed
	$(BIN)/pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check app tests bench
	$(BIN)/mypy app

bench: $(BIN)/.installed
	$(BIN)/python bench/score_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
