"""The pod RetryingPodOperator submits is the pod KubernetesPodOperator builds, for the same arguments.

For each argument set, both operators are constructed with the same keyword arguments, rendered
with the same Jinja context, and built: KPO with its own ``build_pod_request_obj``, ours with
``build_try_pod`` (exactly what ``execute`` sends to ``create_namespaced_pod``). The two pods must
be equal except for the documented, intended differences:

- ``metadata.name``: KPO appends a random suffix, this package a per-try one (``name`` is the prefix);
- labels under ``airflow-k8s-retry.io/`` (managed, relaunch, deployment);
- the annotation ``airflow-k8s-retry.io/ti-id`` (the task instance try the pod belongs to);
- the annotation ``airflow-k8s-retry.io/base-container`` (``base_container_name``: the container
  whose ending decides the task, so a sidecar never does).

Together the sets pass every one of KPO's 73 arguments at least once.
"""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.secret import Secret
from kubernetes.client import models as k8s

from airflow_k8s_retry.operators import RetryingPodOperator

OURS = "airflow-k8s-retry.io/"
TEMPLATE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"namespace": "etl-jobs", "labels": {"from": "template"}, "annotations": {"t": "1"}},
    "spec": {
        "serviceAccountName": "etl-runner",
        "containers": [
            {
                "name": "main",
                "image": "registry.example.com/etl-main:1",
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/etl/a.ini", "subPath": "a.ini"}],
                "env": [{"name": "FROM_TEMPLATE", "value": "yes"}],
            },
            {"name": "cloud-sql-proxy", "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2"},
        ],
        "volumes": [{"name": "cfg", "configMap": {"name": "etl-config"}}],
        "tolerations": [{"key": "batch", "operator": "Exists"}],
    },
}


class Callbacks:  # a KubernetesPodOperatorCallback subclass is what KPO expects; any class will do here
    pass


def argument_sets(tmp: Path) -> dict[str, dict[str, Any]]:
    template_file = tmp / "pod.yaml"
    template_file.write_text(json.dumps(TEMPLATE))
    return {
        "plain": {"image": "busybox:1.36", "cmds": ["sh", "-c"], "arguments": ["echo hi"]},
        "templated strings": {
            "image": "busybox:{{ params.tag }}",
            "arguments": ["--date", "{{ ds }}"],
            "params": {"tag": "1.36"},
        },
        "name prefix": {"image": "x", "name": "extract-sales"},
        "env dict templated": {
            "image": "x",
            "env_vars": {"DS": "{{ ds }}", "{{ params.k }}": "v"},
            "params": {"k": "KEY"},
        },
        "env V1EnvVar templated": {"image": "x", "env_vars": [k8s.V1EnvVar(name="DS", value="{{ ds }}")]},
        "resources templated": {
            "image": "x",
            "params": {"mem": "2Gi"},
            "container_resources": k8s.V1ResourceRequirements(limits={"memory": "{{ params.mem }}"}),
        },
        "volumes templated": {
            "image": "x",
            "volumes": [
                k8s.V1Volume(
                    name="data",
                    persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                        claim_name="pvc-{{ ds_nodash }}"
                    ),
                )
            ],
            "volume_mounts": [k8s.V1VolumeMount(name="data", mount_path="/data", sub_path="{{ ds_nodash }}")],
        },
        "env_from templated": {
            "image": "x",
            "params": {"env": "prod"},
            "env_from": [
                k8s.V1EnvFromSource(config_map_ref=k8s.V1ConfigMapEnvSource(name="cfg-{{ params.env }}"))
            ],
        },
        "configmaps": {"image": "x", "configmaps": ["cm-a", "cm-b"]},
        "env secret": {"image": "x", "secrets": [Secret("env", "DB_PASSWORD", "db-credentials", "password")]},
        "volume secrets of one Secret": {
            "image": "x",
            "secrets": [
                Secret("volume", "/etc/sql_conn", "airflow-secrets", "sql_alchemy_conn"),
                Secret("volume", "/etc/tls", "tls.example.com"),
                Secret("volume", "/etc/tls2", "tls.example.com"),
            ],
        },
        "ports": {"image": "x", "ports": [k8s.V1ContainerPort(container_port=8080, name="http")]},
        "labels and annotations": {
            "image": "x",
            "labels": {"team": "data", "ok": True},
            "annotations": {"owner": "{{ params.o }}"},
            "params": {"o": "data"},
        },
        "scheduling": {
            "image": "x",
            "node_selector": {"pool": "batch"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            },
            "tolerations": [k8s.V1Toleration(key="batch", operator="Exists")],
            "priority_class_name": "high",
            "schedulername": "batch-scheduler",
            "runtime_class_name": "gvisor",
        },
        "identity": {
            "image": "x",
            "service_account_name": "runner",
            "automount_service_account_token": False,
            "image_pull_secrets": "reg-a,reg-b",
            "image_pull_policy": "Always",
        },
        "network": {
            "image": "x",
            "hostnetwork": True,
            "dnspolicy": "ClusterFirstWithHostNet",
            "dns_config": k8s.V1PodDNSConfig(nameservers=["10.0.0.10"]),
            "hostname": "{{ params.h }}",
            "subdomain": "jobs",
            "host_aliases": [k8s.V1HostAlias(ip="10.1.1.1", hostnames=["db"])],
            "params": {"h": "worker"},
        },
        "security": {
            "image": "x",
            "security_context": {"runAsNonRoot": True},
            "container_security_context": {"allowPrivilegeEscalation": False},
        },
        "lifetime": {
            "image": "x",
            "termination_grace_period": 45,
            "active_deadline_seconds": 3600,
            "termination_message_policy": "FallbackToLogsOnError",
        },
        "init containers": {"image": "x", "init_containers": [k8s.V1Container(name="init", image="busybox")]},
        "runtime info env": {
            "image": "x",
            "pod_runtime_info_envs": [
                k8s.V1EnvVar(
                    name="POD_IP",
                    value_from=k8s.V1EnvVarSource(
                        field_ref=k8s.V1ObjectFieldSelector(field_path="status.podIP")
                    ),
                )
            ],
        },
        "template file": {
            "pod_template_file": str(template_file),
            "cmds": ["run"],
            "volume_mounts": [k8s.V1VolumeMount(name="cfg", mount_path="/etc/etl/b.ini", sub_path="b.ini")],
        },
        "template dict": {"pod_template_dict": TEMPLATE, "image": "override:2", "env_vars": {"A": "1"}},
        "template with namespace arg": {"pod_template_dict": TEMPLATE, "namespace": "other"},
        "full pod spec": {
            "full_pod_spec": k8s.V1Pod(
                spec=k8s.V1PodSpec(
                    containers=[k8s.V1Container(name="base", image="full:1", args=["a"])],
                    node_selector={"disk": "ssd"},
                )
            ),
            "arguments": ["b"],
        },
        "template and full pod spec": {
            "pod_template_dict": TEMPLATE,
            "full_pod_spec": k8s.V1Pod(metadata=k8s.V1ObjectMeta(labels={"full": "spec"})),
        },
        "xcom sidecar": {"image": "x", "do_xcom_push": True},
        "xcom sidecar security context": {
            "image": "x",
            "do_xcom_push": True,
            "xcom_sidecar_container_security_context": {"runAsUser": 1000},
        },
        "base container name": {
            "image": "x",
            "base_container_name": "{{ params.c }}",
            "params": {"c": "job"},
        },
        "namespace and connection": {
            "image": "x",
            "namespace": "{{ params.ns }}",
            "params": {"ns": "etl"},
            "kubernetes_conn_id": "kubernetes_default",
        },
        "logs and events": {
            "image": "x",
            "get_logs": False,
            "container_logs": True,
            "init_container_logs": True,
            "log_events_on_failure": True,
            "log_events_on_startup": False,
            "log_pod_spec_on_failure": False,
            "container_name_log_prefix_enabled": False,
            "log_formatter": None,
        },
        "polling and timeouts": {
            "image": "x",
            "startup_timeout_seconds": 300,
            "startup_check_interval_seconds": 2,
            "schedule_timeout_seconds": 120,
            "base_container_status_polling_interval": 2,
            "poll_interval": 5,
        },
        "finish and kill": {
            "image": "x",
            "on_finish_action": "delete_succeeded_pod",
            "on_kill_action": "keep_pod",
            "skip_on_exit_code": [99],
            "is_delete_operator_pod": None,
        },
        "callbacks": {"image": "x", "callbacks": [], "progress_callback": None},
        "values the design accepts": {
            "image": "x",
            "deferrable": True,
            "durable": True,
            "random_name_suffix": True,
            "in_cluster": None,
            "cluster_context": None,
            "config_file": None,
            "trigger_kwargs": None,
            "logging_interval": None,
        },
        "reattach_on_restart": {"image": "x", "reattach_on_restart": True},
    }


@pytest.fixture
def connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``kubernetes_default`` connection with KPO's sidecar extras; nothing is called on it."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    extra = {
        "kube_config_path": str(kubeconfig),
        "namespace": "from-connection",
        "xcom_sidecar_container_image": "mirror.example.com/alpine:3.24.2",
        "xcom_sidecar_container_resources": json.dumps({"requests": {"cpu": "10m"}}),
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )


class TI:
    dag_id = "parity"
    task_id = "t"
    run_id = "manual__2026-12-01T01:50:54.277162+00:00"
    map_index = -1
    try_number = 2
    id = "0199a1b2-0000-7000-8000-00000000abcd"


def build_both(kwargs: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from airflow.sdk import DAG

    context: dict[str, Any] = {
        "ti": TI(),
        "run_id": TI.run_id,
        "dag": None,
        "ds": "2026-12-01",
        "ds_nodash": "20261201",
    }
    pods = []
    for cls in (KubernetesPodOperator, RetryingPodOperator):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with DAG(f"parity_{cls.__name__}", schedule=None):
                op = cls(task_id="t", **kwargs)
        context["params"] = dict(op.params)
        op.render_template_fields(context)
        if cls is KubernetesPodOperator:
            pod = op.hook.api_client.sanitize_for_serialization(op.build_pod_request_obj(context))
        else:
            pod = op.build_try_pod(context)
        pods.append(pod)
    return pods[0], pods[1]


def without_intended_differences(pod: dict[str, Any]) -> dict[str, Any]:
    pod = json.loads(json.dumps(pod))
    meta = pod["metadata"]
    meta.pop("name")
    meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(OURS)}
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(OURS)}
    for volume in pod["spec"].get("volumes") or []:  # KPO names secret volumes by uuid4
        if volume["name"].startswith("secretvol"):
            volume["name"] = "secretvol"
    for container in pod["spec"].get("containers") or []:
        for mount in container.get("volumeMounts") or []:
            if mount["name"].startswith("secretvol"):
                mount["name"] = "secretvol"
    return pod


def _names() -> list[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return sorted(argument_sets(Path(tmp)))


SETS = _names()


@pytest.mark.parametrize("name", SETS)
def test_the_submitted_pod_is_kpos_pod(name, tmp_path, connection):
    kwargs = argument_sets(tmp_path)[name]
    kpo, ours = build_both(kwargs, tmp_path)
    assert without_intended_differences(ours) == without_intended_differences(kpo)
    # The intended differences are exactly these.
    assert ours["metadata"]["name"].endswith("-t2")
    assert ours["metadata"]["labels"][f"{OURS}managed"] == "true"
    assert ours["metadata"]["annotations"][f"{OURS}ti-id"] == TI.id
    # KPO's base container is its first container, named base_container_name.
    assert ours["metadata"]["annotations"][f"{OURS}base-container"] == kpo["spec"]["containers"][0]["name"]
    if kwargs.get("name"):
        assert ours["metadata"]["name"].startswith("extract-sales-")


def test_the_sets_use_every_kpo_argument(tmp_path):
    kpo = {
        n
        for n, p in inspect.signature(KubernetesPodOperator.__init__).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    used = set().union(*(kwargs.keys() for kwargs in argument_sets(tmp_path).values()))
    assert len(kpo) == 73
    assert kpo - used == set()
    assert len(SETS) >= 30


def test_what_the_review_found_different_is_now_the_same(tmp_path, connection):
    """The gaps that silently changed a migrated DAG, read off our pod directly."""
    sets = argument_sets(tmp_path)
    _, env = build_both(sets["env V1EnvVar templated"], tmp_path)
    assert env["spec"]["containers"][0]["env"] == [{"name": "DS", "value": "2026-12-01"}]
    _, templated = build_both(sets["template file"], tmp_path)
    assert templated["metadata"]["namespace"] == "etl-jobs"
    assert [c["name"] for c in templated["spec"]["containers"]] == ["base", "cloud-sql-proxy"]
    assert [m["subPath"] for m in templated["spec"]["containers"][0]["volumeMounts"]] == ["a.ini", "b.ini"]
    _, secrets = build_both(sets["volume secrets of one Secret"], tmp_path)
    names = [v["name"] for v in secrets["spec"]["volumes"]]
    assert len(set(names)) == 3 and all("." not in n and len(n) <= 63 for n in names)
    assert all("subPath" not in m for m in secrets["spec"]["containers"][0]["volumeMounts"])
    _, sidecar = build_both(sets["xcom sidecar"], tmp_path)
    assert sidecar["spec"]["containers"][1]["image"] == "mirror.example.com/alpine:3.24.2"
    labels = sidecar["metadata"]["labels"]
    assert labels["kubernetes_pod_operator"] == "True" and labels["airflow_kpo_in_cluster"] == "False"
    from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

    assert labels["run_id"] == make_safe_label_value(TI.run_id)
    assert labels["run_id"].startswith("manual__2026-12-01T015054.2771620000-")
    assert "airflow_version" in labels
