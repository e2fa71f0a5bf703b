# Two commands for a newcomer: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# The modules setup.py compiles with mypyc, and the core whose types they were compiled
# against: a change to one of them rebuilds the install.
COMPILED := $(shell sed -n 's/^    "\(app\/[a-z_/]*\.py\)",.*$$/\1/p' setup.py) $(wildcard app/core/*.py)

.PHONY: demo test lint bench build clean

$(BIN)/.installed: pyproject.toml setup.py $(COMPILED)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

build: $(BIN)/.installed

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
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
	find app -name '*.so' -delete
