# The README's two commands, and the pieces behind them:
#
#   make course     install everything into .venv and open the course in JupyterLab
#   make test       install everything and run all tests (unit + browser, then notebooks)
#   make test-timed the same from a fresh clone in a temporary folder, timed (benchmarks/test_time.sh)
#
#   make unit       unit tests only (tests/, without tests/browser/)
#   make notebooks  run every notebook under nbval (stored outputs must match), the Chinese ones too
#   make notebooks-other-cpu  the notebooks that train, under nbval with other CPU kernels
#   make browser    the real-browser test (tests/browser/), installs chromium if missing
#   make bench      python -m benchmarks
#   make gallery    every figure and a few states of every widget on one page, linted (build/gallery/)
#   make notebook-times  time each notebook headless and the total (NB="05 09" for some)
#   make mutants    mutation test of the exercise checks; writes benchmarks/MUTANTS.md
#   make far-sizes  count how far each check tiles each axis; writes tfmlib/data/far_sizes.json
#   make sweep      train notebook 10's run, its lab and b1/b2's model on 24 seeds x 2 kernel settings:
#                   tfmlib/data/sweep.json, the numbers the claims rest on (hours on 2 cores; not in make test)
#   make execute    re-execute every notebook in place to refresh its stored outputs
#   make i18n       update the Chinese catalogues from the English, regenerate notebooks/zh (tools/i18n.py)
#   make teacher    install nbgrader and the course into .venv-teacher (requirements-teacher.txt),
#                   and Debian's bubblewrap, the sandbox autograding runs each submission in
#   make nbgrader-course  write the nbgrader course of the ten notebooks to nbgrader-course/
#   make site       the course as a static website in build/site/, the Chinese edition in build/site/zh/ (Sphinx + MyST-NB, .venv-site)
#   make site-preview  make site, then serve it on http://127.0.0.1:8000
#   make hub        install JupyterHub, its proxy, culler and nbgitpuller into .venv-hub (hub/requirements.txt)
#   make hub-test   a class of 10 on a real JupyterHub on 127.0.0.1, nbgrader round trip included (hub/tests/)
#   make hub-load   the load test: 5, 10 and 20 students at once; writes hub/LOAD.md
#   make hub-values-check CHART=jupyterhub-4.3.3.tgz  check hub/values.yaml against that Zero to
#                   JupyterHub chart's own values.schema.yaml (from `helm pull`; hub/check_values.py)
#   make clean      remove caches and build artefacts (keeps .venv)
#   make distclean  clean, and remove .venv, .venv-teacher, .venv-hub and .venv-site too
#
# Nothing outside .venv is used, except Debian's chromium for the browser test and Debian's
# bubblewrap (`bwrap`) for the grading sandbox (teacher/warm_kernels.py).
#
# torch: on Linux, PyPI's wheel bundles CUDA (several GB), so the installs take PyTorch's CPU
# build from its CPU wheel index where that answers (tools/pip_install.py decides and says why).
# With a GPU, install PyPI's CUDA build instead, on a fresh .venv: make course TORCH=pypi

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# --- Python environment ------------------------------------------------------
# Interpreter used only to create the venv: python3.11 if there is one, else python3.
BASE_PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
PY := $(BIN)/python
# Touched after a successful install: pip only runs again when requirements.txt
# or pyproject.toml is newer than it (or the venv was deleted).
STAMP := $(VENV)/.requirements.stamp
# Which torch build pip gets: auto (the CPU build where PyTorch's CPU index answers, else the
# plain pin), cpu, or pypi (the plain pin: PyPI's CUDA build on Linux). See tools/pip_install.py.
TORCH ?= auto
PIP_INSTALL = $(call stage,installs) $(1)/python tools/pip_install.py --torch $(TORCH) $(2)
# `make test-timed` (benchmarks/test_time.sh) sets STAGE_TIME=1: each stage's command then prints
# "STAGE name: wall W s; user U s; sys S s", its processes and their children counted.
stage = $(if $(STAGE_TIME),/usr/bin/time -f 'STAGE $(1): wall %e s; user %U s; sys %S s')
# The teachers' environment (make teacher): nbgrader and the course, apart from .venv.
TEACHER_VENV ?= .venv-teacher
TEACHER_BIN := $(abspath $(TEACHER_VENV))/bin
TEACHER_STAMP := $(TEACHER_VENV)/.requirements.stamp
# The class's JupyterHub (make hub): the hub, and each student's server environment.
HUB_VENV ?= .venv-hub
HUB_BIN := $(abspath $(HUB_VENV))/bin
HUB_STAMP := $(HUB_VENV)/.requirements.stamp
# The course's website (make site): Sphinx and MyST-NB, apart from .venv (requirements-site.txt).
SITE_VENV ?= .venv-site
SITE_BIN := $(abspath $(SITE_VENV))/bin
SITE_STAMP := $(SITE_VENV)/.requirements.stamp
# The site's sources gathered at their repository paths (site/conf.py says why), and the site.
SITE_SRC ?= build/site-src
SITE_OUT ?= build/site
# The Chinese edition's sources: README.zh.md, notebooks/zh, the glossary; built into $(SITE_OUT)/zh.
SITE_SRC_ZH ?= $(SITE_SRC)-zh
# Sphinx's cache, beside the site rather than in it (it would be published with it).
SITE_DOCTREES ?= $(SITE_OUT)-doctrees

# --- Tests -------------------------------------------------------------------
# Tests run with PATH starting at the venv and with Jupyter, IPython and
# matplotlib configuration in a private folder, so that neither a user's own
# config (e.g. a matplotlibrc changing the figure size) nor a kernel installed
# elsewhere can change what the notebooks print. Python may write its bytecode caches
# (.pyc) into the venvs: installs skip them (tools/pip_install.py, --no-compile) so that the first
# import writes them; with PYTHONDONTWRITEBYTECODE set, as on some CI images, none is ever
# written and every process of the run, each kernel and grader, compiles torch's modules again
# (about 6 s of CPU per process with a kernel: benchmarks/TEST_TIME.md).
TEST_HOME := $(CURDIR)/.cache/test-home
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE PATH="$(BIN):$$PATH" \
	MPLCONFIGDIR="$(TEST_HOME)/matplotlib" IPYTHONDIR="$(TEST_HOME)/ipython" \
	JUPYTER_CONFIG_DIR="$(TEST_HOME)/jupyter-config" JUPYTER_DATA_DIR="$(TEST_HOME)/jupyter-data" \
	TFMLIB_PROGRESS="$(TEST_HOME)/progress.json" TFMLIB_TEACHER_VENV="$(abspath $(TEACHER_VENV))"
PYTEST := $(TEST_ENV) $(PY) -m pytest

# nbval in strict mode: every stored output of every code cell is compared; and every figure and
# widget frame a notebook draws goes through the figure lint (tests/nbval_figure_lint.py).
NBVAL_FLAGS := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \
	-p tests.nbval_figure_lint
# The unit tests in one pytest-xdist worker per core (at most 4: each imports torch and
# JupyterLab's tests start servers of their own). loadgroup: the browser test and the nbgrader
# round trip each stay on one worker (tests/conftest.py), so their servers start once.
UNIT_XDIST := -n auto --maxprocesses 4 --dist loadgroup
# The notebooks two at a time, one kernel each. loadscope keeps all cells of one
# notebook on one worker (plain -n 2 scatters them and fails).
NBVAL_XDIST := -n 2 --dist loadscope
# The slowest tests of each pytest call, printed at its end.
DURATIONS := --durations=25
NOTEBOOKS_DIR := notebooks
# The notebooks that print trained results, run a second time with the plain C++ kernels and
# MKL's reproducible mode, a stand-in for another CPU: nbval must still pass, since they compare
# no trained digit (tests/test_claims.py checks the claims over the seed sweep, make sweep).
# Under nbval a notebook's trained run must fall within the sweep's range, widened by a margin
# (TFMLIB_SWEEP_STRICT, tfmlib/claims.py: show_run), or the cell fails: CI sees drift, while a
# learner's session only prints that a run fell outside.
SWEEP_STRICT := TFMLIB_SWEEP_STRICT=1
OTHER_CPU := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE
# The English ones alone: the Chinese edition's copies hold the same code cells and outputs, byte for
# byte (tests/test_i18n.py), and pass nbval natively in the stage before; with other kernels they
# would train the same runs again and could fail only where the English ones do.
TRAINED_NOTEBOOKS := $(NOTEBOOKS_DIR)/10_training.ipynb $(NOTEBOOKS_DIR)/bonus
# make test's nbval stage: the English notebooks and one Chinese copy. The other copies would repeat
# the English runs: each holds its notebook's code cells and outputs, byte for byte, and a kernel in
# notebooks/zh computes what one in notebooks/ does (tests/test_i18n.py checks both); 01's copy shows
# that a kernel started there runs the course. `make notebooks` runs every copy.
TEST_NOTEBOOKS := $(wildcard $(NOTEBOOKS_DIR)/[0-9][0-9]_*.ipynb) $(NOTEBOOKS_DIR)/bonus \
	$(NOTEBOOKS_DIR)/zh/01_shapes.ipynb

# make test trains each run once: the browser test executes the notebooks that train before nbval
# does, and nbval's execution loads those runs (tfmlib/_runcache.py: same code, arguments, random
# state, kernels and threads; the other kernels' run trains afresh). Emptied at the start, so that
# every run of make test trains afresh; never set for the course or the benchmarks.
RUN_CACHE := $(TEST_HOME)/runs
TEST_RUN_CACHE := TFMLIB_RUN_CACHE="$(RUN_CACHE)"

CHROMIUM := /usr/bin/chromium
BWRAP := /usr/bin/bwrap

.PHONY: help install course test test-timed unit notebooks notebooks-other-cpu browser bench sweep gallery notebook-times mutants far-sizes execute i18n chromium bubblewrap teacher nbgrader-course hub hub-test hub-load hub-values-check site site-install site-preview clean distclean

help:
	@grep -E '^#   make ' $(firstword $(MAKEFILE_LIST)) | sed 's/^#   //'

# --- Install -----------------------------------------------------------------
$(PY):
	@if [ -z "$(BASE_PYTHON)" ]; then echo "error: no python3.11 or python3 on PATH" >&2; exit 1; fi
	@$(BASE_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "error: $(BASE_PYTHON) is Python $$($(BASE_PYTHON) -c 'import platform; print(platform.python_version())');" \
	       "the pinned packages need Python >= 3.11. Install Python 3.11 or run: make BASE_PYTHON=/path/to/python3.11 ..." >&2; \
	  exit 1; }
	$(BASE_PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt pyproject.toml | $(PY)
	$(call PIP_INSTALL,$(BIN),requirements.txt)
	touch $@

install: $(STAMP)

# The teachers' environment, apart from the learners' .venv: nbgrader brings a database layer,
# the classic notebook server and JupyterLab extensions that learners never need.
# After $(PY), which checks that BASE_PYTHON is Python >= 3.11.
$(TEACHER_BIN)/python: | $(PY)
	$(BASE_PYTHON) -m venv $(TEACHER_VENV)

$(TEACHER_STAMP): requirements-teacher.txt pyproject.toml | $(TEACHER_BIN)/python
	$(call PIP_INSTALL,$(TEACHER_BIN),requirements-teacher.txt)
	touch $@

teacher: $(TEACHER_STAMP) bubblewrap

# From the repository root: the `-e .` that hub/requirements.txt pulls in (through
# requirements-teacher.txt) is relative to the current directory.
$(HUB_BIN)/python: | $(PY)
	$(BASE_PYTHON) -m venv $(HUB_VENV)

$(HUB_STAMP): hub/requirements.txt requirements-teacher.txt pyproject.toml | $(HUB_BIN)/python
	$(call stage,hub installs) $(HUB_BIN)/python -m pip install -r hub/requirements.txt
	touch $@

hub: $(HUB_STAMP)

$(SITE_BIN)/python: | $(PY)
	$(BASE_PYTHON) -m venv $(SITE_VENV)

$(SITE_STAMP): requirements-site.txt | $(SITE_BIN)/python
	$(call PIP_INSTALL,$(SITE_BIN),requirements-site.txt)
	touch $@

site-install: $(SITE_STAMP)

# --- The README's two commands ----------------------------------------------
# JupyterLab refuses to start as root unless told to (containers, cloud VMs).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

course: install
	$(BIN)/jupyter lab $(ALLOW_ROOT) $(NOTEBOOKS_DIR)/01_shapes.ipynb

# One pytest call selects tests/ through testpaths (pyproject.toml): the unit
# tests and tests/browser/. The notebooks need --nbval, so they are a second call.
test: install teacher site-install chromium
	rm -rf $(RUN_CACHE)
	$(call stage,unit + browser) env $(TEST_RUN_CACHE) $(PYTEST) $(UNIT_XDIST) $(DURATIONS)
	$(call stage,notebooks) env $(TEST_RUN_CACHE) $(SWEEP_STRICT) $(PYTEST) $(NBVAL_FLAGS) $(NBVAL_XDIST) $(DURATIONS) $(TEST_NOTEBOOKS)
	$(call stage,other CPU kernels) env $(OTHER_CPU) $(SWEEP_STRICT) $(PYTEST) $(NBVAL_FLAGS) $(NBVAL_XDIST) $(TRAINED_NOTEBOOKS)

# `make test` from a fresh clone of this checkout's HEAD in a temporary folder, as CI runs it:
# prints the total, each phase and the slowest tests, and records them in benchmarks/TEST_TIME.md.
test-timed:
	bash benchmarks/test_time.sh

# --- Pieces ------------------------------------------------------------------
unit: install teacher
	$(PYTEST) $(UNIT_XDIST) $(DURATIONS) --ignore=tests/browser

notebooks: install
	env $(SWEEP_STRICT) $(PYTEST) $(NBVAL_FLAGS) $(NBVAL_XDIST) $(NOTEBOOKS_DIR)/

notebooks-other-cpu: install
	env $(OTHER_CPU) $(SWEEP_STRICT) $(PYTEST) $(NBVAL_FLAGS) $(NBVAL_XDIST) $(TRAINED_NOTEBOOKS)

browser: install chromium
	$(PYTEST) tests/browser

bench: install
	$(TEST_ENV) $(PY) -m benchmarks

# Every static figure and a few states of every widget of the notebooks, linted, on one page:
# build/gallery/index.html (tools/gallery.py). Fails when the figure lint finds a problem.
gallery: install
	$(TEST_ENV) $(PY) tools/gallery.py

# The notebooks' part of the benchmark alone, with each notebook's five slowest cells.
NB ?=
notebook-times: install
	$(TEST_ENV) $(PY) -m benchmarks.course --cells 5 $(NB)

mutants: install
	$(TEST_ENV) $(PY) -W ignore tests/mutants.py

# After a change to an exercise's reference, cases or contract (tests/test_far_sizes.py says when).
far-sizes: install
	$(TEST_ENV) $(PY) tools/far_sizes.py --write

# The seed sweep (tools/sweep.py): 2 processes, each run a fresh one on one thread. Resumes from
# build/sweep/runs.jsonl; delete that file to start afresh.
sweep: install
	$(TEST_ENV) $(PY) tools/sweep.py --workers 2

# Same environment as the tests, so that the refreshed outputs are the ones
# nbval will compare against. The Chinese notebooks are never executed: they are regenerated,
# with the English notebooks' fresh outputs.
execute: install
	$(TEST_ENV) $(BIN)/jupyter execute --inplace $(NOTEBOOKS_DIR)/[0-9][0-9]_*.ipynb \
	  $(wildcard $(NOTEBOOKS_DIR)/bonus/*.ipynb)
	$(PY) tools/i18n.py generate

# The Chinese edition (i18n/README.md): the catalogues follow the English notebooks (new, fuzzy
# and obsolete entries), then every notebook whose catalogue is complete is regenerated.
i18n: install
	$(PY) tools/i18n.py extract
	$(PY) tools/i18n.py generate

# The nbgrader course of all ten notebooks (teacher/make_nbgrader_course.py); nbgrader's own
# commands run in that folder, with .venv-teacher/bin first on PATH (README, "For teachers").
nbgrader-course: teacher
	$(TEACHER_BIN)/python teacher/make_nbgrader_course.py

# The hub tests start JupyterHub from .venv-hub and grade with .venv-teacher; their own
# folders are under /tmp (other Unix accounts must reach the exchange test's), removed at the end.
HUB_TEST_ENV := env TFMLIB_TEACHER_VENV="$(abspath $(TEACHER_VENV))" HUB_VENV="$(abspath $(HUB_VENV))"

hub-test: hub teacher
	$(call stage,hub) $(HUB_TEST_ENV) $(HUB_BIN)/python -m pytest hub/tests -p no:cacheprovider --durations=5

hub-load: hub
	$(HUB_TEST_ENV) $(HUB_BIN)/python hub/tests/load.py 5 10 20

# hub/values.yaml against the chart a teacher installs: CHART is its .tgz or folder, as
# `helm pull jupyterhub/jupyterhub --version 4.3.3` saves it (not fetched here: no network).
# Without CHART the command says so. jsonschema and PyYAML are pinned in requirements-teacher.txt.
CHART ?=
hub-values-check: teacher
	$(TEACHER_BIN)/python hub/check_values.py "$(CHART)" hub/values.yaml

# The course as a website: nothing is executed, nothing is fetched, and a warning is an error.
# The stored notebooks, README.md and docs/ are copied to their repository paths in $(SITE_SRC)
# (with their times, so that Sphinx rebuilds only what changed); site/ holds the configuration.
# tests/site/ builds it once per test run with this same command and checks it in Chromium.
# The Chinese edition is a second build, into $(SITE_OUT)/zh (site/conf.py: SITE_LANGUAGE); each
# edition's sources hold only its own pages (links between them: site/conf.py, other_edition_page).
site: site-install
	rm -rf $(SITE_SRC) $(SITE_SRC_ZH)
	mkdir -p $(SITE_SRC) $(SITE_SRC_ZH)/notebooks $(SITE_SRC_ZH)/docs
	cp -p README.md site/index.md site/api.md $(SITE_SRC)/
	cp -pR notebooks docs $(SITE_SRC)/
	rm -rf $(SITE_SRC)/notebooks/zh $(SITE_SRC)/docs/glossary-zh.md
	$(SITE_BIN)/python -m sphinx -b html -W --keep-going -q -c site -d $(SITE_DOCTREES) $(SITE_SRC) $(SITE_OUT)
	cp -p README.zh.md site/zh/index.md $(SITE_SRC_ZH)/
	cp -pR notebooks/zh $(SITE_SRC_ZH)/notebooks/
	cp -p docs/glossary-zh.md $(SITE_SRC_ZH)/docs/
	env SITE_LANGUAGE=zh_CN $(SITE_BIN)/python -m sphinx -b html -W --keep-going -q -c site \
	  -d $(SITE_DOCTREES)-zh $(SITE_SRC_ZH) $(SITE_OUT)/zh
	@echo "The site is in $(SITE_OUT)/ (index.html), the Chinese edition in $(SITE_OUT)/zh/; to read it: make site-preview"

site-preview: site
	$(SITE_BIN)/python -m http.server --bind 127.0.0.1 --directory $(SITE_OUT) 8000

# Debian's chromium for the browser test (never `playwright install`, which
# downloads a browser build of its own).
chromium:
	@if [ -x $(CHROMIUM) ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then \
	  echo "error: $(CHROMIUM) is missing and there is no apt-get here." \
	       "Install Chromium so that $(CHROMIUM) exists, then rerun." >&2; exit 1; \
	fi; \
	if [ "$$(id -u)" -eq 0 ]; then SUDO=""; \
	elif command -v sudo >/dev/null; then SUDO="sudo"; \
	else echo "error: $(CHROMIUM) is missing. As root, run:" \
	          "apt-get update && apt-get install -y chromium" >&2; exit 1; \
	fi; \
	echo "Installing Debian's chromium (for the browser test)..."; \
	$$SUDO apt-get update; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	test -x $(CHROMIUM)

# Debian's bubblewrap: `nbgrader autograde` runs each submission's kernel in a bwrap sandbox
# (teacher/warm_kernels.py; docs/teachers_guide.md, section 5).
bubblewrap:
	@if [ -x $(BWRAP) ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then \
	  echo "error: $(BWRAP) is missing and there is no apt-get here." \
	       "Install bubblewrap (the package is called bubblewrap on most Linux systems), then rerun." >&2; exit 1; \
	fi; \
	if [ "$$(id -u)" -eq 0 ]; then SUDO=""; \
	elif command -v sudo >/dev/null; then SUDO="sudo"; \
	else echo "error: $(BWRAP) is missing. As root, run:" \
	          "apt-get update && apt-get install -y bubblewrap" >&2; exit 1; \
	fi; \
	echo "Installing Debian's bubblewrap (the grading sandbox)..."; \
	$$SUDO apt-get update; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y bubblewrap; \
	test -x $(BWRAP)

# --- Cleaning ----------------------------------------------------------------
clean:
	rm -rf .cache .pytest_cache build dist *.egg-info tests/browser/screenshots
	find . \( -path ./$(VENV) -o -path ./$(TEACHER_VENV) -o -path ./$(HUB_VENV) -o -path ./$(SITE_VENV) \) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(TEACHER_VENV) $(HUB_VENV) $(SITE_VENV)
