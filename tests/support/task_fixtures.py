"""Fixtures for driving the operator and the sensor in-process (the operator and sensor folders'
conftests import them; ``no_backoff_sleep`` is autouse there).

Airflow reads its configuration once per process, so a throw-away AIRFLOW_HOME is set before
anything imports Airflow. The task instance is a small stand-in with the attributes the operator
reads (identity, start date) and an ``xcom_push`` that records what was pushed: that is the edge
between this package and Airflow's task runner.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest

from tools.airflow_home import use_throwaway_airflow_home

use_throwaway_airflow_home()


@dataclass
class TaskInstanceStandIn:
    dag_id: str = "etl"
    task_id: str = "load"
    run_id: str = "manual__2024-06-01T00:00:00+00:00"
    map_index: int = -1
    try_number: int = 1
    start_date: datetime = field(default_factory=lambda: datetime.now(UTC))
    id: str = "0199a1b2-0000-7000-8000-000000000001"  # Airflow 3: one task instance id per try
    xcom: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@pytest.fixture
def ti() -> TaskInstanceStandIn:
    return TaskInstanceStandIn()


@pytest.fixture
def context(ti: TaskInstanceStandIn) -> dict[str, Any]:
    return {"ti": ti, "run_id": ti.run_id, "dag": None}


@pytest.fixture(autouse=True)
def no_backoff_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """API retries back off through ``RetryingPodOperator.retry_sleep``: record, don't sleep."""
    from airflow_k8s_retry.operators import RetryingPodOperator

    slept: list[float] = []
    monkeypatch.setattr(RetryingPodOperator, "retry_sleep", staticmethod(slept.append))
    return slept


@pytest.fixture
def make_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start a simulator with a scenario; the default kubeconfig (KUBECONFIG) points at it.
    ``clock="manual"``: its pods stand still until the test advances the cluster's clock."""
    from airflow_k8s_retry_testing import FakeCluster

    started: list[Any] = []

    def start(
        scenario: dict[str, Any] | None = None, *, clock: Literal["scaled", "manual"] = "scaled"
    ) -> Any:
        cluster = FakeCluster(
            scenario=scenario or {"time_scale": 0.05}, audit=tmp_path / "audit.jsonl", clock=clock
        )
        cluster.__enter__()
        started.append(cluster)
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
        return cluster

    yield start
    for cluster in started:
        cluster.__exit__(None, None, None)
