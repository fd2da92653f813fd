"""The arguments ``RetryingPodOperator`` takes beyond ``KubernetesPodOperator``'s handling: which
KPO values have no meaning here (accepted with one warning saying what happens instead), which
values no pod can run with (refused in one line, with the fix), how the KPO-style failure arguments
become a :class:`~airflow_k8s_retry.classification.policy.FailurePolicy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping
from typing import Any

from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError
from airflow_k8s_retry.connection import ConnectionConfigError, chosen_cluster
from airflow_k8s_retry.memory_growth import MemoryGrowth

ON_FINISH_ACTIONS = ("delete_pod", "delete_succeeded_pod", "keep_pod", "delete_active_pod")


_REATTACHES = (
    "is ignored: a restarted try always re-attaches to its own pod (one pod per try), and no second pod "
    "is started beside it"
)
#: KPO arguments whose value (other than the default) has no meaning in this design and can be
#: ignored without harm: accepted, with one warning at parse saying what happens instead.
_IGNORED: tuple[tuple[str, object, str], ...] = (
    ("reattach_on_restart", False, f"reattach_on_restart=False {_REATTACHES}"),
    ("durable", False, f"durable=False {_REATTACHES}"),
    (
        "random_name_suffix",
        False,
        "random_name_suffix=False is ignored: pod names always end in a per-try suffix "
        "(-<digest>-t<try>) after 'name'; read the pod's name from the XCom 'pod_name'",
    ),
)


def ignored(args: Mapping[str, Any]) -> list[str]:
    """KPO arguments accepted but without effect here: one line each, saying what happens instead."""
    out = [message for key, value, message in _IGNORED if args[key] is value]
    if args["trigger_kwargs"]:
        out.append(
            "trigger_kwargs is ignored: the trigger is PodStateTrigger; tune it with poll_interval, "
            "logging_interval or failure_policy"
        )
    return out


def refusals(args: Mapping[str, Any]) -> list[str]:
    """Argument values no pod can be run with: one line each, with the fix."""
    out = []
    try:
        chosen_cluster(args["in_cluster"], None, None)
    except ConnectionConfigError as exc:
        out.append(str(exc))
    growth = args.get("memory_growth")
    if growth is not None and not isinstance(growth, MemoryGrowth):
        out.append(
            "memory_growth must be a MemoryGrowth (from airflow_k8s_retry.memory_growth), e.g. "
            f"MemoryGrowth(factor=2, maximum='16Gi'), got {type(growth).__name__}"
        )
    every = args["logging_interval"]
    if every is not None and (isinstance(every, bool) or not isinstance(every, int | float) or every <= 0):
        out.append(f"logging_interval must be a positive number of seconds or None, got {every!r}")
    if args["on_finish_action"] not in ON_FINISH_ACTIONS:
        got = args["on_finish_action"]
        out.append(f"on_finish_action must be one of {', '.join(ON_FINISH_ACTIONS)}, got {got!r}")
    poll = args["poll_interval"]
    if not isinstance(poll, int | float) or isinstance(poll, bool) or poll <= 0:
        out.append(f"poll_interval must be a positive number of seconds, got {poll!r}")
    return out


def failure_policy(
    task_id: str,
    policy: FailurePolicy | None,
    *,
    skip_on_exit_code: int | Container[int] | None,
    startup: float | None,
    schedule: float | None,
) -> FailurePolicy:
    """The operator's policy: ``failure_policy`` with the KPO-style arguments laid over it."""
    if policy is not None and not isinstance(policy, FailurePolicy):
        raise PolicyError(
            f"{task_id}: failure_policy must be an airflow_k8s_retry.classification.policy."
            f"FailurePolicy, got {type(policy).__name__}"
        )
    # One exit code or several: FailurePolicy normalises both (and names the field when invalid).
    given: dict[str, Any] = {
        "skip_on_exit_codes": skip_on_exit_code,
        "startup_timeout": startup,
        "schedule_timeout": schedule,
    }
    return dataclasses.replace(policy or FailurePolicy(), **{k: v for k, v in given.items() if v is not None})
