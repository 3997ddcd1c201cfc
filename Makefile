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

.PHONY: setup lab test notebooks bench sanitize clean

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

lab: setup $(CHROMIUM)
	$(VENV)/bin/jupyter lab --no-browser $(LAB_ROOT) --notebook-dir=notebooks

test: setup $(CHROMIUM)
	$(PY) -m pytest

$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) apt-get install -y --no-install-recommends chromium

# Speed of the kernels against their references, side by side (see bench/).
bench: setup
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
