# Two entry points: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU wheel of torch lies on this machine's disk; a bare `torch` would pull a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ev-nav demo

test: $(STAMP)
	$(BIN)/ruff check ev_nav tests scripts
	# one process per core, at most 4: the tests are independent (each its own tmp_path and
	# ports); work stealing keeps both cores of a 2-core CI busy until the slow scripts end
	$(BIN)/python -m pytest -q -n auto --maxprocesses=4 --dist worksteal

lint: $(STAMP)
	$(BIN)/ruff check ev_nav tests scripts

clean:
	rm -rf $(VENV) cache .pytest_cache
