"""Container logs reach the task log whole (through the provider's log reader), and the endings
KPO defines (on_finish_action, on_kill_action, termination_grace_period) mean what they mean there."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.exceptions import PodFailure
from tests.support.operator_try import defer, event_for, operator, requests, verdict

LINES = [f"line {i:04d}" for i in range(1, 2501)]
TRACEBACK = ["transform starting", "Traceback (most recent call last):"] + [f"  frame {i}" for i in range(24)]


def finished(cluster: Any, name: str) -> bool:
    return ((cluster.pod(name) or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed")


def written(caplog: Any, capsys: Any) -> str:
    return caplog.text + capsys.readouterr().out


@pytest.mark.fake_cluster({"time_scale": 0.05, "images": {"chatty:1": {"run": {"log": "\n".join(LINES)}}}})
def test_a_2500_line_log_reaches_the_task_log_whole(fake_cluster, context, caplog, capsys):
    caplog.set_level(logging.INFO)
    op = operator(image="chatty:1")
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: finished(c, trigger.pod_name), timeout=20)
    op.execute_complete(context, event=event_for(trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED)))
    text = written(caplog, capsys)
    assert all(f"[base] {line}" in text for line in (LINES[0], LINES[1250], LINES[-1]))
    assert sum("[base] line " in row for row in text.splitlines()) == 2500


@pytest.mark.fake_cluster(
    {"time_scale": 0.05, "images": {"flaky:1": {"run": {"exit_code": 1, "log": "\n".join(TRACEBACK)}}}}
)
def test_a_failed_try_logs_the_report_first_then_the_whole_log(fake_cluster, context, caplog, capsys):
    caplog.set_level(logging.INFO)
    op = operator(image="flaky:1")
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: finished(c, trigger.pod_name), timeout=20)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE))
        )
    text = written(caplog, capsys)
    assert "[base] Traceback (most recent call last):" in text
    assert "[base] transform starting" in text
    assert text.index("container.exit_code: it happened") < text.index("[base] transform starting")


@pytest.mark.fake_cluster({"time_scale": 0.05, "images": {"chatty:1": {"run": {"log": "hello"}}}})
def test_container_logs_names_the_containers_whose_logs_are_written(fake_cluster, context, caplog, capsys):
    caplog.set_level(logging.INFO)
    op = operator(image="chatty:1", get_logs=True, container_name_log_prefix_enabled=False)
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: finished(c, trigger.pod_name), timeout=20)
    op.execute_complete(context, event=event_for(trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED)))
    text = written(caplog, capsys)
    assert "hello" in text and "[base] hello" not in text


@pytest.mark.parametrize(
    ("action", "outcome", "kept"),
    [
        ("delete_pod", Outcome.SUCCEED, False),
        ("delete_succeeded_pod", Outcome.SUCCEED, False),
        ("delete_succeeded_pod", Outcome.RETRY, True),
        ("delete_succeeded_pod", Outcome.SKIP, True),
        ("keep_pod", Outcome.SUCCEED, True),
        ("delete_active_pod", Outcome.RETRY, True),  # the pod has finished (Failed): kept
    ],
)
@pytest.mark.fake_cluster({"time_scale": 0.05, "images": {"flaky:1": {"run": {"exit_code": 3}}}})
def test_on_finish_action_has_kpos_meaning(action, outcome, kept, fake_cluster, context):
    op = operator(image="flaky:1", on_finish_action=action)
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: finished(c, trigger.pod_name), timeout=20)
    with contextlib.suppress(Exception):
        op.execute_complete(context, event=event_for(trigger, verdict(outcome, Reason.CONTAINER_EXIT_CODE)))
    assert (requests(fake_cluster, "delete") == []) is kept


@pytest.mark.fake_cluster(
    {"time_scale": 0.05, "images": {"busybox:1.36": {"run": {"duration_seconds": 100_000}}}}
)
def test_delete_active_pod_deletes_a_pod_that_is_still_running(fake_cluster, context):
    op = operator(on_finish_action="delete_active_pod")
    trigger = defer(op, context)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.EXECUTION_TIMEOUT))
        )
    assert [r["status"] for r in requests(fake_cluster, "delete")] == [200]


@pytest.mark.fake_cluster(time_scale=0.05)
def test_on_kill_deletes_unless_on_kill_action_keeps_the_pod(fake_cluster, context):
    op = operator(termination_grace_period=7)
    trigger = defer(op, context)
    op.on_kill()
    [delete] = requests(fake_cluster, "delete", 200)
    assert delete["name"] == trigger.pod_name

    kept = operator(on_kill_action="keep_pod")
    context["ti"].try_number = 2
    second = defer(kept, context)
    assert second.serialize()[1]["owned"] is False  # the trigger's on_kill leaves it alone too
    kept.on_kill()
    # (Try 2's sweep may also delete try 1's pod again, without grace, if it is still stopping.)
    assert [r for r in requests(fake_cluster, "delete") if r["name"] == second.pod_name] == []
    assert fake_cluster.pod(second.pod_name) is not None


@pytest.mark.fake_cluster(time_scale=0.05)
def test_kpo_callbacks_are_called_at_each_step(fake_cluster, context):
    from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback

    calls: list[str] = []

    class Recorder(KubernetesPodOperatorCallback):
        @staticmethod
        def on_pod_manifest_created(*, pod_request: Any, **kwargs: Any) -> None:
            calls.append("manifest")

        @staticmethod
        def on_pod_creation(*, pod: Any, **kwargs: Any) -> None:
            calls.append(f"creation {pod.metadata.name}")

        @staticmethod
        def on_operator_resuming(*, pod: Any, event: dict[str, Any], **kwargs: Any) -> None:
            calls.append(f"resuming {event['verdict']['reason']}")

        @staticmethod
        def on_pod_completion(*, pod: Any, **kwargs: Any) -> None:
            calls.append("completion")

        @staticmethod
        def on_pod_teardown(*, pod: Any, **kwargs: Any) -> None:
            calls.append("teardown")

        @staticmethod
        def on_pod_cleanup(*, pod: Any, **kwargs: Any) -> None:
            calls.append("cleanup")

    op = operator(callbacks=Recorder)
    trigger = defer(op, context)
    op.execute_complete(context, event=event_for(trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED)))
    assert calls == [
        "manifest",
        f"creation {trigger.pod_name}",
        "resuming pod.succeeded",
        "completion",
        "teardown",
        "cleanup",
    ]


@pytest.mark.fake_cluster(
    {"time_scale": 0.05, "images": {"half:1": {"run": {"exit_code": 2, "xcom": {"rows": 7}}}}}
)
def test_a_failed_try_still_pushes_the_result_it_wrote(fake_cluster, context, ti):
    op = operator(image="half:1", do_xcom_push=True)
    trigger = defer(op, context)

    def base_done(c: Any) -> bool:
        statuses = ((c.pod(trigger.pod_name) or {}).get("status") or {}).get("containerStatuses") or []
        return any(s["name"] == "base" and "terminated" in s["state"] for s in statuses)

    assert fake_cluster.wait_for(base_done, timeout=20)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE))
        )
    assert ti.xcom["return_value"] == {"rows": 7}
    assert [r["status"] for r in requests(fake_cluster, "delete")] == [200]
