"""RetryingPodOperator accepts KubernetesPodOperator's argument names and wires each into the pod."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.client import models as k8s

from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.operators import RetryingPodOperator

IDENTITY = TryIdentity("etl", "load", "manual__1", try_number=1)


def test_kpo_names_reach_the_pod(tmp_path: Path):
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
    )
    pod = op.build_pod_request(IDENTITY, "jobs")
    spec, base = pod["spec"], pod["spec"]["containers"][0]
    assert base["image"] == "from-template"
    assert (base["command"], base["args"]) == (["run"], ["--all"])
    assert base["env"] == [{"name": "MODE", "value": "full"}]
    assert base["resources"] == {"limits": {"memory": "1Gi"}}
    assert base["imagePullPolicy"] == "IfNotPresent"
    assert pod["metadata"]["labels"]["team"] == "data" and pod["metadata"]["annotations"] == {"owner": "data"}
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


def test_templated_fields_match_kubernetes_pod_operator():
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    ours = set(RetryingPodOperator.template_fields)
    missing = set(KubernetesPodOperator.template_fields) - ours
    # Cluster selection lives in the connection here; pod names are deterministic (no ``name``);
    # the trigger is this package's own (no ``trigger_kwargs``).
    assert missing <= {"config_file", "cluster_context", "name", "trigger_kwargs"}
