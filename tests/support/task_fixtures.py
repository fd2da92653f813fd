"""Fixtures for driving the operator and the sensor in-process (the operator and sensor folders'
conftests import them; ``retry_sleep`` is autouse there). The cluster they run against is the
simulator's own pytest plugin's ``fake_cluster``, its scenario from the test's ``fake_cluster`` marker.

Airflow reads its configuration once per process, so a throw-away AIRFLOW_HOME is set before
anything imports Airflow. The task instance is a small stand-in with the attributes the operator
reads (identity, start date) and an ``xcom_push`` that records what was pushed: that is the edge
between this package and Airflow's task runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest.mock import MagicMock

import pytest
from pytest_mock import MockerFixture

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
def retry_sleep(mocker: MockerFixture) -> MagicMock:
    """API retries back off through the seam ``RetryingPodOperator.retry_sleep``: a stub that does
    not sleep, whose calls a test reads (``retry_sleep.call_args_list``) for the pauses taken."""
    from airflow_k8s_retry.operators import RetryingPodOperator

    stub: MagicMock = mocker.patch.object(RetryingPodOperator, "retry_sleep")
    return stub
