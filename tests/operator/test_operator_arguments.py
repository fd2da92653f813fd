"""RetryingPodOperator accepts KubernetesPodOperator's arguments (it is one) and refuses, in one
line each, the values that contradict its design."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.client import models as k8s

from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError
from airflow_k8s_retry.operators import RetryingPodOperator


def test_kpo_names_reach_the_pod(tmp_path: Path, make_cluster, context):
    make_cluster()
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
        relaunch_budget=1,
        failure_policy=FailurePolicy(grace={"image.not_found": 5}, fail_on_exit_codes=[2]),
    )
    policy = op.failure_policy.to_payload()
    assert policy["skip_on_exit_codes"] == [3, 4]
    assert policy["fail_on_exit_codes"] == [2]
    assert (policy["startup_timeout"], policy["schedule_timeout"], policy["relaunch_budget"]) == (60, 30, 1)
    assert policy["grace"] == {"image.not_found": 5.0}


def test_keep_failed_pods_is_delete_succeeded_pod():
    assert (
        RetryingPodOperator(task_id="a", image="x", keep_failed_pods=True).on_finish_action
        == "delete_succeeded_pod"
    )
    assert RetryingPodOperator(task_id="b", image="x").on_finish_action == "delete_pod"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"on_finish_action": "delete"}, ValueError, "on_finish_action must be one of"),
        ({"failure_policy": {"grace": {}}}, PolicyError, "failure_policy must be"),
        ({"relaunch_budget": -1}, PolicyError, "relaunch_budget must be a whole number"),
        ({"skip_on_exit_code": 0}, PolicyError, "skip_on_exit_codes"),
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
        ({"deferrable": False}, "deferrable=False: RetryingPodOperator always defers"),
        (
            {"in_cluster": True},
            "in_cluster: the triggerer reads the cluster from the connection; set its extra 'in_cluster'",
        ),
        ({"cluster_context": "prod"}, "set its extra 'cluster_context'"),
        ({"config_file": "/k"}, "set its extra 'kube_config_path'"),
        ({"reattach_on_restart": False}, "reattach_on_restart=False: a retried execute always re-attaches"),
        ({"durable": False}, "durable=False"),
        ({"random_name_suffix": False}, "random_name_suffix=False"),
        ({"trigger_kwargs": {"x": 1}}, "trigger_kwargs: the trigger is PodStateTrigger"),
        ({"logging_interval": 0}, "logging_interval must be a positive number of seconds or None, got 0"),
        ({"poll_interval": 0}, "poll_interval must be a positive number of seconds, got 0"),
    ],
)
def test_arguments_that_contradict_the_design_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as refused:
        RetryingPodOperator(task_id="load", image="x", **kwargs)
    assert message in str(refused.value)
    assert str(refused.value).startswith("load: ") and "\n" not in str(refused.value)


def test_default_args_reach_kpo_arguments_and_refusals():
    from airflow.sdk import DAG

    with DAG(
        "d",
        schedule=None,
        default_args={
            "container_logs": True,
            "log_events_on_failure": True,
            "termination_message_policy": "FallbackToLogsOnError",
        },
    ):
        op = RetryingPodOperator(task_id="t", image="x")
    assert op.container_logs is True and op.log_events_on_failure is True
    assert op.termination_message_policy == "FallbackToLogsOnError"
    with (
        DAG("e", schedule=None, default_args={"deferrable": False}),
        pytest.raises(ValueError, match="deferrable"),
    ):
        RetryingPodOperator(task_id="t", image="x")


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
