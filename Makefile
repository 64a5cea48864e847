# The virtual environment holds dependencies only; the project runs from this checkout
# (PYTHONPATH), so one cached environment can serve several clones (CI sets VENV).
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
STAMP := $(VENV)/.deps-$(DEPS_HASH)
export PYTHONPATH := $(CURDIR)
export ORCHESTRATOR_HOME ?= $(HOME)/.orchestrator

.PHONY: venv demo test bench lint

venv: $(STAMP)

# Recreated only when missing, or when pyproject.toml's dependencies changed.
$(STAMP):
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
	  deps = p['dependencies'] + [d for e in ('train', 'dev') for d in p['optional-dependencies'][e]]; \
	  open('$(VENV)/requirements.txt', 'w').write('\n'.join(deps) + '\n')"
	$(PY) -m pip install -q -r $(VENV)/requirements.txt
	rm -f $(VENV)/.deps-*
	touch $@

demo: $(STAMP)
	$(PY) -m orchestrator validate configs/local-smoke.yaml
	$(PY) -m orchestrator submit configs/local-smoke.yaml --wait --rerun
	$(PY) -m orchestrator results --format table

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/cli_latency.py
	$(PY) bench/entrypoint_throughput.py
	$(PY) bench/compile_cache.py
	$(PY) bench/cache_transfer.py
	$(PY) bench/results_collect.py
	$(PY) bench/sweep_submit.py

lint: $(STAMP)
	$(PY) -m ruff check orchestrator entrypoints tests bench
	$(VENV)/bin/cfn-lint infra/stack.yaml
