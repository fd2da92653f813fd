"""How the operator and the sensor hand a failed try to Airflow's retry policies (Airflow 3.3+).

Each cause raises its family's exception class; the task's ``retry_policy`` is the package's
``PodFailureRetryPolicy`` unless the author set one, and an author's policy is consulted first with
the package's after it; a retry rule that contradicts the failure policy fails the DAG's import. On
Airflow 3.1 and 3.2 ``retry_policy`` is ignored with one warning. Runs on every supported minor.
"""

from __future__ import annotations

import importlib
import pickle
import warnings
from datetime import timedelta

import pytest

from airflow_k8s_retry import exceptions
from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.compat import HAS_RETRY_POLICIES, AirflowFailException
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent, exception_for, failure_class
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.retry_policy import PodFailureRetryPolicy, RetryPolicyError
from airflow_k8s_retry.sensors import PodCompletionSensor

needs_policies = pytest.mark.skipif(not HAS_RETRY_POLICIES, reason="retry policies are Airflow 3.3+")


def failed(reason: Reason, message: str = "it broke", outcome: Outcome = Outcome.RETRY) -> BaseException:
    verdict = Verdict(outcome, reason, message, "rule")
    return exception_for(verdict, f"pod ns/p: {reason.value}: {message}")


# -- exceptions by cause ----------------------------------------------------------------------


#: Reasons of waiting verdicts only: no rule fails a pod under them.
WAITING_ONLY = (Reason.SUCCEEDED, Reason.RUNNING, Reason.STARTING)
WAITING_ONLY += (Reason.RESIZE_INFEASIBLE, Reason.STATUS_BEHIND_SPEC)


@pytest.mark.parametrize("reason", [r for r in Reason if r not in WAITING_ONLY])
def test_every_failing_reason_raises_a_family_class_named_in_the_module(reason: Reason) -> None:
    raised = failed(reason)
    assert type(raised) is not PodFailure, f"{reason.value} has no family"
    assert isinstance(raised, PodFailure)
    assert raised.reason == reason.value
    # The dotted name a RetryRule takes resolves to the same class.
    module, _, name = f"{type(raised).__module__}.{type(raised).__qualname__}".rpartition(".")
    assert getattr(importlib.import_module(module), name) is type(raised)
    assert name in (exceptions.__doc__ or "")


def test_the_families_are_named_after_their_cause() -> None:
    assert failure_class("container.oom").__name__ == "PodOOMKilled"
    assert (
        failure_class("image.rate_limited") is failure_class("image.not_found") is exceptions.ImagePullFailure
    )
    assert failure_class("config.missing_secret") is exceptions.PodConfigFailure
    assert failure_class("node.lost") is failure_class("node.disruption") is exceptions.NodeDisruptionFailure
    assert failure_class("api.quota_exceeded") is exceptions.PodCreateFailure
    assert failure_class("pod.deleted_externally") is exceptions.PodDeletedExternally
    assert (
        failure_class("container.exit_code") is failure_class("pod.failed") is exceptions.ContainerExitFailure
    )
    assert failure_class("something.new") is PodFailure


def test_a_permanent_cause_stays_an_airflow_fail_exception_with_its_verdict() -> None:
    raised = failed(Reason.IMAGE_INVALID_NAME, outcome=Outcome.FAIL)
    assert type(raised) is PodFailurePermanent
    assert isinstance(raised, AirflowFailException)
    assert raised.reason == "image.invalid_name"


# -- the policy the operator and the sensor run with ------------------------------------------


@needs_policies
def test_without_a_retry_policy_the_operator_and_the_sensor_use_the_packages() -> None:
    op = RetryingPodOperator(task_id="t", image="busybox")
    sensor = PodCompletionSensor(task_id="s", pod_name="p")
    assert op.retry_policy == PodFailureRetryPolicy() == sensor.retry_policy
    assert op.has_retry_policy is True


@needs_policies
def test_the_default_policy_names_the_cause_and_sets_its_delay() -> None:
    policy = PodFailureRetryPolicy()
    decision = policy.evaluate(failed(Reason.IMAGE_RATE_LIMITED, "toomanyrequests"), 2, 4)
    assert (decision.action.value, decision.retry_delay, decision.reason) == (
        "retry",
        timedelta(seconds=1200),
        "image.rate_limited: toomanyrequests",
    )
    decision = policy.evaluate(failed(Reason.CONTAINER_OOM, "x" * 900), 1, 4)
    assert decision.retry_delay is None  # the task's own retry_delay
    assert decision.reason == ("container.oom: " + "x" * 900)[:500]
    assert policy.evaluate(KeyError("not a pod's failure"), 1, 4).action.value == "default"


@needs_policies
def test_an_authors_exception_policy_is_consulted_first_and_the_cause_still_named() -> None:
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

    mine = ExceptionRetryPolicy(
        rules=[RetryRule(exception="airflow_k8s_retry.exceptions.PodOOMKilled", action=RetryAction.FAIL)]
    )
    op = RetryingPodOperator(task_id="t", image="busybox", retry_policy=mine)
    assert op.retry_policy.policies == [mine, PodFailureRetryPolicy()]
    oom = op.retry_policy.evaluate(failed(Reason.CONTAINER_OOM, "killed at 2Gi"), 1, 4)
    assert oom.action is RetryAction.FAIL
    assert oom.reason == (
        "container.oom: killed at 2Gi (decided by ExceptionRetryPolicy: Matched rule for PodOOMKilled)"
    )
    # What the author's policy leaves to Airflow, the package's decides, under its own name.
    lost = op.retry_policy.evaluate(failed(Reason.NODE_LOST, "node gone"), 1, 4)
    assert (lost.action, lost.retry_delay, lost.reason) == (
        RetryAction.RETRY,
        timedelta(0),
        "node.lost: node gone",
    )
    # The chain survives the copies and pickles Airflow makes of a task.
    assert pickle.loads(pickle.dumps(op.retry_policy)).policies[1] == PodFailureRetryPolicy()


@needs_policies
def test_an_authors_pod_failure_policy_or_a_chain_holding_one_is_used_as_given() -> None:
    from airflow.providers.common.compat.sdk import ChainRetryPolicy

    own = PodFailureRetryPolicy({"container.oom": "fail"})
    assert RetryingPodOperator(task_id="t", image="busybox", retry_policy=own).retry_policy is own
    chain = ChainRetryPolicy([own])
    assert RetryingPodOperator(task_id="u", image="busybox", retry_policy=chain).retry_policy is chain


@needs_policies
def test_the_policy_round_trips_through_its_serialized_form() -> None:
    policy = PodFailureRetryPolicy({"container.oom": "fail", "image": timedelta(minutes=1)}, defaults=False)
    assert policy.serialize() == {
        "__type": "PodFailureRetryPolicy",
        "rules": {
            "container.oom": {"action": "fail"},
            "image": {"action": "retry", "delay": {"kind": "fixed", "seconds": 60.0}},
        },
        "defaults": False,
    }
    assert PodFailureRetryPolicy.deserialize(policy.serialize()) == policy


@needs_policies
def test_a_dag_with_retry_policies_serializes_for_the_scheduler() -> None:
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("policies", schedule=None) as dag:
        RetryingPodOperator(task_id="t", image="busybox")
    serialized = DagSerialization.to_dict(dag)
    (task,) = serialized["dag"]["tasks"]
    assert task["__var"].get("has_retry_policy") is True


@needs_policies
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"retry_policy": "fast"},
            "t: retry_policy must be an Airflow RetryPolicy (for example PodFailureRetryPolicy(...) or "
            "ExceptionRetryPolicy(...)), got str",
        ),
        (
            {"retry_policy": PodFailureRetryPolicy({"image.invalid_name": 60})},
            "t: retry_policy rule 'image.invalid_name' retries a cause the failure policy ends with 'fail', "
            "which Airflow never retries; remove the rule, or set "
            "failure_policy=FailurePolicy(outcomes={'image.invalid_name': 'retry'})",
        ),
        (
            {"retry_policy": PodFailureRetryPolicy({"api.rejected": "retry"})},
            "t: retry_policy rule 'api.rejected' retries a cause the failure policy ends with 'fail'",
        ),
        (
            {
                "retry_policy": PodFailureRetryPolicy({"image.unauthorized": 30}),
                "failure_policy": __import__(
                    "airflow_k8s_retry.classification.policy", fromlist=["FailurePolicy"]
                ).FailurePolicy(outcomes={"image.unauthorized": "fail"}),
            },
            "t: retry_policy rule 'image.unauthorized' retries a cause the failure policy ends with 'fail'",
        ),
    ],
)
def test_a_contradiction_between_the_policies_fails_the_dag_import(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(RetryPolicyError) as raised:
        RetryingPodOperator(task_id="t", image="busybox", **kwargs)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@needs_policies
def test_a_rule_that_only_narrows_the_failure_policy_is_accepted() -> None:
    from airflow_k8s_retry.classification.policy import FailurePolicy

    # Failing a retryable cause at once, and retrying what the failure policy made retryable, are fine.
    RetryingPodOperator(task_id="a", image="b", retry_policy=PodFailureRetryPolicy({"container.oom": "fail"}))
    RetryingPodOperator(
        task_id="c",
        image="b",
        retry_policy=PodFailureRetryPolicy({"image.invalid_name": 60}),
        failure_policy=FailurePolicy(outcomes={"image.invalid_name": "retry"}),
    )
    # An exit code fails only for the codes listed: the others still retry.
    RetryingPodOperator(
        task_id="d",
        image="b",
        retry_policy=PodFailureRetryPolicy({"container.exit_code": 10}),
        failure_policy=FailurePolicy(fail_on_exit_codes=[2]),
    )


@pytest.mark.skipif(HAS_RETRY_POLICIES, reason="Airflow 3.3+ takes retry_policy")
def test_before_airflow_3_3_a_retry_policy_is_ignored_with_one_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op = RetryingPodOperator(task_id="t", image="busybox", retry_policy=PodFailureRetryPolicy())
        PodCompletionSensor(task_id="s", pod_name="p", retry_policy=PodFailureRetryPolicy())
    said = [str(w.message) for w in caught if "retry_policy" in str(w.message)]
    rest = (
        "retry_policy needs Airflow 3.3 or later and is ignored here; "
        "retries and retry_delay apply as written"
    )
    assert said == [f"t: {rest}", f"s: {rest}"]
    assert getattr(op, "retry_policy", None) is None
