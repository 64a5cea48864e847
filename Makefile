# The virtual environment holds dependencies only; the project runs from this checkout
# (PYTHONPATH), so one cached environment can serve several clones (CI sets VENV).
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
STAMP := $(VENV)/.deps-$(DEPS_HASH)
export PYTHONPATH := $(CURDIR)
export ORCHESTRATOR_HOME ?= $(HOME)/.orchestrator

.PHONY: venv demo test test-slow bench lint

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

# The fast tier: every test but those marked slow, on TEST_WORKERS pytest-xdist processes
# (they mostly wait on subprocesses, so more workers than cores overlap), each worker with its
# own ORCHESTRATOR_HOME below the one given (tests/conftest.py).
TEST_WORKERS ?= 4
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

# The slow tier: real (tiny) training, torch.compile, the wheel, and the full fuzzing profile.
# One process: these tests are CPU-bound and their waits are sized for a machine of their own.
test-slow: $(STAMP)
	HYPOTHESIS_PROFILE=full $(PY) -m pytest -q -m "slow or fuzz"

bench: $(STAMP)
	$(PY) bench/cli_latency.py
	$(PY) bench/entrypoint_throughput.py
	$(PY) bench/compile_cache.py
	$(PY) bench/cache_transfer.py
	$(PY) bench/results_collect.py
	$(PY) bench/sweep_submit.py
	$(PY) bench/sweep_plan.py

lint: $(STAMP)
	$(PY) -m ruff check orchestrator entrypoints tests bench
	$(VENV)/bin/lint-imports pyproject.toml --no-cache
	$(VENV)/bin/cfn-lint infra/stack.yaml
