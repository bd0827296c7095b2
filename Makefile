# dpbook: two commands do all the set-up on a machine that has python3 (>= 3.11: requirements.txt's pins; the package
# itself supports 3.10, which `make oldest` tests), make and git.
#   make test   create .venv if missing, install, lint (ruff), run the whole test suite
#   make test-quick  the inner loop: lint and the library's and unit tests (no notebook, no documented command,
#               nothing marked slow)
#   make book   create .venv if missing, install, execute the notebooks (cached), build the HTML book
#   make serve  serve the built book at http://localhost:8000 (its search shows excerpts when served)
#   make check  everything CI checks: the test suite, the book build, then every page of the book in headless
#               Chromium (`make browser`; needs Debian's chromium: apt-get install chromium)
# Override the interpreter with `make PYTHON=python3.12 test`.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.dpbook-installed
PYTEST_ARGS ?=

# `make PYTHON=...` asks for an interpreter: a .venv made by another Python would be used instead, silently, so
# make stops and says how to go on (`make clean` removes .venv; the next make builds it with PYTHON).
ifeq ($(origin PYTHON),command line)
ifneq ($(wildcard $(PY)),)
ifneq ($(filter-out clean clean-book oldest oldest-install oldest-test,$(or $(MAKECMDGOALS),test)),)
VENV_PYTHON  := $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
ASKED_PYTHON := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
ifneq ($(VENV_PYTHON),$(ASKED_PYTHON))
$(error dpbook: PYTHON=$(PYTHON) is $(if $(ASKED_PYTHON),Python $(ASKED_PYTHON),not found on PATH), but $(VENV) was \
made with Python $(VENV_PYTHON) and would be used instead. Run 'make clean' (it removes $(VENV)) and rerun \
'make PYTHON=$(PYTHON) $(MAKECMDGOALS)', or drop PYTHON= to keep using $(VENV))
endif
endif
endif
endif

.PHONY: test test-quick book serve browser check install oldest oldest-install oldest-test bench digits mnist5k dry-run gpu-check clean clean-book

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || { \
	  if command -v $(PYTHON) >/dev/null 2>&1; then found="$$($(PYTHON) --version 2>&1)"; else found="not found on PATH"; fi; \
	  echo "dpbook: the development environment (requirements.txt) needs Python >= 3.11, but '$(PYTHON)' is $$found."; \
	  echo "        Install Python 3.11 or newer and rerun with it, e.g.  make PYTHON=python3.12 $(MAKECMDGOALS)"; \
	  exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  echo "dpbook: could not create the virtual environment $(VENV) with '$(PYTHON) -m venv'."; \
	  echo "        On Debian/Ubuntu install the venv module (apt-get install python3-venv), then rerun make."; \
	  rm -rf $(VENV); exit 1; }
	@echo "dpbook: installing requirements.txt into $(VENV) (first time: about 4-5 minutes and 6 GB)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt && \
	 $(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . || { \
	  echo "dpbook: the install failed (see pip's message above). Check the network access to the package index"; \
	  echo "        and the free disk space (about 6 GB are needed), then rerun make; 'make clean' starts over."; \
	  exit 1; }
	@touch $@

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

test-quick: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -m "not notebook and not documented and not slow" $(PYTEST_ARGS)

# The chapters execute one per core at a time (tools/book_cache.py --execute: Jupyter Book executes one at a time),
# each kernel on one intra-op thread: their models are small, and on a busy machine torch's default of one thread
# per core made a digits run 23x slower (0.88 s -> 20.1 s beside four busy loops on 2 cores).
book: $(STAMP)
	$(PY) tools/book_cache.py
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) tools/book_cache.py --execute
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	@# Sphinx copies book/_static only when a page is out of date: an edit of the CSS alone reaches the book this way
	cp book/_static/* _build/html/_static/
	@$(PY) tools/book_cache.py --times
	@echo "dpbook: the book is at $(CURDIR)/_build/html/index.html"

# The built book served at http://localhost:8000 (Ctrl-C stops it): as the published book is, so that its search shows
# excerpts, which a page opened as a file cannot read.
serve:
	$(PY) -m http.server --directory _build/html 8000

# Every page of the built book opened in headless Chromium at 1440 and 390 px, network off; screenshots in
# _build/screenshots/<width>/.
browser: book
	$(PY) -m pytest tests/browser $(PYTEST_ARGS)

# The whole check, stage by stage, with the time of each stage.
check: $(STAMP)
	@set -e; for stage in test book browser; do \
	  start=$$(date +%s); $(MAKE) --no-print-directory $$stage; \
	  echo "check: make $$stage took $$(( $$(date +%s) - start )) s"; \
	done

# The oldest supported environment: a fresh venv at Python 3.10 with the lower bounds of pyproject.toml
# (constraints-oldest.txt), installed as Colab installs dpbook (pip install -e ".[text]", no requirements.txt) plus
# the test tools, then the test suite in it: the library, its command lines and the reproduction machinery (sweeps on
# submitit, the dry run's BERT, the audits, the accountants against dp-accounting), about 3 minutes and 5.5 GB of
# install from the package index (PyPI: the old torch and its CUDA libraries), then the suite's time. CI runs the
# install beside `make install`. Two parts of the suite run in `make test` only, at the pinned versions: the notebooks
# (marker `notebook`: each chapter executed with papermill; their opening cells, the library code they call and
# their parameter checks run here too) and the README's and the book's commands (marker `documented`).
OLDEST_PYTHON ?= python3.10
OLDEST := .venv-oldest
oldest: oldest-install
	@$(MAKE) --no-print-directory oldest-test

# The two halves of `make oldest`: `.ci/run` runs the install (mostly a download) beside `make install`.
oldest-install:
	@$(OLDEST_PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null || { \
	  echo "dpbook: 'make oldest' needs Python 3.10, the oldest dpbook supports, as OLDEST_PYTHON ('$(OLDEST_PYTHON)' is not):"; \
	  echo "        e.g.  make oldest OLDEST_PYTHON=/usr/bin/python3.10  (pyenv: OLDEST_PYTHON=\$$(pyenv root)/versions/3.10.13/bin/python)"; \
	  exit 1; }
	rm -rf $(OLDEST)
	$(OLDEST_PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints-oldest.txt -e ".[text,test]"

oldest-test:
	@test -x $(OLDEST)/bin/python || { echo "dpbook: no $(OLDEST): run 'make oldest' (or 'make oldest-install' first)"; exit 1; }
	$(OLDEST)/bin/python -m pytest -m "not documented and not notebook" $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m dpbook.repro.bench

# The digits benchmark (every method, epsilon 1-8, 5 seeds, three tuning protocols): trains only what is missing.
digits: $(STAMP)
	$(PY) -m dpbook.repro.sweep digits --jobs 2

# The MNIST-5k benchmark (the papers' MNIST CNN on 5,000 real MNIST digits, every method): trains only what is missing.
mnist5k: $(STAMP)
	$(PY) -m dpbook.repro.sweep mnist5k --jobs 2

# Every cell of the three reproduction chapters at full shape, a few steps each (resumable): what each table costs.
dry-run: $(STAMP)
	$(PY) -m dpbook.repro.dry_run --device $(or $(DEVICE),cpu)

# On a machine with CUDA: the private-step benchmark and one cell of each paper for 200 steps (minutes on a GPU).
GPU_CHECK ?= data/results/gpu_check/analysis/$(shell hostname).json
gpu-check: $(STAMP)
	$(PY) -m dpbook.repro.gpu_check --output $(GPU_CHECK)

clean-book:
	rm -rf _build

clean: clean-book
	rm -rf $(VENV) $(OLDEST) tests/_executed .pytest_cache
