# hami — developer entry points. `make demo` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The Python hami runs under: PYTHON when given, else the first of python3.11, python3.12, python3.13, python3 and
# pyenv's 3.11 to 3.13 that is one of the supported 3.11 to 3.13 and can make a virtualenv (make test also runs the
# unit tests under the newest, below).
SUPPORTED_PYTHONS := python3.11 python3.12 python3.13 python3 \
	$(wildcard $(HOME)/.pyenv/versions/3.11*/bin/python3 $(HOME)/.pyenv/versions/3.12*/bin/python3 \
	$(HOME)/.pyenv/versions/3.13*/bin/python3)
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in $(SUPPORTED_PYTHONS); do $$p -c 'import sys, venv, ensurepip; \
	sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' >/dev/null 2>&1 && { echo $$p; break; }; done)
endif
NEED_PYTHON = @[ -n "$(PYTHON)" ] && command -v $(PYTHON) >/dev/null || { echo "error: no Python 3.11 to 3.13 with \
	venv found (tried $(SUPPORTED_PYTHONS)); hami needs Python 3.11 to 3.13: install one (with its venv module), \
	or name it: make PYTHON=/path/to/python3.12 ..." >&2; exit 1; }
# The newest Python hami supports (pyproject's requires-python: 3.11 to 3.13): `make test` also runs the unit
# tests under it, in a virtualenv of its own. The first interpreter that runs wins: python3.13 on PATH, then
# pyenv's. NEWEST_PYTHON=skip leaves that run out (say so when you report a result).
NEWEST_PYTHON ?= $(shell for p in python3.13 $(HOME)/.pyenv/versions/3.13*/bin/python3.13 \
	/usr/local/bin/python3.13 /usr/bin/python3.13; do $$p -c 'import ssl' >/dev/null 2>&1 && { echo $$p; break; }; \
	done)
VENV313 := .venv-py313
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Lint only the source folders that exist (bench/ arrives with the benchmarks).
LINT_PATHS := $(wildcard src tests bench scripts)
# gRPC stubs (the kubelet device-plugin API, ...): every folder of src/hami holding .proto files gets a git-ignored
# _generated package beside them, made by the build backend's own code (src/hami_build.py), so a wheel (pip install
# .) and make setup make the same stubs
PROTOS := $(shell find src/hami -name '*.proto' -not -path '*/_generated/*')
GEN    := $(foreach p,$(PROTOS),$(dir $(p))_generated/$(basename $(notdir $(p)))_pb2.py)
# make demo: a virtualenv of its own with only what `hami simulate --demo` imports, at the pinned versions (no dev
# tools, no gRPC, no server); tests/unit/test_make_demo.py checks the list against what the demo imports
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed-stamp
DEMO_DEPS := msgspec pydantic pydantic-settings PyYAML typer

.PHONY: help setup stubs test-deps demo docs test test-fast test-e2e test-matrix test-newest-python lint fmt typecheck imports testenv helm image chart-schema bench bench-quick bench-profile bench-scale clean

help:
	@echo "make demo          run hami's main job on a built-in example cluster (no cluster needed; any Python"
	@echo "                   3.11 to 3.13, a virtualenv of its own with only what the demo imports: $(DEMO_VENV))"
	@echo "make test          set up everything (virtualenv, Debian test packages, control plane, helm) and run"
	@echo "                   lint, type checks, import contracts, the docs build and all tests"
	@echo "make docs          build the documentation site (docs/, mkdocs.yml) into build/site; a broken link or"
	@echo "                   anchor, or a page left out of the nav, fails it (make test runs it)"
	@echo "make test-fast     lint, type checks and the tests that need no control plane and no helm"
	@echo "make test-e2e      only the end-to-end tests (builds the control plane and helm first if needed)"
	@echo "make test-newest-python  the unit tests under Python 3.13 (make test runs them too)"
	@echo "make test-matrix   the end-to-end and chart tests on each Kubernetes release it knows (v1.36.3, v1.37.2;"
	@echo "                   v1.38.0-beta.0 cannot be built yet), building each if missing; long, not in CI"
	@echo "                   (MATRIX_VERSIONS=v1.37.2)"
	@echo "make setup         create $(VENV) and install hami with its dev tools (and the gRPC stubs)"
	@echo "make stubs         generate the gRPC stubs of every .proto under src/hami (the wheel build does too)"
	@echo "make test-deps     install the Debian packages tests run (chromium, prometheus, containerd, runc,"
	@echo "                   CNI plugins, iptables, conntrack) when missing"
	@echo "make testenv       build the local Kubernetes control plane and the real test node's kubelet,"
	@echo "                   kube-proxy and kube-controller-manager used by end-to-end tests"
	@echo "make helm          build helm into the same cache (make test and make test-e2e run it)"
	@echo "make image         build hami's container image without Docker: build/images/hami.oci.tar"
	@echo "                   (import with: ctr -n k8s.io images import build/images/hami.oci.tar)"
	@echo "make chart-schema  write charts/hami/values.schema.json from values.yaml (scripts/values-schema)"
	@echo "make lint          ruff lint and format check"
	@echo "make fmt           format the code and apply ruff's safe fixes"
	@echo "make typecheck     mypy --strict"
	@echo "make imports       import-linter's layer contracts"
	@echo "make bench         run the benchmarks (needs the control plane)"
	@echo "make bench-quick   the small benchmark scenarios only"
	@echo "make bench-profile profile the decision path"
	@echo "make bench-scale   hami end to end at 5,000 nodes and 50,000 pods beside bare kube-scheduler (not in"
	@echo "                   CI; BENCH_SCALE_ARGS='--nodes 500 --pods 5000 --bursts 1000' runs it smaller)"
	@echo "make clean         remove the virtualenv, generated code and caches"

$(STAMP): pyproject.toml constraints.txt
	$(NEED_PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

$(GEN) &: $(PROTOS) $(STAMP)
	$(BIN)/python src/hami_build.py

stubs: $(GEN)

setup: $(STAMP) $(GEN)

$(DEMO_STAMP): constraints.txt
	$(NEED_PYTHON)
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt $(DEMO_DEPS)
	@touch $@

# The source tree itself, on the path: nothing to build for the demo
demo: $(DEMO_STAMP)
	@PYTHONPATH=src $(DEMO_VENV)/bin/python -c 'from hami.cli import main; main()' simulate --demo

lint: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

fmt: setup
	$(BIN)/ruff format $(LINT_PATHS)
	$(BIN)/ruff check --fix $(LINT_PATHS)

typecheck: setup
	$(BIN)/mypy

imports: setup
	$(BIN)/lint-imports

# The documentation site, strictly: mkdocs.yml turns every link, anchor and nav check into a warning and --strict
# makes a warning fail the build. NO_MKDOCS_2_WARNING silences Material's banner about MkDocs 2.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# etcd, kube-apiserver and kube-scheduler built from the Go module proxy into ~/.cache/hami/k8s-v1.Y.Z/, then
# kubelet, kube-proxy and kube-controller-manager (the real test node) into ~/.cache/hami/k8s-node-v1.Y.Z/;
# a no-op when those directories are complete. The script needs only the standard library and Go.
# chromium renders the HTML report in tests; prometheus evaluates the Grafana dashboard's queries
test-deps:
	scripts/test-deps

testenv:
	$(NEED_PYTHON)
	$(PYTHON) scripts/k8s-testenv build

helm:
	$(PYTHON) scripts/k8s-testenv helm

# The chart's default image (hami:0.1.0) as an OCI archive, from Debian packages and the pinned wheels; needs
# no Docker (mmdebstrap is installed with apt when missing). The Dockerfile builds the same image with Docker.
# The chart's values.schema.json, made from values.yaml (every value commented), the script's rules and HAMi's
# values file; tests/chart/test_schema.py fails while the committed file is out of date.
chart-schema: setup
	$(BIN)/python scripts/values-schema

image:
	$(NEED_PYTHON)
	nice -n 10 $(PYTHON) scripts/build-image hami

# The Python 3.13 unit run goes alongside the main suite (whose end-to-end tests mostly wait on the control
# plane), its output printed after; the target fails when either fails.
test: setup test-deps testenv helm lint typecheck imports docs
	@log=$$(mktemp); \
	$(MAKE) --no-print-directory test-newest-python >"$$log" 2>&1 & newest=$$!; \
	rc=0; $(BIN)/pytest --durations=20 || rc=$$?; \
	nrc=0; wait $$newest || nrc=$$?; \
	echo "=== make test-newest-python (ran alongside the suite above): exit $$nrc ==="; cat "$$log"; rm -f "$$log"; \
	exit $$(( rc || nrc ))

# The tests that need no control plane and no helm, under the newest supported Python (the oldest, 3.11, runs
# everything above), in a virtualenv of its own set up from the same pins (again when they change).
test-newest-python: $(GEN)
	@py="$(NEWEST_PYTHON)"; stamp=$(VENV313)/.installed-stamp; \
	if [ "$$py" = skip ]; then echo "NEWEST_PYTHON=skip: the unit tests did not run under Python 3.13"; exit 0; fi; \
	if [ -z "$$py" ]; then echo "error: python3.13 not found; hami supports Python 3.11 to 3.13 and make test" \
		"checks both ends: install it (pyenv install 3.13) or run with NEWEST_PYTHON=skip" >&2; exit 1; fi; \
	if [ ! "$$stamp" -nt pyproject.toml ] || [ ! "$$stamp" -nt constraints.txt ]; then \
		echo "setting up $(VENV313) with $$py"; "$$py" -m venv $(VENV313); \
		$(VENV313)/bin/pip install -q --upgrade pip; \
		$(VENV313)/bin/pip install -q -c constraints.txt -e '.[dev]'; touch "$$stamp"; fi; \
	$(VENV313)/bin/python --version; \
	$(VENV313)/bin/pytest -q -p no:cacheprovider -m "not e2e and not helm and not wheel"

test-fast: setup test-deps lint typecheck imports docs
	$(BIN)/pytest -m "not e2e and not helm and not wheel"

test-e2e: setup test-deps testenv helm
	$(BIN)/pytest -m e2e

# The end-to-end suite (real-node tests included) and the chart tests once per tested Kubernetes release; prints the
# table CONTRIBUTING.md shows and writes it to build/test-matrix.md. Not in CI: it builds releases and takes long.
MATRIX_VERSIONS ?=
test-matrix: setup test-deps helm
	$(PYTHON) scripts/test-matrix $(if $(MATRIX_VERSIONS),--versions $(MATRIX_VERSIONS))

bench: setup testenv helm
	PYTHONPATH=. $(BIN)/python -m bench.run

bench-quick: setup
	PYTHONPATH=. $(BIN)/python -m bench.run --quick --iterations 300

# hami at Kubernetes' scale beside bare kube-scheduler (not in CI; minutes to an hour): BENCH_SCALE_ARGS, e.g.
# "--nodes 500 --pods 5000 --bursts 1000", runs it smaller (python -m bench.scale --help)
bench-scale: setup testenv helm
	PYTHONPATH=. $(BIN)/python -m bench.scale $(BENCH_SCALE_ARGS)

bench-profile: setup
	PYTHONPATH=. $(BIN)/python -m bench.run profile

clean:
	rm -rf $(VENV) $(VENV313) $(DEMO_VENV) $(dir $(GEN)) src/hami/_build.py .mypy_cache .ruff_cache .pytest_cache \
		.hypothesis
