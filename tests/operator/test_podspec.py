"""Pod building: every KubernetesPodOperator-style argument lands in the right place of the pod JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes.client import models as k8s

from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.kube.podspec import (
    XCOM_SIDECAR_NAME,
    PodArguments,
    PodSpecError,
    build_pod,
    load_pod_template,
)

IDENTITY = TryIdentity(dag_id="etl", task_id="load", run_id="manual__1", try_number=2)


def build(args: PodArguments) -> dict:
    return build_pod(args, name=IDENTITY.pod_name(), namespace="jobs", identity_labels=IDENTITY.labels())


def base(pod: dict) -> dict:
    return pod["spec"]["containers"][0]


@dataclass
class Secret:
    """The shape of airflow.providers.cncf.kubernetes.secret.Secret."""

    deploy_type: str
    deploy_target: str | None
    secret: str
    key: str | None = None
    items: list | None = None


def test_minimal_pod_is_small_and_named_for_the_try():
    pod = build(PodArguments(image="busybox"))
    assert pod["metadata"]["name"] == IDENTITY.pod_name()
    assert pod["metadata"]["namespace"] == "jobs"
    assert pod["metadata"]["labels"] == IDENTITY.labels()
    assert pod["spec"] == {"containers": [{"name": "base", "image": "busybox"}], "restartPolicy": "Never"}


def test_container_arguments():
    pod = build(
        PodArguments(
            image="python:3.12",
            cmds=["python", "-c"],
            arguments=["print(1)"],
            env_vars={"A": "1", "B": None},
            env_from=[k8s.V1EnvFromSource(config_map_ref=k8s.V1ConfigMapEnvSource(name="cfg"))],
            ports=[k8s.V1ContainerPort(container_port=8080, name="http")],
            container_resources=k8s.V1ResourceRequirements(
                requests={"cpu": "100m"}, limits={"memory": "1Gi"}
            ),
            image_pull_policy="Always",
            container_security_context={"runAsNonRoot": True},
            configmaps=["more"],
        )
    )
    c = base(pod)
    assert c["command"] == ["python", "-c"]
    assert c["args"] == ["print(1)"]
    assert c["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": ""}]
    assert c["envFrom"] == [{"configMapRef": {"name": "cfg"}}, {"configMapRef": {"name": "more"}}]
    assert c["ports"] == [{"containerPort": 8080, "name": "http"}]
    assert c["resources"] == {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}}
    assert c["imagePullPolicy"] == "Always"
    assert c["securityContext"] == {"runAsNonRoot": True}


def test_env_vars_as_model_objects_and_dicts():
    pod = build(
        PodArguments(
            image="x",
            env_vars=[
                k8s.V1EnvVar(name="A", value="1"),
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
        )
    )
    assert base(pod)["env"] == [
        {"name": "A", "value": "1"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]


def test_pod_level_arguments():
    pod = build(
        PodArguments(
            image="x",
            labels={"team": "data"},
            annotations={"note": "hi"},
            volumes=[k8s.V1Volume(name="scratch", empty_dir=k8s.V1EmptyDirVolumeSource())],
            volume_mounts=[k8s.V1VolumeMount(name="scratch", mount_path="/scratch")],
            node_selector={"pool": "batch"},
            affinity={
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
            },
            tolerations=[k8s.V1Toleration(key="batch", operator="Exists", effect="NoSchedule")],
            service_account_name="runner",
            automount_service_account_token=False,
            image_pull_secrets="reg1, reg2",
            init_containers=[k8s.V1Container(name="init", image="busybox", command=["true"])],
            security_context=k8s.V1PodSecurityContext(run_as_user=1000),
            host_network=True,
            dns_policy="ClusterFirstWithHostNet",
            hostname="h",
            subdomain="s",
            scheduler_name="sched",
            priority_class_name="high",
            runtime_class_name="gvisor",
            termination_grace_period=5,
            active_deadline_seconds=600,
        )
    )
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "data" and meta["labels"]["try_number"] == "2"
    assert meta["annotations"] == {"note": "hi"}
    assert spec["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert base(pod)["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert spec["nodeSelector"] == {"pool": "batch"}
    assert "nodeAffinity" in spec["affinity"]
    assert spec["tolerations"] == [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["serviceAccountName"] == "runner"
    assert spec["automountServiceAccountToken"] is False
    assert spec["imagePullSecrets"] == [{"name": "reg1"}, {"name": "reg2"}]
    assert spec["initContainers"] == [{"name": "init", "image": "busybox", "command": ["true"]}]
    assert spec["securityContext"] == {"runAsUser": 1000}
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert (spec["hostname"], spec["subdomain"], spec["schedulerName"]) == ("h", "s", "sched")
    assert (spec["priorityClassName"], spec["runtimeClassName"]) == ("high", "gvisor")
    assert (spec["terminationGracePeriodSeconds"], spec["activeDeadlineSeconds"]) == (5, 600)
    assert spec["restartPolicy"] == "Never"


def test_identity_labels_win_over_user_labels():
    pod = build(PodArguments(image="x", labels={"try_number": "99", "dag_id": "other"}))
    assert pod["metadata"]["labels"]["try_number"] == "2"
    assert pod["metadata"]["labels"]["dag_id"] == "etl"


def test_secrets_in_env_and_volumes():
    pod = build(
        PodArguments(
            image="x",
            secrets=[
                Secret("env", "DB_PASSWORD", "db", "password"),
                Secret("env", None, "all-of-it"),
                Secret("volume", "/etc/creds", "creds"),
            ],
        )
    )
    c = base(pod)
    assert {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}} in c[
        "env"
    ]
    assert c["envFrom"] == [{"secretRef": {"name": "all-of-it"}}]
    assert pod["spec"]["volumes"] == [{"name": "secretvol-creds", "secret": {"secretName": "creds"}}]
    assert c["volumeMounts"] == [{"name": "secretvol-creds", "mountPath": "/etc/creds", "readOnly": True}]


def test_xcom_sidecar_follows_the_cncf_convention():
    pod = build(PodArguments(image="x", do_xcom_push=True))
    names = [c["name"] for c in pod["spec"]["containers"]]
    assert names == ["base", XCOM_SIDECAR_NAME]
    assert {"name": "xcom", "emptyDir": {}} in pod["spec"]["volumes"]
    assert {"name": "xcom", "mountPath": "/airflow/xcom"} in base(pod)["volumeMounts"]


TEMPLATE = """
apiVersion: v1
kind: Pod
metadata:
  name: ignored
  generateName: also-ignored-
  labels: {from_template: "yes", try_number: "7"}
spec:
  serviceAccountName: template-sa
  restartPolicy: Always
  volumes: [{name: data, emptyDir: {}}]
  containers:
    - name: base
      image: template-image
      env: [{name: FROM_TEMPLATE, value: "1"}, {name: SHARED, value: template}]
      volumeMounts: [{name: data, mountPath: /data}]
    - name: helper
      image: helper-image
"""


def test_pod_template_file_is_the_base_and_arguments_win(tmp_path: Path):
    path = tmp_path / "pod.yaml"
    path.write_text(TEMPLATE)
    pod = build(
        PodArguments(
            pod_template=load_pod_template(path),
            env_vars={"SHARED": "operator", "MINE": "1"},
            service_account_name=None,
        )
    )
    assert pod["metadata"]["name"] == IDENTITY.pod_name()
    assert "generateName" not in pod["metadata"]
    assert pod["metadata"]["labels"]["from_template"] == "yes"
    assert pod["metadata"]["labels"]["try_number"] == "2"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == "template-sa"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["base", "helper"]
    c = base(pod)
    assert c["image"] == "template-image"
    assert c["env"] == [
        {"name": "FROM_TEMPLATE", "value": "1"},
        {"name": "SHARED", "value": "operator"},
        {"name": "MINE", "value": "1"},
    ]
    assert c["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_full_pod_spec_merges_over_the_template_and_under_the_arguments(tmp_path: Path):
    path = tmp_path / "pod.yaml"
    path.write_text(TEMPLATE)
    full = k8s.V1Pod(
        spec=k8s.V1PodSpec(
            service_account_name="full-sa",
            node_selector={"disk": "ssd"},
            containers=[k8s.V1Container(name="base", image="full-image")],
        )
    )
    pod = build(PodArguments(pod_template=load_pod_template(path), full_pod_spec=full, image="arg-image"))
    assert pod["spec"]["serviceAccountName"] == "full-sa"
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert base(pod)["image"] == "arg-image"


def test_template_base_container_can_have_another_name():
    template = {"spec": {"containers": [{"name": "main", "image": "t"}]}}
    pod = build(PodArguments(pod_template=template, cmds=["run"]))
    assert pod["spec"]["containers"] == [{"name": "main", "image": "t", "command": ["run"]}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (PodArguments(), "no image"),
        (PodArguments(image=" busybox"), "surrounding spaces"),
        (PodArguments(image="x", cmds="echo hi"), "cmds must be a list of strings"),
        (PodArguments(image="x", arguments=["a", 1]), "arguments must be a list of strings"),
        (PodArguments(image="x", env_vars="A=1"), "env_vars must be a list"),
        (PodArguments(image="x", env_vars=[{"value": "1"}]), "needs a name"),
        (PodArguments(image="x", labels={"a": ["b"]}), "labels['a'] must be a string"),
        (PodArguments(image="x", container_resources={"request": {}}), "use 'requests' and 'limits'"),
        (PodArguments(image="x", volume_mounts=[{"name": "v", "mountPath": "/v"}]), "not in volumes"),
        (PodArguments(image="x", secrets=["db"]), "cncf.kubernetes.secret.Secret"),
        (PodArguments(image="x", secrets=[Secret("volume", None, "s")]), "needs deploy_target"),
        (PodArguments(image="x", image_pull_secrets=[{"nam": "x"}]), "needs a name"),
        (PodArguments(image="x", affinity=object()), "cannot use a object in a pod"),
        (PodArguments(image="x", pod_template={"kind": "Deployment"}), "must be kind: Pod"),
        (PodArguments(image="x", full_pod_spec=[1]), "must hold one Pod object"),
    ],
)
def test_bad_input_is_named(args: PodArguments, message: str):
    with pytest.raises(PodSpecError, match=message.replace("[", r"\[").replace("(", r"\(")):
        build(args)


def test_pod_template_file_errors(tmp_path: Path):
    with pytest.raises(PodSpecError, match="does not exist"):
        load_pod_template(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed")
    with pytest.raises(PodSpecError, match="not valid YAML"):
        load_pod_template(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(PodSpecError, match="one Pod object"):
        load_pod_template(listy)
