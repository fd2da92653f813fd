"""Invariant 7: env values, connection credentials and tokens never reach logs, events or XCom.

A failing task is driven through its whole path in-process against the simulator: ``execute``
creates the pod with secret env values, the real trigger watches it to its verdict, and
``execute_complete`` writes the failure report, stamps the pod and raises. Everything the package
wrote anywhere a person or another system can read is then searched for the secrets.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.exceptions import PodFailure
from airflow_k8s_retry.kube.naming import encode_stamp
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.triggers import PodStateTrigger

DB_PASSWORD = "pw-7f3a9c1e-do-not-print"
API_KEY = "key-b2d4e6f8-do-not-print"


async def first_event(trigger: PodStateTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


@pytest.mark.fake_cluster(
    {
        "images": {"etl:3": {"run": {"exit_code": 3, "duration_seconds": 0.1, "log": "loading\nboom"}}},
        "time_scale": 0.05,
    }
)
def test_a_failed_try_reports_its_cause_without_its_secrets(fake_cluster, context, ti, caplog, capsys):
    op = RetryingPodOperator(
        task_id="load",
        image="etl:3",
        kubernetes_conn_id=None,
        namespace="default",
        env_vars={"DB_PASSWORD": DB_PASSWORD, "API_KEY": API_KEY},
        get_logs=True,
    )
    caplog.set_level(logging.DEBUG)

    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    classpath, kwargs = trigger.serialize()
    event = asyncio.run(first_event(trigger))
    with pytest.raises(PodFailure) as failure:
        op.execute_complete(context, event=event)

    # The secrets did reach the pod spec: the search below would find them if they leaked.
    [created] = fake_cluster.all_pods()
    env = {e["name"]: e.get("value") for e in created["spec"]["containers"][0]["env"]}
    assert env == {"DB_PASSWORD": DB_PASSWORD, "API_KEY": API_KEY}

    # What the package wrote: task log, stdout/stderr, trigger kwargs and event, XCom, the
    # exception, the verdict and history stamped on the pod (and the stamp a kept pod gets), and the
    # cluster's Events.
    out = capsys.readouterr()
    stamped = created["metadata"].get("annotations") or {}
    written = {
        "log": caplog.text,
        "stdout": out.out + out.err,
        "trigger kwargs": json.dumps(kwargs, default=str),
        "trigger event": json.dumps(event, default=str),
        "xcom": json.dumps(ti.xcom, default=str),
        "exception": str(failure.value),
        "annotations": json.dumps(stamped),
        "stamp of a kept pod": encode_stamp(failure.value.verdict, kept=True),
        "events": json.dumps(fake_cluster.events(), default=str),
    }
    # The report is really there (so an empty capture cannot pass this test) ...
    assert "container.exit_code" in written["log"] + written["stdout"]
    assert "container.exit_code" in written["xcom"]
    assert any("verdict" in key for key in stamped)
    assert "container.exit_code" in written["stamp of a kept pod"]
    # ... and nothing in it carries a secret or the cluster's bearer token.
    for where, text in written.items():
        for secret in (DB_PASSWORD, API_KEY, fake_cluster.token):
            assert secret not in text, f"{secret!r} leaked into the {where}"
    assert classpath == "airflow_k8s_retry.triggers.PodStateTrigger"


@pytest.mark.fake_cluster(
    {
        "images": {"etl:4": {"run": {"exit_code": 3, "duration_seconds": 0.1, "log": f"token={API_KEY}"}}},
        "time_scale": 0.05,
    }
)
def test_a_secret_in_a_termination_message_stays_out_of_the_event_and_the_logs(
    fake_cluster, context, ti, caplog, capsys
):
    """A container's termination message may be anything it wrote: with FallbackToLogsOnError the
    end of its log, here a Secret's value. With ``get_logs=False`` it reaches no log, and in no case
    the trigger's event, which Airflow stores in its database as it is (review finding R3-4)."""
    op = RetryingPodOperator(
        task_id="load",
        image="etl:4",
        kubernetes_conn_id=None,
        namespace="default",
        termination_message_policy="FallbackToLogsOnError",
        get_logs=False,
    )
    caplog.set_level(logging.DEBUG)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    event = asyncio.run(first_event(deferred.value.trigger))
    with pytest.raises(PodFailure) as failure:
        op.execute_complete(context, event=event)
    [created] = fake_cluster.all_pods()
    terminated = created["status"]["containerStatuses"][0]["state"]["terminated"]
    assert API_KEY in terminated["message"]  # the kubelet did put it there
    out = capsys.readouterr()
    assert "container.exit_code" in json.dumps(event)
    for where, text in {
        "trigger event": json.dumps(event, default=str),
        "log": caplog.text,
        "stdout": out.out + out.err,
        "xcom": json.dumps(ti.xcom, default=str),
        "exception": str(failure.value),
    }.items():
        assert API_KEY not in text, f"the secret leaked into the {where}"
