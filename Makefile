# All set-up happens here: a fresh machine needs Python 3.11, Go, gcc and Debian's packages (make tools).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export AIRFLOW_K8S_RETRY_REPO := $(CURDIR)

# Supported Airflow minor versions. Each has a constraints file generated from its seed pins (the
# Airflow release, the cncf provider release tested with it, and whatever that Airflow release needs
# pinned to work at all), and its own test venv. The seeds test both ends of the cncf range that
# setup.cfg declares. .venv is the newest minor's venv; the older ones live under .venv-compat/.
PY_MINOR := 3.11
AIRFLOW_MINORS := 3.1 3.2 3.3
NEWEST_MINOR := 3.3
OLDER_MINORS := $(filter-out $(NEWEST_MINOR),$(AIRFLOW_MINORS))
SEED_3.1 := apache-airflow==3.1.8 apache-airflow-providers-cncf-kubernetes==10.25.0
SEED_3.2 := apache-airflow==3.2.2 apache-airflow-providers-cncf-kubernetes==10.25.0 \
  fastapi==0.136.3 cadwyn==7.0.0 svcs==25.1.0
SEED_3.3 := apache-airflow==3.3.2 apache-airflow-providers-cncf-kubernetes==10.25.0
constraints_for = constraints/airflow-$(1)/constraints-$(PY_MINOR).txt
CONSTRAINTS := $(call constraints_for,$(NEWEST_MINOR))
COMPAT := .venv-compat
# What test-compat runs on each older minor: the example DAGs parsed, the provider registered, the
# operator and sensor tests, the trigger tests that touch Airflow (connections, task state,
# serialization) or walk a pod's whole life, and, end to end under real Airflow, a DAG whose every
# try keeps its cause and the memory-growth cases that use Airflow itself differently (a Variable
# written, read by the next run, and deleted after a last try).
MEMORY_TESTS_OLDER := test_an_oom_killed_task_succeeds_on_try_2_with_twice_the_memory_and_the_next_run_starts_there \
  test_an_oom_kill_on_the_last_try_leaves_no_plan_behind
COMPAT_TESTS_OLDER := tests/airflow/structure/test_example_dags.py \
  tests/airflow/structure/test_provider_is_registered.py tests/airflow/end_to_end/test_every_try_keeps_its_cause.py \
  $(addprefix tests/airflow/end_to_end/test_memory_growth_under_airflow.py::,$(MEMORY_TESTS_OLDER)) \
  tests/unit/operator tests/simulated/operator tests/unit/sensor tests/simulated/sensor \
  tests/unit/watching/test_trigger_serializes_exactly.py \
  tests/unit/watching/test_cluster_config_resolves_connections.py \
  tests/simulated/watching/test_on_kill_deletes_only_after_a_real_kill.py \
  tests/simulated/watching/test_every_default_rule_through_a_pod_lifecycle.py
# `make test-compat` also runs the seven example DAGs and the sensor DAGs end to end on each older
# minor (COMPAT_SCOPE=full, the default); `make test` runs the older minors' legs without them
# (COMPAT_SCOPE=core), as its 15-minute budget leaves no room for them: they are the costliest runs
# there (Airflow 3.1 and 3.2 rebuild their in-process execution API for every task run: the seven
# examples cost 113 s of CPU on 3.1 and 27 s on 3.3), and they run end to end on the newest minor
# in `make test`. The package's code differs between minors only where airflow_k8s_retry/compat.py
# says, and the core legs take each of those branches under each older minor's own Airflow: the
# try-cause and memory-growth modules run real `airflow dags test` there (retries without a policy,
# the minor's exceptions, Variables), beside the operator, sensor and trigger tests.
COMPAT_SCOPE ?= full
COMPAT_TESTS_core := $(COMPAT_TESTS_OLDER)
COMPAT_TESTS_full := $(COMPAT_TESTS_OLDER) tests/airflow/end_to_end/test_example_dags_run.py tests/airflow/sensor
COMPAT_TESTS_NEWEST := tests/airflow/structure/test_example_dags.py \
  tests/airflow/structure/test_provider_is_registered.py tests/airflow/end_to_end/test_example_dags_run.py \
  tests/unit/operator tests/simulated/operator tests/unit/sensor tests/simulated/sensor tests/airflow/sensor \
  tests/unit/watching tests/simulated/watching

.PHONY: test lint lint-code docs dist-check unit demo bench bench-oom bench-stack tools constraints clean controlplane cluster-up \
  cluster-down chaos test-compat test-cluster test-deployment test-soak-short soak test-stream-checks test-stream-deployment test-stream-cluster \
  test-clock

# The provider and, beside it, the simulator's own distribution (simulator/, the [testing] extra).
SIM := ./simulator
$(STAMP): setup.cfg pyproject.toml simulator/setup.cfg $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip==26.3"
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) -e $(SIM) -e ".[test,bench,deploy,testing,docs]"
	touch $(STAMP)

# kubectl (Debian's kubernetes-client) is used by one conformance test of the simulator;
# chromium (Debian's) by the browser test of the failures page; PostgreSQL and Redis (Debian's
# postgresql and redis-server) by the deployment tier, which starts its own servers in temporary
# folders (the packages' own services are not used).
tools:
	@test -x "$$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)/initdb" || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
	      || echo "warning: could not install PostgreSQL (Debian package postgresql)"; \
	  else echo "warning: PostgreSQL missing; install Debian's postgresql"; fi; }
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
	      || echo "warning: could not install Redis (Debian package redis-server)"; \
	  else echo "warning: redis-server missing; install Debian's redis-server"; fi; }
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

# The checks (.pre-commit-config.yaml runs the first four on each commit), the documentation site
# and both distributions.
lint: lint-code docs dist-check

lint-code: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site, from docs/ into docs/_build/html (warnings are errors). The reference pages
# in docs/api/ are rewritten first when the public classes changed (docs/_ext/api_pages.py).
docs: $(STAMP)
	$(BIN)/sphinx-build -E -q -W --keep-going -b html docs docs/_build/html

# Both distributions built as a release builds them (sdist, then the wheel from the sdist) into a
# temporary folder, and checked as PyPI will render them.
dist-check: $(STAMP)
	@out="$$(mktemp -d)"; trap 'rm -rf "$$out"' EXIT; \
	  $(BIN)/python -m build --no-isolation --outdir "$$out" . >"$$out/build.log" 2>&1 \
	  && $(BIN)/python -m build --no-isolation --outdir "$$out" $(SIM) >>"$$out/build.log" 2>&1 \
	  || { cat "$$out/build.log"; exit 1; }; \
	  $(BIN)/twine check --strict "$$out"/*.whl "$$out"/*.tar.gz

# The pure tier (tests/unit): no socket, no subprocess; under a minute on 2 cores.
unit: $(STAMP)
	$(BIN)/pytest -q -n 2 tests/unit

# The whole suite runs on the newest minor; the older minors run test-compat's subset. Much of the
# suite's time is spent waiting (grace periods, heartbeats, controllers), the rest mostly in Airflow's
# start-ups (each `airflow dags test` costs about 10 s of CPU), so once the newest minor's venv is
# there, four streams run at once, balanced by their measured times: the main suite, then the
# Airflow 3.1 leg; the checks beside the older minors' venvs (pip mostly waits on the disk and the
# index); the deployment tier (two deployments side by side), then the 3.2 leg; the short soak, then
# the cluster tier. An older minor's leg starts once the checks stream has ended (it built that
# minor's venv). The background streams' output (.test-logs/<stream>.log) is printed at the end, then
# each stream's time and the whole run's, and any part failing fails the target. Each pytest run
# writes a JUnit report under .test-logs/ with every test's time.
COMPAT_STAMPS := $(foreach m,$(OLDER_MINORS),$(COMPAT)/$(m)/.installed)
#: The background streams, each a test-stream-NAME target below.
STREAMS := checks deployment cluster
#: Wait until the checks stream has ended (an older minor's leg needs the venv it built).
after_checks := while [ ! -e .test-logs/stream-checks.rc ]; do sleep 1; done

test: test-clock $(STAMP) tools controlplane
	@mkdir -p .test-logs; rm -f .test-logs/stream-*.rc .test-logs/stream-*.seconds
	@mmss() { printf '%d:%02d' $$(($$1 / 60)) $$(($$1 % 60)); }; \
	  begun=$$(date +%s); \
	  for s in $(STREAMS); do \
	  { $(MAKE) --no-print-directory -k test-stream-$$s > .test-logs/stream-$$s.log 2>&1; \
	    echo $$? > .test-logs/stream-$$s.rc; echo $$(($$(date +%s) - begun)) > .test-logs/stream-$$s.seconds; } & \
	done; \
	  $(BIN)/pytest -m "not cluster and not deployment and not soak" -n 2 --dist loadfile --durations=25 \
	    --junitxml=.test-logs/main.xml; \
	  main=$$?; $(after_checks); $(MAKE) --no-print-directory test-core-$(word 1,$(OLDER_MINORS)) || main=1; \
	  main_seconds=$$(($$(date +%s) - begun)); wait; \
	  status="main suite exit $$main"; failed=$$main; times=""; \
	  for s in $(STREAMS); do \
	    echo "== stream $$s (.test-logs/stream-$$s.log)"; cat .test-logs/stream-$$s.log; \
	    rc=$$(cat .test-logs/stream-$$s.rc 2>/dev/null || echo 1); \
	    status="$$status, stream $$s exit $$rc"; failed=$$((failed + rc)); \
	    times="$$times, stream $$s $$(mmss $$(cat .test-logs/stream-$$s.seconds 2>/dev/null || echo 0))"; \
	  done; \
	  started=$$(cat .test-logs/started); ended=$$(date +%s); \
	  echo "== $$status"; \
	  echo "== times: set-up $$(mmss $$((begun - started))), main suite $$(mmss $$main_seconds)$$times;" \
	    "the whole run $$(mmss $$((ended - started))) (budget: 15:00 warm, 40:00 on a fresh machine)"; \
	  test "$$failed" = 0

# When make test started, before its set-up, for the times it prints at the end.
test-clock:
	@mkdir -p .test-logs; date +%s > .test-logs/started

# Balanced by measured times on a warm run (seconds, all streams at once): the deployment tier
# (665), then the 3.2 leg (110); the short soak (250), then the cluster tier (475); the main suite
# (560 on two workers), then the 3.1 leg (95), in the foreground. The run is CPU-bound on two cores, so the
# soak, whose processes mostly wait, runs first, and parts that keep both cores busy run last.
test-stream-checks:
	@$(MAKE) --no-print-directory -j $(words $(AIRFLOW_MINORS)) --output-sync=target lint $(COMPAT_STAMPS)
test-stream-deployment: test-deployment
	@$(after_checks); $(MAKE) --no-print-directory test-core-3.2
test-stream-cluster: test-soak-short test-cluster

# An older minor's leg without the example and sensor DAGs (COMPAT_SCOPE=core), as `make test` runs it.
test-core-%:
	@$(MAKE) --no-print-directory test-compat-$* COMPAT_SCOPE=core

# The deployment tier alone: two Airflow deployments (PostgreSQL, Celery), one per xdist worker,
# each running the files of its half (tests/deployment/conftest.py HALVES).
test-deployment: $(STAMP) tools
	@echo "== deployment tier (PostgreSQL, CeleryExecutor, two schedulers and triggerers)"
	$(BIN)/pytest -m deployment -n 2 --dist loadgroup --durations=15 --junitxml=.test-logs/deployment.xml tests/deployment

# The cluster tier: tests marked `cluster`, against a real control plane the session starts.
test-cluster: $(STAMP) controlplane
	@echo "== cluster tier (real control plane)"
	AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN="$$(tools/controlplane/build.sh --path)" AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER=1 \
	  $(BIN)/pytest -m cluster --durations=15 --junitxml=.test-logs/cluster.xml tests/cluster

# The short soak: a dozen tasks of real Airflow on the real control plane under the monkey.
test-soak-short: $(STAMP) tools controlplane
	@echo "== short soak (real Airflow on the real control plane, under a monkey)"
	AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN="$$(tools/controlplane/build.sh --path)" AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER=1 \
	  $(BIN)/pytest -m soak -s --junitxml=.test-logs/soak.xml tests/soak

test-compat: $(addprefix test-compat-,$(AIRFLOW_MINORS))

test-compat-$(NEWEST_MINOR): $(STAMP)
	@echo "== Airflow $(NEWEST_MINOR) ($(BIN))"
	$(BIN)/pytest -q -p no:cacheprovider $(COMPAT_TESTS_NEWEST)

# One venv per older minor, rebuilt from scratch only when its constraints file (or setup.cfg)
# changes; pip's cache makes a rebuild cheap.
# (.PRECIOUS: make would otherwise delete the stamp as an intermediate file after the run.)
.PRECIOUS: $(COMPAT)/%/.installed
$(COMPAT)/%/.installed: constraints/airflow-%/constraints-$(PY_MINOR).txt setup.cfg simulator/setup.cfg
	rm -rf $(COMPAT)/$*
	$(PYTHON) -m venv $(COMPAT)/$*
	$(COMPAT)/$*/bin/python -m pip install -q "pip==26.3"
	$(COMPAT)/$*/bin/python -m pip install -q -c $< -e $(SIM) -e ".[test,testing]"
	touch $@

test-compat-%: $(COMPAT)/%/.installed
	@echo "== Airflow $* ($(COMPAT)/$*, $(COMPAT_SCOPE))"
	$(COMPAT)/$*/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=15 \
	  --junitxml=.test-logs/compat-$*.xml $(COMPAT_TESTS_$(COMPAT_SCOPE))

# The real control plane (kube-apiserver, etcd, kube-scheduler, kube-controller-manager, KWOK),
# built from tools/controlplane/go.mod into a cache outside the repository, keyed by the pins.
controlplane:
	@tools/controlplane/build.sh >/dev/null

cluster-up: $(STAMP) controlplane
	$(BIN)/python -m tools.controlplane up --bin "$$(tools/controlplane/build.sh --path)" \
	  --dir .cluster $(if $(SCENARIO),--scenario "$(SCENARIO)")

cluster-down: $(STAMP)
	$(BIN)/python -m tools.controlplane down --dir .cluster

demo: $(STAMP)
	$(BIN)/python -m demo.run

# CLUSTER=real: the same phases on the real control plane (results in bench/results/real/).
bench: $(STAMP) $(if $(filter real,$(CLUSTER)),controlplane)
	$(BIN)/python -m bench.run $(if $(filter real,$(CLUSTER)),--cluster real)

# The classic OOM DAG (3500Mi needed, 2Gi limit, retries=3) three ways under airflow dags test:
# KPO, RetryingPodOperator with growth off and on.
bench-oom: $(STAMP)
	$(BIN)/python -m bench.oom_growth

# The whole stack (bench/stack.py): RetryingPodOperator against the cncf KubernetesPodOperator
# (deferrable, and not) in one real Airflow deployment (PostgreSQL, Celery, two schedulers and
# triggerers) on the real control plane; results in bench/results/stack/. PLAN=quick (about 15
# minutes), full (about 65) or paced (about 75: the failure phase paced to the worker slots, so
# the retry turnaround is the machinery's own; 1,000 deferred tasks without live logs).
# SIZES="exits=2 ooms=2 scale=40" runs the plan's phases smaller (results as PLAN-resized);
# ONLY=turnaround (or scale) runs one part of the plan (results as PLAN-...-turnaround).
PLAN ?= quick
SIZES ?=
ONLY ?=
bench-stack: $(STAMP) tools controlplane
	AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN="$$(tools/controlplane/build.sh --path)" \
	  $(BIN)/python -m bench.stack --plan $(PLAN) $(foreach s,$(SIZES),--size $(s)) $(if $(ONLY),--only $(ONLY))

# The soak (tests/soak): one DAG run of SOAK_TASKS tasks of drawn fates in real Airflow (PostgreSQL,
# Celery, two schedulers, two triggerers, two workers) on the real control plane, while a seeded
# monkey kills Airflow's processes and restarts kube-apiserver; the report goes into
# docs/reliability.md, the logs into .soak-logs/. SEED=N draws another plan.
SOAK_TASKS ?= 300
soak: $(STAMP) tools controlplane
	rm -rf .soak-logs/run
	AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN="$$(tools/controlplane/build.sh --path)" \
	  $(BIN)/python -m tests.soak.run --tasks $(SOAK_TASKS) --seed $(or $(SEED),1) \
	  --report docs/reliability.md --json .soak-logs/result.json --workdir .soak-logs/run

# Seeded randomized runs under faults, restarts, crashes and kills (tests/chaos); SEED=N replays one.
CHAOS_RUNS ?= 1000
CHAOS_JOBS ?= 2
chaos: $(STAMP)
	@if [ -n "$(SEED)" ]; then $(BIN)/python -m tests.chaos.run --seed $(SEED); \
	else nice -n 10 $(BIN)/python -m tests.chaos.run --runs $(CHAOS_RUNS) --jobs $(CHAOS_JOBS) \
	  --report docs/reliability.md --json .chaos-logs/results.json; fi

# Regenerate every constraints file (or one: make constraints-3.2) after changing dependencies in
# setup.cfg or a seed above: a fresh venv per minor, the seed plus the package, then pip freeze.
constraints: $(addprefix constraints-,$(AIRFLOW_MINORS))

constraints-%:
	rm -rf .venv-constraints-$*
	$(PYTHON) -m venv .venv-constraints-$*
	.venv-constraints-$*/bin/python -m pip install -q "pip==26.3"
	.venv-constraints-$*/bin/python -m pip install -q $(SEED_$*) -e $(SIM) -e ".[test,bench,deploy,testing,docs]"
	mkdir -p constraints/airflow-$*
	{ echo "# Pinned dependency set for Airflow $* on Python $(PY_MINOR): $(SEED_$*)"; \
	  echo "# Regenerate with 'make constraints-$*' after changing dependencies in setup.cfg or the seed in the Makefile."; \
	  .venv-constraints-$*/bin/python -m pip freeze --all --exclude-editable | grep -v -i -e '^airflow-k8s-retry' -e '^pip=='; \
	  } > $(call constraints_for,$*)
	rm -rf .venv-constraints-$*

clean:
	rm -rf $(VENV) $(COMPAT) .mypy_cache .ruff_cache .pytest_cache .airflow-home .demo .chaos-logs .soak-logs .test-logs \
	  docs/_build
