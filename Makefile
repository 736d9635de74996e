# miles on Kubernetes — the two commands in README.md are `make demo` and `make test`.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

ROOT  := $(CURDIR)
TOOLS := $(ROOT)/.tools
VENV  := $(ROOT)/.venv
CHART := charts/miles
export PATH := $(TOOLS)/bin:$(VENV)/bin:$(PATH)
# Keep Python output unbuffered so long steps show progress as they happen.
export PYTHONUNBUFFERED := 1

PYTEST_ARGS ?=
# pytest-xdist workers for `make pytest`: each e2e worker runs a testbed of its own (tests/e2e/conftest.py),
# so more workers than cores only add testbeds competing for them.
PYTEST_WORKERS ?= 2

.PHONY: help tools generate verify-generated lint lint-chart lint-python lint-docker unittest pytest test test-timing demo scenarios cluster-up cluster-down bench package clean-tools lock

help: ## list targets
	@grep -E '^[a-z][-a-z]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

tools: ## build every pinned tool into .tools/, the Python envs and the testbed images (idempotent; the targets that need them run it)
	@ci/install-tools.sh all

generate: tools ## rewrite every generated file: values schema, chart README, helm-unittest snapshots, README scenario table
	ci/generate.sh

verify-generated: tools ## fail naming each generated file that is stale (part of lint)
	ci/generate.sh --check

lint: tools verify-generated lint-chart lint-python lint-docker ## generated files current, ct lint (yamllint + schema), ruff, mypy, hadolint

lint-chart:
	ci/ct-lint.sh

lint-python:
	ruff check hooks/ tests/ ci/ images/ testbed/ charts/miles/files/
	ruff format --check hooks/ tests/ ci/ images/ testbed/ charts/miles/files/
	mypy --config-file hooks/pyproject.toml hooks/src
	lint-imports hooks/pyproject.toml
	mypy --config-file testbed/pyproject.toml testbed/src testbed/tests
	lint-imports testbed/pyproject.toml
	mypy --config-file images/reward-service/pyproject.toml images/reward-service/src images/reward-service/tests
	mypy --strict --ignore-missing-imports tests/bench/reward
	mypy --strict --ignore-missing-imports ci/miles-contract tests/contract charts/miles/files

lint-docker:
	ci/hadolint.sh

unittest: tools ## helm-unittest suites under Helm 3 and Helm 4
	ci/helm-unittest.sh helm3 $(CHART)
	ci/helm-unittest.sh helm4 $(CHART)

pytest: tools ## every pytest tier (hooks, chart rendering/validation, Ray, reward service, e2e)
	pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

test: tools lint unittest pytest ## all tests; fails if any tier fails or runs no tests

test-timing: tools ## the timing-sensitive tiers RUNS times (default 10) in random order, quiet then under stress-ng
	RUNS=$(or $(RUNS),10) ci/timing-stress.sh

demo: ## the main job: builds what it runs, local cluster up, colocated scenario installed with the real hooks, final state
	testbed/demo.sh

scenarios: tools ## render every values/ scenario with Helm 3 and Helm 4, validate, print topology
	ci/scenarios.sh

cluster-up: ## local testbed up (NODES=128 for 128 simulated GPU nodes); builds what a testbed runs
	ci/install-tools.sh demo
	testbed/up.sh

cluster-down: ## stop the local testbed: no process or port left behind
	testbed/down.sh

bench: tools ## benchmarks (testbed, reward service); results land in tests/bench/results/
	ci/bench.sh

package: tools ## helm package + push/pull round trip through an OCI registry on loopback (INSTALL=1: into the testbed)
	ci/package.sh

lock: ## re-resolve ci/requirements.lock and the images' hashed locks (images/*requirements.lock) in scratch venvs
	ci/lock-requirements.sh

clean-tools: ## remove .tools/ and .venv/
	rm -rf $(TOOLS) $(VENV)
