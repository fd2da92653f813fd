"""The arguments ``RetryingPodOperator`` takes beyond ``KubernetesPodOperator``'s handling: which
KPO values contradict the design (refused in one line, with the alternative), how the KPO-style
failure arguments become a :class:`~airflow_k8s_retry.classification.policy.FailurePolicy`, and how
errors of local configuration fail a task at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent

if TYPE_CHECKING:
    from airflow_k8s_retry.classification.policy import FailurePolicy

ON_FINISH_ACTIONS = ("delete_pod", "delete_succeeded_pod", "keep_pod", "delete_active_pod")


def refusals(args: Mapping[str, Any]) -> list[str]:
    """KPO arguments whose value contradicts this operator's design: one line each, with the fix."""
    out = []
    if args["deferrable"] is False:
        out.append("deferrable=False: RetryingPodOperator always defers (it needs a running triggerer)")
    for key in ("reattach_on_restart", "durable"):
        if args[key] is False:
            out.append(f"{key}=False: a retried execute always re-attaches to its try's pod; drop it")
    if args["random_name_suffix"] is False:
        out.append("random_name_suffix=False: pod names always end in a per-try suffix; drop it")
    for key, extra in (
        ("in_cluster", "in_cluster"),
        ("cluster_context", "cluster_context"),
        ("config_file", "kube_config_path"),
    ):
        if args[key] is not None:
            out.append(f"{key}: the triggerer reads the cluster from the connection; set its extra {extra!r}")
    if args["trigger_kwargs"]:
        out.append("trigger_kwargs: the trigger is PodStateTrigger; use poll_interval or failure_policy")
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


@contextmanager
def local_config_errors(task_id: str, what: str = "") -> Iterator[None]:
    """Errors of local configuration (templates, connections, kubeconfig) fail the task at once:
    no retry can fix them. One line, naming what is wrong."""
    from airflow_k8s_retry.kube.errors import KubeError

    try:
        yield
    except (PodFailure, PodFailurePermanent, KubeError):
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        where = f" ({what})" if what else ""
        raise PodFailurePermanent(
            f"{task_id}: configuration error{where}: {type(exc).__name__}: {first}"
        ) from None


def failure_policy(
    task_id: str,
    policy: FailurePolicy | None,
    *,
    skip_on_exit_code: int | Container[int] | None,
    startup: float | None,
    schedule: float | None,
    relaunch_budget: int | None,
) -> FailurePolicy:
    """The operator's policy: ``failure_policy`` with the KPO-style arguments laid over it."""
    from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError

    if policy is not None and not isinstance(policy, FailurePolicy):
        raise PolicyError(
            f"{task_id}: failure_policy must be an airflow_k8s_retry.classification.policy."
            f"FailurePolicy, got {type(policy).__name__}"
        )
    changes: dict[str, Any] = {}
    if skip_on_exit_code is not None:
        # One code or several: FailurePolicy normalises both (and names the field when invalid).
        changes["skip_on_exit_codes"] = skip_on_exit_code
    if startup is not None:
        changes["startup_timeout"] = startup
    if schedule is not None:
        changes["schedule_timeout"] = schedule
    if relaunch_budget is not None:
        changes["relaunch_budget"] = relaunch_budget
    return dataclasses.replace(policy or FailurePolicy(), **changes)
