"""Developer tooling shared by the benchmarks (``bench/``), the tests (``tests/``) and the demo: it
runs the real things a benchmark or a test drives, and ships in no wheel.

* ``tools.controlplane``: a real control plane (etcd, kube-apiserver, kube-scheduler,
  kube-controller-manager, KWOK nodes) built from the Go modules pinned beside it, and
  ``RealCluster``, the same with the API server's audit log read as the simulator's records;
* ``tools.airflow_runner``, ``tools.airflow_home``: real Airflow (``airflow dags test``) in a
  throw-away home;
* ``tools.deployment``, ``tools.services``: a whole Airflow deployment (PostgreSQL, Redis, Celery,
  schedulers, triggerers).

Run from the repository's root (``python -m tools.controlplane``, ``pytest``, ``python -m bench.run``):
the folder is a package of the checkout, not an installed distribution. ``bench`` and ``tests`` import
it; it imports neither.
"""
