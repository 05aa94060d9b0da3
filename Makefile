# The two commands a new machine needs: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SLURM_STATE ?= /tmp/hpclaunch-slurm
# Debian packages, checked one by one on every run (never a stamp: a stamp in a clone or a used machine
# says nothing about this one). Open MPI and its headers (mpi.h for `make horovod`); libpmix-dev for
# Slurm's mpi/pmix plugin, which dlopens the unversioned libpmix.so that only the -dev package ships;
# cmake and g++ for the Horovod build; Chromium to check the HTML report renders; podman and runc for
# the container test (runc: crun refuses this machine kind's hybrid cgroups, docs/containers.md);
# chromium-driver for the dashboard's browser test (selenium drives Debian's chromium through it, never a
# downloaded driver); prometheus for promtool and the server the monitor's exporter tests scrape with.
# The Slurm packages are installed by tests/cluster/slurm-up.sh itself.
APT_PACKAGES := openmpi-bin libopenmpi-dev libpmix-dev cmake gcc g++ chromium chromium-driver podman runc prometheus

.PHONY: all venv deps check-deps test test-fast demo golden cluster-up cluster-down bench bench-quick bench-deps clean horovod tf-venv

all: venv

# What the venv must give, checked on every run (no stamp file: a stamp says nothing about what is in the
# venv now): these modules import, the hpclaunch command is there, and the install (pip's hpclaunch
# dist-info) is newer than setup.cfg and pyproject.toml. Otherwise it installs (tests/test_deps.py).
VENV_IMPORTS := torch, hpclaunch, mpi4py, pyarrow, pytest, sklearn, lightning, ray, pydantic, jax, deepspeed, onnx, onnxscript, onnxruntime, prometheus_client, aiohttp, aiohttp_sse, plotly, selenium, orjson, kubernetes_validate, apprise, aiosmtpd, optuna

venv:
	@test -x $(PY) || python3 -m venv $(VENV)
	@dist=$$(ls -d $(VENV)/lib/python3*/site-packages/hpclaunch-*.dist-info 2>/dev/null | head -n 1); \
	if (cd / && $(abspath $(PY)) -c 'import $(VENV_IMPORTS)') 2>/dev/null && [ -x $(VENV)/bin/hpclaunch ] \
	   && [ -n "$$dist" ] && [ -z "$$(find setup.cfg pyproject.toml -newer "$$dist")" ]; then exit 0; fi; \
	echo "venv: installing into $(VENV)"; \
	set -e; \
	$(PY) -m pip install -q --upgrade pip setuptools wheel; \
	: "Pinned: this version's CPU wheel is on disk; an unpinned torch downloads GBs of CUDA builds."; \
	$(PY) -m pip install -q torch==2.13.0; \
	$(PY) -m pip install -q -e '.[train,mpi,report,test,frameworks,export,monitor,dashboard,alerts,tune,recovery]'

# Installs whichever of APT_PACKAGES dpkg does not report as installed, then checks them all again.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@$(MAKE) --no-print-directory check-deps

# Fails, naming them, when any of APT_PACKAGES is missing (tests/test_deps.py runs it).
check-deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "missing Debian packages:" $$missing >&2; exit 1; fi

# Starts the throwaway Slurm cluster (root); prints the line to point Slurm commands at it.
cluster-up:
	@bash tests/cluster/slurm-up.sh -d $(SLURM_STATE)

cluster-down:
	@bash tests/cluster/slurm-down.sh -d $(SLURM_STATE)

# TensorFlow in a venv of its own (~30 s from cached wheels): a user's program environment need not
# hold hpclaunch, and TensorFlow's pins (protobuf, numpy) stay out of the main venv. Checked by import.
TF_VENV := .venv-tf
tf-venv:
	@if (cd / && $(abspath $(TF_VENV))/bin/python -c 'import tensorflow') 2>/dev/null; then exit 0; fi; \
	echo "tf-venv: installing tensorflow-cpu into $(TF_VENV)"; \
	set -e; python3 -m venv $(TF_VENV); $(TF_VENV)/bin/pip install -q tensorflow-cpu

# Installs everything, starts the test cluster (the tests' session fixture reuses it) and runs the tests:
# the cluster tests and the others as two pytest runs side by side (tests/run-suite.sh).
test: venv deps tf-venv
	bash tests/cluster/slurm-up.sh -d $(SLURM_STATE) >/dev/null
	bash tests/run-suite.sh $(PY)

# The tests that need neither root nor the cluster.
test-fast: venv
	$(PY) -m pytest -q -m "not cluster and not root"

# Trains the reference job on 2 local ranks through the local backend, then reports on it.
demo: venv
	@bash examples/demo.sh $(PY)

# Horovod 0.28.1 (patched for C++17) for the horovod launcher: ~5 min on 2 cores, then cached in ~/.cache/hpclaunch/wheels.
horovod: venv deps
	bash tests/horovod/build-horovod.sh $(VENV)

# Re-create the golden scripts after an intended rendering change; review the diff like code.
golden: venv
	UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/test_render_golden.py

# Every bench end to end (bench/run_all.py): each installs what it compares against in a venv of its
# own, writes its section into docs/bench/, then bench/assemble.py makes docs/benchmarks.md from them.
# The submit bench needs the test cluster. `make bench-quick`: small sizes, docs/ left alone.
bench: venv deps cluster-up bench-deps
	SLURM_CONF=$(SLURM_STATE)/slurm.conf $(PY) bench/run_all.py

bench-quick: venv deps cluster-up bench-deps
	SLURM_CONF=$(SLURM_STATE)/slurm.conf $(PY) bench/run_all.py --quick

# The report bench's peers, checked by import (no stamp).
bench-deps: venv
	@(cd / && $(abspath $(PY)) -c 'import pandas, polars') 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'

clean:
	rm -rf build dist *.egg-info .pytest_cache runs artifacts
