# The two commands a new machine needs: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_STAMP := .apt-installed
SLURM_STATE ?= /tmp/hpclaunch-slurm
# Debian packages: Open MPI for the mpi launcher, Chromium to check the HTML report renders.
# The Slurm packages are installed by tests/cluster/slurm-up.sh itself.
APT_PACKAGES := openmpi-bin libopenmpi-dev chromium

.PHONY: all venv deps test test-fast demo golden cluster-up cluster-down bench clean horovod

all: venv

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	# Pinned: this version's CPU wheel is on disk; an unpinned torch downloads GBs of CUDA builds.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[train,mpi,report,test]'
	touch $@

deps: $(APT_STAMP)

$(APT_STAMP):
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	touch $@

# Starts the throwaway Slurm cluster (root); prints the line to point Slurm commands at it.
cluster-up:
	@bash tests/cluster/slurm-up.sh -d $(SLURM_STATE)

cluster-down:
	@bash tests/cluster/slurm-down.sh -d $(SLURM_STATE)

# Installs everything, starts the test cluster (the tests' session fixture reuses it) and runs the tests.
test: venv deps
	bash tests/cluster/slurm-up.sh -d $(SLURM_STATE) >/dev/null
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -rs

# The tests that need neither root nor the cluster.
test-fast: venv
	$(PY) -m pytest -q -m "not cluster"

# Trains the reference job on 2 local ranks through the local backend, then reports on it.
demo: venv
	@bash examples/demo.sh $(PY)

# Horovod 0.28.1 (patched for C++17) for the horovod launcher: ~5 min on 2 cores, then cached in ~/.cache/hpclaunch/wheels.
horovod: venv deps
	bash tests/horovod/build-horovod.sh $(VENV)

# Re-create the golden scripts after an intended rendering change; review the diff like code.
golden: venv
	UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/test_render_golden.py

bench: venv
	$(PY) bench/startup/bench_startup.py

clean:
	rm -rf build dist *.egg-info .pytest_cache runs artifacts
