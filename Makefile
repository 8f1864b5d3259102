# Two commands set everything up on a fresh machine:
#   make run    create .venv if missing or stale, install pinned deps, run the default study (CPU)
#   make test   same setup, then the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The venv is stale when any dependency file changes: the stamp's name is their hash.
DEPS := requirements.txt constraints.txt pyproject.toml
STAMP := $(VENV)/.stamp-$(shell cat $(DEPS) | sha256sum | cut -c1-16)
PYTEST_ARGS ?=
RUN_ARGS ?=

.PHONY: venv run test parity bench bench-quick bench-publish vectors vectors-check gpu-check clean

venv: $(STAMP)

$(STAMP): $(DEPS)
	@if [ ! -x $(PY) ] || ! $(PY) -c 'import sys' 2>/dev/null; then rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); fi
	rm -f $(VENV)/.stamp-*
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -c 'import torch; assert torch.__version__.startswith("2.13.0"), torch.__version__'
	touch $@

run: venv
	$(PY) -m shared.cli list $(RUN_ARGS)

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

parity: venv
	$(PY) -m shared.cli parity

vectors: venv
	$(PY) -m shared.vectors

vectors-check: venv
	$(PY) -m shared.vectors --check

gpu-check: venv
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) reports .asv .pytest_cache .hypothesis
