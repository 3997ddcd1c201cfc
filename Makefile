# Two commands for users (see README): `make lab` and `make test`.
# Everything is incremental: stamps in .venv record what is already done.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DEPS   := $(VENV)/.deps-installed
BUILT  := $(VENV)/.package-built
SOURCES := setup.py pyproject.toml customops/headers.py $(shell find csrc -type f)

# Browser tests drive Debian's Chromium (never a downloaded browser).
CHROMIUM := /usr/bin/chromium
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# JupyterLab refuses to run as root unless told (containers often are root).
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: setup lab test cpp headers ort-venvs torch-envs torch-cluster notebooks bench profile sanitize mutants clean

setup: $(BUILT)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEPS): requirements.txt | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

# Rebuilds the PyTorch extension and the ORT library when csrc/ changes.
$(BUILT): $(DEPS) $(SOURCES)
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $@

# The real torch_cluster (seed 002's package) for notebook 04, which otherwise
# runs its grid section on notebooks/torch_cluster_standin.py.  PyPI has only
# its source: pip compiles it against the venv's torch (12+ minutes on 2 cores),
# CPU kernels only.  "There" means it imports at this version against this
# torch: nothing happens then; after a torch change it no longer loads, and it
# is rebuilt (--no-cache-dir: pip's cached wheel was built against the old torch).
TORCH_CLUSTER := 1.6.3
TORCH_CLUSTER_THERE := import torch_cluster as t; assert t.__version__ == '$(TORCH_CLUSTER)', t.__version__

torch-cluster: $(DEPS)
	@if ! $(PY) -c "$(TORCH_CLUSTER_THERE)" 2>/dev/null; then \
	  echo "building torch-cluster $(TORCH_CLUSTER) from source against the venv's torch (12+ minutes)"; \
	  FORCE_ONLY_CPU=1 $(PY) -m pip install --quiet --no-build-isolation --no-deps --no-cache-dir \
	    --force-reinstall torch-cluster==$(TORCH_CLUSTER) && $(PY) -c "$(TORCH_CLUSTER_THERE)"; \
	fi

# Everything a notebook needs to run top to bottom, built before JupyterLab
# starts (tests/test_lab.py checks this list against what the notebooks use):
# the package and its ORT library (setup), the C++ program 08 runs (cpp), the
# ORT headers 07 compiles against (headers), the older onnxruntime 02 loads
# (ort-venvs), the other torch 20 runs its wheel in (torch-envs), and Chromium
# for the static Netron pictures.
NOTEBOOK_NEEDS := setup cpp headers ort-venvs torch-envs $(CHROMIUM)

lab: $(NOTEBOOK_NEEDS)
	$(VENV)/bin/jupyter lab --no-browser $(LAB_ROOT) --notebook-dir=notebooks

# Fetched once into ~/.cache/customops (or ORT_INCLUDE_DIR); instant afterwards.
headers: $(DEPS)
	$(PY) -m customops.headers > /dev/null

# Other onnxruntime releases the notebooks run models on, one small venv each
# cached in ~/.cache/customops/venvs (python -m customops.envs; about 15-30 s
# each the first time, instant afterwards).
NOTEBOOK_ORT_RELEASES := 1.24.4 1.25.0 1.31.1

ort-venvs: $(DEPS)
	for version in $(NOTEBOOK_ORT_RELEASES); do \
	  $(PY) -m customops.envs onnxruntime==$$version > /dev/null || exit 1; \
	done

# Other torch releases notebook 19 installs its wheel beside, each with the
# onnxruntime named here, cached like the onnxruntime venvs (torch 2.13.0+cpu,
# the CPU-only wheel, with onnxruntime 1.24.4: 33 s and 1.1 GB the first time).
NOTEBOOK_TORCH_RELEASES := 2.13.0+cpu
TORCH_ENV_ORT := 1.24.4

torch-envs: $(DEPS)
	for version in $(NOTEBOOK_TORCH_RELEASES); do \
	  $(PY) -m customops.envs torch==$$version onnxruntime==$(TORCH_ENV_ORT) > /dev/null || exit 1; \
	done

# The notebooks run as tests, so they need what they need in JupyterLab; the
# protobuf compiler and library are for tests/test_protobuf_twice.py (notebook 23).
PROTOC := /usr/bin/protoc

test: $(NOTEBOOK_NEEDS) $(PROTOC)
	$(PY) -m pytest

# The C++ application examples/cpp -> build/cpp/run_model, linked against the
# libonnxruntime inside the installed onnxruntime wheel, with the ORT headers
# python -m customops.headers finds (ORT_INCLUDE_DIR, or fetched once).  Needs cmake.
CPP_BUILD   := build/cpp
ORT_LIBRARY  = $(shell $(PY) -c "import onnxruntime, pathlib; \
  print(*pathlib.Path(onnxruntime.__file__).parent.glob('capi/libonnxruntime.so*'))")

cpp: $(CPP_BUILD)/run_model

$(CPP_BUILD)/run_model: $(DEPS) customops/headers.py $(wildcard examples/cpp/*) $(shell find csrc -type f)
	include_dir=$$($(PY) -m customops.headers) && \
	  cmake -S examples/cpp -B $(CPP_BUILD) -DORT_INCLUDE_DIR="$$include_dir" \
	    -DORT_LIBRARY="$(ORT_LIBRARY)" > /dev/null
	cmake --build $(CPP_BUILD) -j 2
	touch $@

$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) apt-get install -y --no-install-recommends chromium

$(PROTOC):
	$(SUDO) apt-get update
	$(SUDO) apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev

# Speed of the kernels against their references, side by side (see bench/).
bench: setup cpp $(CHROMIUM)  # the notebooks it times need both
	$(PY) bench/run.py $(BENCH_ARGS)

# Where a deform_conv2d training step's time goes, phase by phase, for each
# vector code this CPU runs, at 1 and 2 threads (bench/step_profile.py).
profile: setup
	$(PY) bench/step_profile.py $(PROFILE_ARGS)

# Kernels and bindings rebuilt with AddressSanitizer + UBSan, tests run under them.
sanitize: $(DEPS)
	bash tools/sanitize.sh

# Planted bugs (mutants/*.patch), each in a copy under build/mutants/: its
# tests must fail.  About 75 s of build per C++ mutant on 2 cores: not in CI.
mutants: $(DEPS) headers
	$(PY) tools/mutants.py $(MUTANTS)

# Re-executes every notebook in place, to refresh the committed outputs.
notebooks: setup
	cd notebooks && for nb in [0-9][0-9]_*.ipynb; do \
	  ../$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.record_timing=False "$$nb" || exit 1; \
	done

clean:
	rm -rf build customops/*.so customops/__pycache__ $(BUILT)
