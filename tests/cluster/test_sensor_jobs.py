"""The sensor's Job following against the real Job controller (kube-controller-manager): the
conditions, reasons and replacement pods FakeCluster's controller imitates."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.classification import Outcome, Reason
from airflow_k8s_retry.triggers.target import Target
from tests.support.following import Following, following
from tests.support.lab import CONN_ID


@pytest.fixture
def conn(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    extra = {"kube_config_path": str(kubeconfig)}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    return kubeconfig


def create_job(kubeconfig: Path, name: str, image: str, backoff_limit: int) -> None:
    from kubernetes import client

    api = new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]}
            },
        },
    }
    try:
        client.BatchV1Api(api).create_namespaced_job("default", body)
    finally:
        api.close()


async def test_a_job_that_fails_reports_backoff_limit_exceeded_and_its_last_pods_cause(conn: Path) -> None:
    name = f"sensor-fails-{uuid.uuid4().hex[:6]}"
    run = Following(following(Target("default", job_name=name)))
    create_job(conn, name, "registry.example.com/app:exit-3", backoff_limit=1)
    event = await run.finish(within=180)
    assert event.event is not None and event.job == name
    verdict = event.event.verdict
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE)
    assert (
        f"job default/{name} failed (BackoffLimitExceeded: Job has reached the specified backoff limit)"
        in (verdict.message)
    )


async def test_a_job_that_succeeds_is_complete(conn: Path) -> None:
    name = f"sensor-ok-{uuid.uuid4().hex[:6]}"
    run = Following(following(Target("default", job_name=name)))
    create_job(conn, name, "registry.example.com/app:ok", backoff_limit=0)
    event = await run.finish(within=180)
    assert event.event is not None and event.event.verdict.outcome is Outcome.SUCCEED
    assert f"job default/{name} is complete (CompletionsReached" in event.event.verdict.message
