# Two commands for users (see README): `make lab` and `make test`.
# Everything is incremental: stamps in .venv record what is already done.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DEPS   := $(VENV)/.deps-installed
BUILT  := $(VENV)/.package-built
SOURCES := setup.py pyproject.toml tools/ort_headers.py $(shell find csrc -type f)

# Browser tests drive Debian's Chromium (never a downloaded browser).
CHROMIUM := /usr/bin/chromium
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# JupyterLab refuses to run as root unless told (containers often are root).
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: setup lab test cpp headers ort-venvs notebooks bench sanitize clean

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

# Everything a notebook needs to run top to bottom, built before JupyterLab
# starts (tests/test_lab.py checks this list against what the notebooks use):
# the package and its ORT library (setup), the C++ program 08 runs (cpp), the
# ORT headers 07 compiles against (headers), the older onnxruntime 02 loads
# (ort-venvs), and Chromium for the static Netron pictures.
NOTEBOOK_NEEDS := setup cpp headers ort-venvs $(CHROMIUM)

lab: $(NOTEBOOK_NEEDS)
	$(VENV)/bin/jupyter lab --no-browser $(LAB_ROOT) --notebook-dir=notebooks

# Fetched once into ~/.cache/customops (or ORT_INCLUDE_DIR); instant afterwards.
headers: $(DEPS)
	$(PY) tools/ort_headers.py > /dev/null

# Other onnxruntime releases the notebooks run models on, one small venv each
# in build/ort-venvs/ (tools/ort_venv.py; about 30 s each the first time).
NOTEBOOK_ORT_RELEASES := 1.24.4

ort-venvs: $(DEPS)
	for version in $(NOTEBOOK_ORT_RELEASES); do \
	  $(PY) tools/ort_venv.py $$version > /dev/null || exit 1; \
	done

test: setup cpp $(CHROMIUM)
	$(PY) -m pytest

# The C++ application examples/cpp -> build/cpp/run_model, linked against the
# libonnxruntime inside the installed onnxruntime wheel, with the ORT headers
# tools/ort_headers.py finds (ORT_INCLUDE_DIR, or fetched once).  Needs cmake.
CPP_BUILD   := build/cpp
ORT_LIBRARY  = $(shell $(PY) -c "import onnxruntime, pathlib; \
  print(*pathlib.Path(onnxruntime.__file__).parent.glob('capi/libonnxruntime.so*'))")

cpp: $(CPP_BUILD)/run_model

$(CPP_BUILD)/run_model: $(DEPS) tools/ort_headers.py $(wildcard examples/cpp/*) $(shell find csrc -type f)
	include_dir=$$($(PY) tools/ort_headers.py) && \
	  cmake -S examples/cpp -B $(CPP_BUILD) -DORT_INCLUDE_DIR="$$include_dir" \
	    -DORT_LIBRARY="$(ORT_LIBRARY)" > /dev/null
	cmake --build $(CPP_BUILD) -j 2
	touch $@

$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) apt-get install -y --no-install-recommends chromium

# Speed of the kernels against their references, side by side (see bench/).
bench: setup cpp $(CHROMIUM)  # the notebooks it times need both
	$(PY) bench/run.py $(BENCH_ARGS)

# Kernels and bindings rebuilt with AddressSanitizer + UBSan, tests run under them.
sanitize: $(DEPS)
	bash tools/sanitize.sh

# Re-executes every notebook in place, to refresh the committed outputs.
notebooks: setup
	cd notebooks && for nb in [0-9][0-9]_*.ipynb; do \
	  ../$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.record_timing=False "$$nb" || exit 1; \
	done

clean:
	rm -rf build customops/*.so customops/__pycache__ $(BUILT)
