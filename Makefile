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
# both cores (pytest-xdist), a test file per worker (its module fixtures built once), handed out
# in tests/conftest.py's order (longest first; xdist would otherwise reorder them); the 25
# slowest tests listed at the end, so a contributor sees where the time goes
PYTEST_ARGS ?= -n auto --dist loadfile --no-loadscope-reorder --durations=25
RUN_ARGS ?=
# PyTorch's own CPU wheel index, for a machine whose pip would take the CUDA build of torch==2.13.0
# (several GB): make run TORCH_INDEX=https://download.pytorch.org/whl/cpu.  Empty: pip's own choice.
TORCH_INDEX ?=
TORCH_VERSION := $(shell sed -n 's/^torch==//p' requirements.txt)
ASV := $(VENV)/bin/asv
RANGE ?= HEAD~5..HEAD
BENCH_ARGS ?=
# asv's name for this machine (default: the host name); one history holds several machines
MACHINE ?=
ASV_MACHINE := $(if $(MACHINE),--machine $(MACHINE))

.PHONY: venv run test ladder parity parity-quick parity-matrix parity-matrix-time peer-full bench bench-quick bench-history bench-history-sample bench-merge bench-compare gate-power reproducibility mutation bench-publish profile-torch profile-jax vectors vectors-check gpu-check docs docs-check clean

venv: $(STAMP)

$(STAMP): $(DEPS)
	@if [ ! -x $(PY) ] || ! $(PY) -c 'import sys' 2>/dev/null; then rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); fi
	rm -f $(VENV)/.stamp-*
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install --quiet --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION))
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -c 'import torch; assert torch.__version__.startswith("2.13.0"), torch.__version__'
	touch $@

run: venv
	$(PY) -m rnnbench.cli compare $(RUN_ARGS)
	@echo "rnnbench is $(VENV)/bin/rnnbench (or: source $(VENV)/bin/activate): rnnbench list, rnnbench compare --help"

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

ladder: venv
	$(PY) -m rnnbench.cli ladder --cell $(or $(CELL),lstm) $(RUN_ARGS)

# asv: record this commit in the current env, then publish (publishes even if a benchmark failed; keeps the exit code)
bench: venv
	$(ASV) machine --yes $(ASV_MACHINE)
	$(ASV) run --python=same --set-commit-hash $$(git rev-parse HEAD) $(ASV_MACHINE) $(BENCH_ARGS); s=$$?; $(ASV) publish && $(PY) -m tools.asv_offline .asv/html && exit $$s

bench-quick: venv
	$(ASV) check --python=same
	$(ASV) machine --yes
	RNNBENCH_PROFILE=quick $(ASV) run --python=same --quick --dry-run --show-stderr --bench 'RNN.time_forward'

# asv builds its own virtualenv per commit (pinned CPU deps) and back-fills history
bench-history: venv
	$(ASV) machine --yes
	RNNBENCH_ASV_PARAMS="$$(PYTHONPATH=. $(PY) benchmarks/rnn.py --params)" $(ASV) run $(RANGE) $(BENCH_ARGS); s=$$?; \
	  $(ASV) publish && $(PY) -m tools.asv_offline .asv/html && exit $$s

# Several machines, one history: each ran `make bench MACHINE=name`; FROM names the copies of their
# .asv/results folders (docs/asv.md "Several machines in one history")
bench-merge: venv
	@[ -n "$(FROM)" ] || { echo 'make bench-merge FROM="dir/.asv/results other/.asv/results"'; exit 2; }
	$(PY) -m tools.asv_merge .asv/results $(FROM)
	$(ASV) publish
	$(PY) -m tools.asv_offline .asv/html

# the regression gate: asv continuous BASE..HEAD; non-zero exit when something got slower (tools/bench_compare.sh)
bench-compare: venv
	bash tools/bench_compare.sh $(BASE) $(or $(HEAD),HEAD)

# The gate's power on a planted 10% slowdown and its false-alarm rate (about an hour; run it alone).
gate-power: venv
	$(PY) -m tools.gate_power $(GATE_POWER_ARGS)

# The study's answer three times in fresh processes: how far each ratio moves (every CPU rung: about
# half an hour a run on two cores; alone).  REPRO_ARGS go to rnnbench compare, e.g. "--threads 1".
reproducibility: venv
	$(PY) -m tools.reproducibility --runs $(or $(RUNS),3) --out $(or $(OUT),reports/reproducibility) \
		$(if $(REPRO_ARGS),-- $(REPRO_ARGS))

# Mutation testing (mutmut, pinned, in a venv of its own that sees the project's packages through a
# .pth file) of the kernels, the reference and the statistics, each module against its targeted
# tests; the torch and shared modules take minutes each (the JAX ones hang under mutmut: docs/parity.md); run it alone.
mutation: venv
	@[ -x .venv-mutation/bin/mutmut ] || { rm -rf .venv-mutation && $(PYTHON) -m venv .venv-mutation && .venv-mutation/bin/pip install --quiet -r requirements-mutation.txt -c constraints.txt; }
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
	  > $$(.venv-mutation/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rnnbench_project_venv.pth
	$(PY) -m tools.mutation $(if $(MODULES),--modules $(MODULES)) $(MUTATION_ARGS)

# The project's own history: the gate's benchmarks on COMMITS commits sampled from it, ROUNDS processes
# each (about an hour; alone), results committed under docs/records/asv/results, verdicts in
# docs/records/asv_history.json (tools/asv_history.py).
bench-history-sample: venv
	$(PY) -m tools.asv_history --commits $(or $(COMMITS),21) --rounds $(or $(ROUNDS),2)

# Publish this machine's results with the committed history (docs/records/asv/results: every machine's
# that was collected there; local files win), offline-ready.
bench-publish: venv
	mkdir -p .asv/results && cp -rn docs/records/asv/results/. .asv/results/
	$(ASV) publish
	$(PY) -m tools.asv_offline .asv/html

profile-torch: venv
	$(PY) -m tools.profile_torch time --clock process --threads 1

# XLA per-op times of jax.scan and jax.bptt at S1 forward+backward (jax.profiler trace)
profile-jax: venv
	$(PY) -m tools.profile_jax

parity: venv
	$(PY) -m rnnbench.cli parity

parity-quick: venv
	$(PY) -m rnnbench.cli parity --quick

# the full matrix as pytest cells (every rung, vector and dtype), for a scheduled job;
# IMPLS=jax.scan,torch.compile runs the full matrix of those rungs only (a job per rung)
parity-matrix: venv
	RNNBENCH_FULL_MATRIX=$(or $(IMPLS),1) $(PY) -m pytest tests/cross/test_parity_matrix.py $(PYTEST_ARGS)

# how long that takes here, one implementation at a time, into docs/records/parity_matrix.json
# (hours on two cores: run it alone; IMPLS=... MATRIX_TIME_ARGS=--merge measures some and keeps the rest)
parity-matrix-time: venv
	$(PY) -m tools.parity_matrix_time $(if $(IMPLS),--impls $(IMPLS)) $(MATRIX_TIME_ARGS)

# every peer-suite sample on every backend (make test runs a covering subset), for a scheduled job
peer-full: venv
	RNNBENCH_PEER_FULL=1 $(PY) -m pytest tests/peer $(PYTEST_ARGS)

vectors: venv
	$(PY) -m rnnbench.vectors

vectors-check: venv
	$(PY) -m rnnbench.vectors --check

gpu-check: venv
	bash tools/gpu_check.sh

# Every measured figure of README.md and docs/*.md is rendered from committed records
# (docs/records/full-2026-12-03/results.jsonl, JSON files): <!--fig KEY-->TEXT<!--/fig--> inline, or
# <!--begin KEY--> ... <!--end KEY--> for a table (key grammar: tools/docs_figures/__init__.py).
# To add one, write the marker with any TEXT and run `make docs`: it rewrites every figure from
# the records in place. `make docs-check` changes nothing and fails on a figure that disagrees with
# its record, has no record, or is written by hand (tests/tools/test_docs_figures.py checks the same).
docs: venv
	$(PY) -m tools.docs_figures

docs-check: venv
	$(PY) -m tools.docs_figures --check

clean:
	rm -rf $(VENV) reports .asv .pytest_cache .hypothesis
