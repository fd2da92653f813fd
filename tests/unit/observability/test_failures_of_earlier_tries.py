"""The failures page's record of an earlier try, from its ``task_instance_history`` row (pure).

Airflow 3.3+ keeps the try's ``retry_reason`` (``"<reason code>: <message>"``); Airflow 3.1 and 3.2,
or a try another policy left without a reason, keep the trigger event the try resumed with in
``next_kwargs``, possibly in Airflow's serialized form. Either way the page shows the cause, never a
container's termination message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_k8s_retry.plugins.failures import FailureRecord, record_from_history

AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
WHERE: dict[str, Any] = {
    "dag_id": "etl",
    "task_id": "load",
    "run_id": "manual__1",
    "map_index": -1,
    "try_number": 1,
    "state": "failed",
    "at": AT,
}
SECRET = "password=hunter2"


def event(
    message: str = "container 'base' failed with exit code 3", terminated: str | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Failed", "containerStatuses": []}
    if terminated is not None:
        status["containerStatuses"] = [
            {"name": "base", "state": {"terminated": {"exitCode": 3, "message": terminated}}}
        ]
    return {
        "namespace": "jobs",
        "pod_name": "etl-load-abc-t1",
        "pod_uid": "u1",
        "verdict": {
            "outcome": "retry",
            "reason": "container.exit_code",
            "message": message,
            "rule": "exit_code",
        },
        "seen": {
            "uid": "u1",
            "pod": {"metadata": {"name": "etl-load-abc-t1", "uid": "u1"}, "status": status},
            "events": [],
        },
    }


def test_a_retry_reason_naming_a_reason_code_is_the_tries_cause() -> None:
    record = record_from_history(
        "container.oom: container 'base' was OOMKilled: at 2Gi", {"event": event()}, **WHERE
    )
    assert record == FailureRecord(
        **WHERE,
        outcome="retry",
        reason="container.oom",
        message="container 'base' was OOMKilled: at 2Gi",
        pod_name="etl-load-abc-t1",
        namespace="jobs",
    )


def test_without_a_reason_code_the_resumed_event_tells_the_cause() -> None:
    for reason in (None, "Matched rule for ValueError", "nonsense: but no code"):
        record = record_from_history(reason, {"event": event(), "execution_deadline": None}, **WHERE)
        assert record is not None
        assert (record.reason, record.message, record.pod_name) == (
            "container.exit_code",
            "container 'base' failed with exit code 3",
            "etl-load-abc-t1",
        )


def test_the_event_is_read_through_airflows_serialization_envelopes_and_the_sensors_wrapper() -> None:
    wrapped = {
        "__type": "dict",
        "__var": {"event": {"__type": "dict", "__var": {"target": {}, "event": event()}}},
    }
    record = record_from_history(None, wrapped, **WHERE)
    assert record is not None and record.reason == "container.exit_code"


def test_a_termination_message_in_the_event_is_withheld() -> None:
    record = record_from_history(
        None, {"event": event(message=f"exit code 3: {SECRET}", terminated=SECRET)}, **WHERE
    )
    assert record is not None
    assert SECRET not in record.message
    assert "<termination message withheld>" in record.message


def test_a_try_of_another_operator_or_one_that_never_deferred_has_no_record() -> None:
    assert record_from_history(None, None, **WHERE) is None
    assert record_from_history(None, {"event": {"status": "success"}}, **WHERE) is None
    assert record_from_history("Matched rule for KeyError", {}, **WHERE) is None
