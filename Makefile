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

DEMO_DB := sqlite:///demo.db

demo: $(BIN)/.installed
	rm -f demo.db demo.db-wal demo.db-shm
	$(BIN)/toollens score examples/suite_v1.yaml examples/trajectories_v1.jsonl
	$(BIN)/toollens import examples/trajectories_v1.jsonl --suite examples/suite_v1.yaml --run banca-v1 --model example --db $(DEMO_DB)
	$(BIN)/toollens import examples/trajectories_v2.jsonl --suite examples/suite_v2.yaml --run banca-v2 --model example --db $(DEMO_DB)
	@echo "ToolLens dashboard with the example runs: http://127.0.0.1:8000  (Ctrl-C stops it)"
	$(BIN)/toollens serve --db $(DEMO_DB)

test: $(BIN)/.installed
	$(BIN)/pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check app tests bench
	$(BIN)/mypy app

bench: $(BIN)/.installed
	$(BIN)/python bench/score_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
