# Two commands on a fresh machine:
#   make run    set up a venv, migrate ./mismatch.duckdb, serve http://127.0.0.1:8765
#   make test   install everything the tests need (incl. PostgreSQL and Chromium) and run them all
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
PIP     = $(VENV)/bin/pip
DB     ?= mismatch.duckdb
PORT   ?= 8765
# The demo's trainer. torch 2.13.0 matches the vLLM CPU build used in tests.
TORCH  ?= torch==2.13.0
# Test workers (pytest-xdist). Most of a test's time is spent waiting on a real server,
# database or browser, so one worker more than there are cores keeps the cores busy; capped at
# 8, since each worker runs its own PostgreSQL cluster and Chromium. WORKERS=0: one process.
CORES   := $(shell nproc 2>/dev/null || echo 2)
WORKERS ?= $(shell n=$$(( $(CORES) + 1 )); [ $$n -gt 8 ] && n=8; echo $$n)
# loadgroup: the real-vLLM tests share one worker (one engine at a time), and a module with
# module-scoped fixtures stays on one (tests/conftest.py). pytest-randomly shuffles the order;
# its seed is printed at the top, `make test PYTEST_ARGS=--randomly-seed=N` replays it.
# Exit status 5 (no tests collected) fails like any other.
PYTEST_ARGS ?=
PYTEST = $(VENV)/bin/pytest -n $(WORKERS) --dist loadgroup --durations=10 $(PYTEST_ARGS)

.PHONY: run serve demo test test-fast lint format deps-system venv venv-test clean

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The collectors are their own distribution (collectors/pyproject.toml), pinned by the server's.
# A stamp newer than both pyproject files means they are installed: `make run` starts at once,
# and installs again only after a dependency changed.
INSTALLED = $(VENV)/.installed
$(INSTALLED): $(VENV)/bin/activate pyproject.toml collectors/pyproject.toml
	$(PIP) install -q -e ./collectors -e .
	touch $@

venv: $(INSTALLED)

run: venv
	$(VENV)/bin/mismatch migrate --db $(DB)
	$(VENV)/bin/mismatch serve --db $(DB) --port $(PORT)

# Runs the tiny RL demo (all scenarios) against the server started by `make run`.
demo: venv
	$(PIP) install -q -e ./collectors -e '.[demo]' '$(TORCH)'
	$(VENV)/bin/mismatch demo --url http://127.0.0.1:$(PORT)

deps-system:
	bash scripts/install-system-deps.sh

venv-test: $(VENV)/bin/activate
	bash scripts/install-test-venv.sh $(VENV)

test: deps-system venv-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PYTEST)

# The inner loop: without the real-vLLM, browser and PostgreSQL tiers, and with a quarter of
# each property's examples (tests/budget.py).
test-fast: venv-test
	TESTS_BUDGET=0.25 $(PYTEST) -m "not vllm and not browser and not postgres"

lint:
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts
