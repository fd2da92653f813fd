"""The simulator's scenario the deployment tier runs against: one image (or a few) per test's DAG,
on a clock ten times faster than real time."""

from __future__ import annotations

from typing import Any

SCALE = 0.1  # real seconds per simulated second
SCENARIO: dict[str, Any] = {
    "time_scale": SCALE,
    "images": {
        "example.com/pool/job:1": {"run": {"duration_seconds": 150, "log": "done"}},
        "example.com/pool/broken:1": {"run": {"exit_code": 3, "duration_seconds": 80, "log": "boom"}},
        # Long enough that all three tasks of the one-slot pool are deferred at once even when each
        # launch waits seconds for the executor's one slot on a busy machine, whatever their order.
        "example.com/pool/slow-job:1": {"run": {"duration_seconds": 600, "log": "done"}},
        "example.com/pool/slow-broken:1": {"run": {"exit_code": 3, "duration_seconds": 200, "log": "boom"}},
        "registry.example.com/team/missing:1": {"pull": "not_found"},
        "example.com/long:1": {"run": {"duration_seconds": 3000}},
        # deployment_no_triggerer: the first try exits 3, the second succeeds.
        "example.com/sync/app:try1": {"run": {"exit_code": 3, "duration_seconds": 20, "log": "boom"}},
        "example.com/sync/app:try2": {"run": {"duration_seconds": 20, "log": "done"}},
        # deployment_retry_policy: the first try is OOM-killed, the second succeeds. Both pods
        # run 15 s: a verdict within a second or two of deferring can reach the resumed worker
        # before the scheduler has processed the executor's event for the deferring workload, and
        # Airflow 3.3's scheduler then fails the running resume itself ("finished with state
        # success, but the task instance's state attribute is running"; apache/airflow#72716).
        "example.com/policy/app:try1": {"run": {"oom": True, "duration_seconds": 150}},
        "example.com/policy/app:try2": {"run": {"duration_seconds": 150, "log": "done"}},
        # deployment_db_outage: ends 15 s into the database's 30 s outage.
        "example.com/outage/app:1": {"run": {"duration_seconds": 150, "log": "done"}},
        # deployment_capacity: six pods of 60 s for triggerers that run two triggers each (all six
        # tasks defer long before the first pod ends, however slowly they launch).
        "example.com/capacity/job:1": {"run": {"duration_seconds": 600, "log": "done"}},
        # deployment_scheduler_restart: runs until the test ends it, once no scheduler runs.
        "example.com/restart/app:1": {"run": {"duration_seconds": 1_000_000, "log": "done"}},
        # deployment_api_timeout: ends while the api-server is frozen.
        "example.com/api-timeout/app:1": {"run": {"duration_seconds": 100, "log": "done"}},
    },
}
