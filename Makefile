# All set-up happens here: a fresh machine needs only Python 3.11, pip and Debian's packages.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONSTRAINTS := constraints/constraints-3.11.txt
STAMP := $(VENV)/.installed
export AIRFLOW_K8S_RETRY_REPO := $(CURDIR)

.PHONY: test lint unit demo bench bench-smoke tools constraints clean controlplane cluster-up cluster-down chaos

$(STAMP): setup.cfg pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip==26.3"
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) -e ".[test,bench]"
	touch $(STAMP)

# kubectl (Debian's kubernetes-client) is used by one conformance test of the simulator;
# chromium (Debian's) by the browser test of the failures page.
tools:
	@command -v kubectl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null) \
	      || echo "warning: could not install kubectl (Debian package kubernetes-client)"; \
	  else echo "warning: kubectl missing; install Debian's kubernetes-client"; fi; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium (Debian package chromium)"; \
	  else echo "warning: chromium missing; install Debian's chromium"; fi; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not cluster"

test: $(STAMP) tools lint controlplane
	$(BIN)/pytest
	AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN="$$(tools/controlplane/build.sh --path)" AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER=1 \
	  $(BIN)/pytest -m cluster

# The real control plane (kube-apiserver, etcd, kube-scheduler, kube-controller-manager, KWOK),
# built from tools/controlplane/go.mod into a cache outside the repository, keyed by the pins.
controlplane:
	@tools/controlplane/build.sh >/dev/null

cluster-up: $(STAMP) controlplane
	$(BIN)/python -m airflow_k8s_retry.testing.controlplane up --bin "$$(tools/controlplane/build.sh --path)" \
	  --dir .cluster $(if $(SCENARIO),--scenario "$(SCENARIO)")

cluster-down: $(STAMP)
	$(BIN)/python -m airflow_k8s_retry.testing.controlplane down --dir .cluster

demo: $(STAMP)
	$(BIN)/python -m demo.run

bench: $(STAMP)
	$(BIN)/python -m bench.run

# Seeded randomized runs under faults, restarts, crashes and kills (tests/chaos); SEED=N replays one.
CHAOS_RUNS ?= 1000
CHAOS_JOBS ?= 2
chaos: $(STAMP)
	@if [ -n "$(SEED)" ]; then $(BIN)/python -m tests.chaos.run --seed $(SEED); \
	else nice -n 10 $(BIN)/python -m tests.chaos.run --runs $(CHAOS_RUNS) --jobs $(CHAOS_JOBS) \
	  --report docs/reliability.md --json .chaos-logs/results.json; fi

constraints:
	rm -rf .venv-constraints
	$(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/pip install -q "apache-airflow==3.3.2" "apache-airflow-providers-cncf-kubernetes==10.25.0" -e ".[test,bench]"
	{ echo "# Pinned dependency set for Python 3.11 (apache-airflow 3.3.2, cncf-kubernetes provider 10.25.0)."; \
	  echo "# Regenerate with 'make constraints' after changing dependencies in setup.cfg."; \
	  .venv-constraints/bin/pip freeze --exclude-editable | grep -v -i '^airflow-k8s-retry'; } > $(CONSTRAINTS)
	rm -rf .venv-constraints

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .airflow-home .demo .chaos-logs
