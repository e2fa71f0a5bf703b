# Two commands for a newcomer: `make demo` (the main job) and `make test`.
#
# `make demo` installs ToolLens pure Python (about a minute: the dependencies)
# and serves the dashboard (`make demo PORT=8080 HOST=0.0.0.0`). `make fast`
# (alias `make build`) also compiles the scoring path with mypyc: a few minutes
# once, then scoring runs 1.4 to 2 times faster. `make test` tests the compiled
# build, as CI does (`TOOLLENS_PURE_PYTHON=1 make test` tests pure Python).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8000
# Test processes (pytest-xdist): the tests spend most of their time waiting on servers,
# subprocesses and timers, so more processes than cores pay (`make test TEST_WORKERS=0`: one process).
TEST_WORKERS ?= 3
HOST ?= 127.0.0.1
# pip's output goes to a log, shown only when the install fails.
LOG := $(VENV)/install.log
PIP = $(BIN)/pip install --disable-pip-version-check --progress-bar off

# The modules setup.py compiles with mypyc, and the core whose types they were compiled
# against: a change to one of them rebuilds the compiled install.
COMPILED := $(shell sed -n 's/^    "\(app\/[a-z_/]*\.py\)",.*$$/\1/p' setup.py) $(wildcard app/core/*.py app/core/*/*.py)

.PHONY: demo fast build test lint bench bench-pages clean

# Runtime dependencies, pure Python: enough for the demo.
$(BIN)/.installed: pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "toollens: installing the dependencies into $(VENV) (pure Python, about a minute; log: $(LOG))"
	@$(PIP) -e . >$(LOG) 2>&1 || { tail -n 30 $(LOG); exit 1; }
	@touch $@

# Everything, with the dev tools, and the scoring path compiled with mypyc
# (unless TOOLLENS_PURE_PYTHON=1, or no C compiler: then it stays pure Python).
# mypyc comes with mypy, installed here rather than in pip's isolated build
# environment: a plain install then does not download it.
$(BIN)/.built: pyproject.toml setup.py $(COMPILED)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "toollens: installing with the dev tools and compiling the scoring path with mypyc (a few minutes; log: $(LOG))"
	@$(PIP) 'setuptools>=77' 'mypy==2.4.1' >$(LOG) 2>&1 || { tail -n 30 $(LOG); exit 1; }
	@TOOLLENS_COMPILE=1 $(PIP) -v --no-build-isolation -e '.[dev]' >>$(LOG) 2>&1 || { tail -n 30 $(LOG); exit 1; }
	@# BFCL's classes, for the BFCL result-file tests: without its own dependencies (every provider's SDK)
	@$(PIP) --no-deps 'bfcl-eval==2026.3.23' 'mpmath>=1.3' >>$(LOG) 2>&1 || { tail -n 30 $(LOG); exit 1; }
	@grep -h '^ *toollens: ' $(LOG) | sed 's/^ *//' | sort -u || true
	@$(BIN)/python -c "from app import buildinfo; print('toollens:', buildinfo.describe())"
	@touch $@ $(BIN)/.installed

fast build: $(BIN)/.built

# A compiled install, once made, is kept fresh (its old modules would run otherwise).
demo: $(BIN)/.installed $(if $(wildcard $(BIN)/.built),$(BIN)/.built)
	$(BIN)/toollens demo --host $(HOST) --port $(PORT)

test: $(BIN)/.built
	$(BIN)/pytest -q -n $(TEST_WORKERS)

lint: $(BIN)/.built
	$(BIN)/ruff check app tests bench
	$(BIN)/ruff format --check app tests bench migrations scripts setup.py
	$(BIN)/mypy app

bench: $(BIN)/.built
	$(BIN)/python bench/score_bench.py

bench-pages: $(BIN)/.built  # every page at 200,000 calls: exit 1 when one takes twice its recorded (least) CPU time
	$(BIN)/python bench/pages_bench.py --calls 100000 --requests 30 --check $(if $(PAGES_DB),--file $(PAGES_DB))

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
	find app -name '*.so' -delete
