"""Which task instance states mean "killed, delete the pod": one policy, in ``kills.policy``, for
the trigger's ``on_kill`` and for the api-server's kill listener."""

from __future__ import annotations

import pytest

from airflow_k8s_retry.kills import listener, policy, trigger


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
    assert policy.killed_why(state) == why


def test_the_trigger_and_the_listener_read_the_same_policy() -> None:
    assert listener.KILLED_STATES is policy.KILLED_STATES
    assert trigger.killed_why is policy.killed_why
