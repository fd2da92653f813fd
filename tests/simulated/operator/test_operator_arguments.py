"""RetryingPodOperator accepts KubernetesPodOperator's arguments (it is one) and refuses, in one
line each, the values that contradict its design."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from kubernetes.client import models as k8s

from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError
from airflow_k8s_retry.operators import RetryingPodOperator


@pytest.mark.fake_cluster(time_scale=0.05)
def test_kpo_names_reach_the_pod(tmp_path: Path, fake_cluster, context):
    template = tmp_path / "pod.yaml"
    template.write_text(
        "spec:\n  containers:\n    - name: base\n      image: from-template\n  priorityClassName: low\n"
    )
    op = RetryingPodOperator(
        task_id="load",
        cmds=["run"],
        arguments=["--all"],
        env_vars={"MODE": "full"},
        labels={"team": "data"},
        annotations={"owner": "data"},
        container_resources=k8s.V1ResourceRequirements(limits={"memory": "1Gi"}),
        node_selector={"pool": "batch"},
        tolerations=[{"key": "batch", "operator": "Exists"}],
        service_account_name="runner",
        image_pull_secrets=[k8s.V1LocalObjectReference(name="registry")],
        image_pull_policy="IfNotPresent",
        hostnetwork=True,
        dnspolicy="Default",
        schedulername="batch-scheduler",
        priority_class_name="high",
        termination_grace_period=3,
        active_deadline_seconds=900,
        pod_template_file=str(template),
        namespace="jobs",
        kubernetes_conn_id=None,
    )
    pod = op.build_try_pod(context)
    spec, base = pod["spec"], pod["spec"]["containers"][0]
    assert base["image"] == "from-template"
    assert (base["command"], base["args"]) == (["run"], ["--all"])
    assert base["env"] == [{"name": "MODE", "value": "full"}]
    assert base["resources"] == {"limits": {"memory": "1Gi"}}
    assert base["imagePullPolicy"] == "IfNotPresent"
    assert pod["metadata"]["labels"]["team"] == "data" and pod["metadata"]["annotations"]["owner"] == "data"
    assert spec["nodeSelector"] == {"pool": "batch"}
    assert spec["tolerations"] == [{"key": "batch", "operator": "Exists"}]
    assert spec["serviceAccountName"] == "runner"
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert (spec["hostNetwork"], spec["dnsPolicy"], spec["schedulerName"]) == (
        True,
        "Default",
        "batch-scheduler",
    )
    assert spec["priorityClassName"] == "high"  # the argument wins over the template
    assert (spec["terminationGracePeriodSeconds"], spec["activeDeadlineSeconds"]) == (3, 900)
    assert pod["metadata"]["namespace"] == "jobs"


def test_kpo_failure_arguments_go_into_the_policy():
    op = RetryingPodOperator(
        task_id="load",
        image="x",
        skip_on_exit_code=[3, 4],
        startup_timeout_seconds=60,
        schedule_timeout_seconds=30,
        failure_policy=FailurePolicy(grace={"image.not_found": 5}, fail_on_exit_codes=[2], relaunch_budget=1),
    )
    policy = op.failure_policy.to_payload()
    assert policy["skip_on_exit_codes"] == [3, 4]
    assert policy["fail_on_exit_codes"] == [2]
    assert (policy["startup_timeout"], policy["schedule_timeout"], policy["relaunch_budget"]) == (60, 30, 1)
    assert policy["grace"] == {"image.not_found": 5.0}


def test_the_arguments_that_said_what_kpo_arguments_say_are_gone():
    for removed in ({"keep_failed_pods": True}, {"relaunch_budget": 1}, {"live_logs": False}):
        with pytest.raises(TypeError, match=next(iter(removed))):
            RetryingPodOperator(task_id="a", image="x", **removed)
    assert RetryingPodOperator(task_id="b", image="x").on_finish_action == "delete_pod"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"on_finish_action": "delete"}, ValueError, "on_finish_action must be one of"),
        ({"failure_policy": {"grace": {}}}, PolicyError, "failure_policy must be"),
        ({"skip_on_exit_code": 256}, PolicyError, "skip_on_exit_codes"),
        ({"startup_timeout_seconds": 0}, PolicyError, "startup_timeout"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs, error, message):
    with pytest.raises(error, match=message):
        RetryingPodOperator(task_id="load", image="x", **kwargs)


def test_templated_fields_are_kubernetes_pod_operators():
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    assert issubclass(RetryingPodOperator, KubernetesPodOperator)
    assert RetryingPodOperator.template_fields == KubernetesPodOperator.template_fields


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"in_cluster": "yes"}, "in_cluster must be True, False or None, got 'yes'"),
        ({"logging_interval": 0}, "logging_interval must be a positive number of seconds or None, got 0"),
        ({"poll_interval": 0}, "poll_interval must be a positive number of seconds, got 0"),
    ],
)
def test_values_no_pod_can_run_with_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as refused:
        RetryingPodOperator(task_id="load", image="x", **kwargs)
    assert message in str(refused.value)
    assert str(refused.value).startswith("load: ") and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"reattach_on_restart": False},
            "load: reattach_on_restart=False is ignored: a restarted try always re-attaches to its own pod",
        ),
        ({"durable": False}, "load: durable=False is ignored: a restarted try always re-attaches"),
        (
            {"random_name_suffix": False},
            "load: random_name_suffix=False is ignored: pod names always end in a per-try suffix",
        ),
        ({"trigger_kwargs": {"x": 1}}, "load: trigger_kwargs is ignored: the trigger is PodStateTrigger"),
    ],
)
def test_kpo_arguments_without_meaning_here_are_accepted_with_one_warning(kwargs, message):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RetryingPodOperator(task_id="load", image="x", **kwargs)
    said = [str(w.message) for w in caught if str(w.message).startswith("load: ")]
    assert len(said) == 1 and said[0].startswith(message), said
    assert "\n" not in said[0]


def test_the_cluster_arguments_and_deferrable_false_are_accepted_with_their_meaning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op = RetryingPodOperator(
            task_id="t",
            image="x",
            in_cluster=False,
            config_file="/k",
            cluster_context="prod",
            deferrable=False,
        )
    assert not [w for w in caught if str(w.message).startswith("t: ")]
    assert (op.in_cluster, op.config_file, op.cluster_context, op.deferrable) == (False, "/k", "prod", False)


def test_reattach_on_restart_true_gives_kpos_deprecation_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RetryingPodOperator(task_id="t", image="x", reattach_on_restart=True)
    said = [w for w in caught if "reattach_on_restart" in str(w.message)]
    assert [type(w.message).__name__ for w in said] == ["AirflowProviderDeprecationWarning"]
    assert "`reattach_on_restart` is deprecated" in str(said[0].message)


def test_a_kpo_dag_with_kpo_default_args_parses():
    from airflow.sdk import DAG

    with DAG(
        "chatty",
        schedule=None,
        default_args={"in_cluster": False, "log_events_on_failure": True, "container_logs": True},
    ):
        op = RetryingPodOperator(task_id="t", image="x")
    assert op.in_cluster is False and op.log_events_on_failure is True


def test_default_args_reach_kpo_arguments():
    from airflow.sdk import DAG

    with DAG(
        "d",
        schedule=None,
        default_args={
            "container_logs": True,
            "log_events_on_failure": True,
            "termination_message_policy": "FallbackToLogsOnError",
            "deferrable": False,
            "cluster_context": "prod",
        },
    ):
        op = RetryingPodOperator(task_id="t", image="x")
    assert op.container_logs is True and op.log_events_on_failure is True
    assert op.termination_message_policy == "FallbackToLogsOnError"
    assert op.deferrable is False and op.cluster_context == "prod"


def test_every_kpo_argument_is_accepted():
    import inspect

    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    ours = inspect.signature(RetryingPodOperator.__init__).parameters
    kpo = [
        n
        for n, p in inspect.signature(KubernetesPodOperator.__init__).parameters.items()
        if n != "self" and p.kind is p.KEYWORD_ONLY
    ]
    assert len(kpo) == 73
    # Every KPO argument is a parameter here or goes on to KubernetesPodOperator.__init__ (**kwargs).
    assert any(p.kind is p.VAR_KEYWORD for p in ours.values())
