# Every dependency comes from uv.lock (exact versions with hashes); `make venv` installs exactly
# it with uv (`uv sync --frozen`), and the checkout itself in editable mode, so an activated
# environment runs `python -m orchestrator` from any folder. uv is bootstrapped from PyPI into
# the environment at the version the lock pins (the lock holds uv as a dev dependency).
# CI caches the environment outside the clone (VENV=...): the stamp names the lock's hash and
# the checkout, so a changed lock or another clone syncs again (seconds when nothing moved).
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
UV_VERSION := $(shell awk '/^name = "uv"$$/ {getline; gsub(/[^0-9.]/, ""); print}' uv.lock)
LOCK_HASH := $(shell cat uv.lock | sha256sum | cut -c1-12)
SYNC_KEY := $(shell echo '$(LOCK_HASH) $(CURDIR)' | sha256sum | cut -c1-16)
STAMP := $(VENV)/.synced-$(SYNC_KEY)
export UV_PROJECT_ENVIRONMENT := $(abspath $(VENV))
export PYTHONPATH := $(CURDIR)
export ORCHESTRATOR_HOME ?= $(HOME)/.orchestrator

.PHONY: venv demo test test-slow test-scale bench lint lock upgrade lock-check

venv: $(STAMP)

$(STAMP): uv.lock
	test -x $(PY) || python3 -m venv $(VENV)
	test -x $(UV) && $(UV) --version | grep -qx 'uv $(UV_VERSION)' || \
	  $(PY) -m pip install -q --disable-pip-version-check 'uv==$(UV_VERSION)'
	$(UV) sync --frozen --all-extras
	rm -f $(VENV)/.synced-* $(VENV)/.deps-*
	touch $@

# Fails when pyproject.toml's dependencies and uv.lock disagree (CI runs it first).
lock-check: $(STAMP)
	$(UV) lock --check

# After editing pyproject.toml's dependencies: resolve them again, keeping every other pin.
lock: $(STAMP)
	$(UV) lock
	$(MAKE) venv

# Every dependency to the newest version pyproject.toml allows, then both test tiers. uv prints
# what moved ("Updated moto v5.2.5 -> v5.2.6"); commit uv.lock once both tiers pass.
upgrade: $(STAMP)
	$(UV) lock --upgrade
	$(MAKE) venv
	$(MAKE) test
	$(MAKE) test-slow

demo: $(STAMP)
	$(PY) -m orchestrator validate configs/local-smoke.yaml
	$(PY) -m orchestrator submit configs/local-smoke.yaml --wait --rerun
	$(PY) -m orchestrator results --columns job,instance,samples_per_s,compile_s,cache_hit_ratio,status

# The fast tier: every test but those marked slow, on TEST_WORKERS pytest-xdist processes
# (they mostly wait on subprocesses, so more workers than cores overlap), each worker with its
# own ORCHESTRATOR_HOME below the one given (tests/conftest.py).
TEST_WORKERS ?= 4
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

# The slow tier: real (tiny) training, torch.compile, the wheel, and the full fuzzing profile.
# One process: these tests are CPU-bound and their waits are sized for a machine of their own.
test-slow: $(STAMP)
	HYPOTHESIS_PROFILE=full $(PY) -m pytest -q -m "(slow or fuzz) and not scale"

# Tests at an issue's full size (a 10,000-trial cloud schedule deployed to moto): by hand only.
test-scale: $(STAMP)
	$(PY) -m pytest -q -m scale --timeout=0

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
