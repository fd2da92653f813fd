"""Which task instance states mean "killed, delete the pod": one policy, in ``task_state``, for the
trigger's ``on_kill`` and after-firing check and for the api-server's kill listener."""

from __future__ import annotations

import pytest

from airflow_k8s_retry import task_state
from airflow_k8s_retry.plugins import kills
from airflow_k8s_retry.triggers import pod


@pytest.mark.parametrize(
    ("state", "why"),
    [
        ("failed", "Task instance is failed"),
        ("success", "Task instance is success"),
        ("skipped", "Task instance is skipped"),
        ("upstream_failed", "Task instance is upstream_failed"),
        ("removed", "Task instance is removed"),
        (None, "Task instance is cleared"),
        ("deferred", None),  # the trigger moves to another triggerer
        ("scheduled", None),  # another triggerer fired; a worker comes
        ("queued", None),
        ("running", None),
        ("up_for_retry", None),
        ("restarting", None),
    ],
)
def test_only_the_states_a_kill_leaves_give_a_reason_to_delete(state: str | None, why: str | None) -> None:
    assert task_state.killed_why(state) == why


def test_the_trigger_and_the_listener_read_the_same_policy() -> None:
    assert pod.KILLED_STATES is task_state.KILLED_STATES  # the old import path, too
    assert "KILLED_STATES" not in vars(kills)  # imported where it is used, from task_state
    assert task_state.WAITING_STATES.isdisjoint(task_state.KILLED_STATES)
