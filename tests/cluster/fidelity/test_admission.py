"""What admission answers on both backends: the Eviction API under a PodDisruptionBudget (429),
an exceeded ResourceQuota (403), a container limit above a LimitRange's maximum (403) and the
PodSecurity admission of a namespace's labels (403)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client as k
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry_testing import FakeCluster
from tests.cluster.fidelity.probes import Backends, Side, assert_same, delete_now, error_of, follow, pod_body
from tests.cluster.kube import eventually

LONG = "registry.example.com/app:long"


def _namespace(side: Side, prefix: str, labels: dict[str, str] | None = None) -> str:
    """A fresh namespace whose ``default`` ServiceAccount exists (pods are admitted only then)."""
    ns = side.unique(prefix)
    side.api.create_namespace({"metadata": {"name": ns, "labels": labels or {}}})
    if isinstance(side.backend, FakeCluster):  # no ServiceAccounts: pods are admitted at once
        return ns

    def has_account() -> bool:
        try:
            side.api.read_namespaced_service_account("default", ns)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    assert eventually(has_account, timeout=30), f"no default ServiceAccount in {ns}"
    return ns


def _running(side: Side, name: str, namespace: str, **labels: str) -> None:
    body = pod_body(name, LONG)
    body["metadata"]["labels"].update(labels)
    rv = side.api.list_namespaced_pod(
        namespace, field_selector=f"metadata.name={name}"
    ).metadata.resource_version
    side.api.create_namespaced_pod(namespace, body)
    follow(
        side.api,
        name,
        lambda _k, p: p.get("status", {}).get("phase") == "Running",
        resource_version=rv,
        timeout=30,
        namespace=namespace,
    )


def test_an_eviction_a_disruption_budget_forbids_is_429(backends: Backends):
    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-pdb-")
        policy = k.PolicyV1Api(side.api.api_client)
        budget = {
            "metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"pdb": name}}},
        }
        policy.create_namespaced_pod_disruption_budget("default", budget)
        try:
            _running(side, name, "default", pdb=name)

            def counted() -> bool:  # the disruption controller has seen the pod
                status = policy.read_namespaced_pod_disruption_budget(name, "default").status
                return bool(status and status.current_healthy == 1 and status.observed_generation)

            assert eventually(counted, timeout=30), "the budget never counted its pod"
            status = policy.read_namespaced_pod_disruption_budget(name, "default").status
            eviction = {"metadata": {"name": name}}
            return {
                "budget": {
                    "currentHealthy": status.current_healthy,
                    "desiredHealthy": status.desired_healthy,
                    "disruptionsAllowed": status.disruptions_allowed,
                    "expectedPods": status.expected_pods,
                },
                "eviction": error_of(
                    lambda: side.api.create_namespaced_pod_eviction(name, "default", eviction), NAME=name
                ),
            }
        finally:
            delete_now(side.api, name)
            policy.delete_namespaced_pod_disruption_budget(name, "default")

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["eviction"]["http"] == 429


def _in_fresh_namespace(
    prefix: str, labels: dict[str, str] | None, act: Callable[[Side, str], dict[str, Any]]
) -> Callable[[Side], dict[str, Any]]:
    def probe(side: Side) -> dict[str, Any]:
        ns = _namespace(side, prefix, labels)
        try:
            return act(side, ns)
        finally:
            side.api.delete_namespace(ns)

    return probe


def _over_quota(side: Side, ns: str) -> dict[str, Any]:
    quota = {"metadata": {"name": "compute"}, "spec": {"hard": {"pods": "1", "requests.cpu": "1"}}}
    side.api.create_namespaced_resource_quota(ns, quota)

    def enforced() -> bool:  # the quota controller has filled in its status
        status = side.api.read_namespaced_resource_quota("compute", ns).status
        return bool(status and status.hard)

    assert eventually(enforced, timeout=30), "the quota never got its status"
    small = pod_body("first", LONG)
    small["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    side.api.create_namespaced_pod(ns, small)
    second = pod_body("second", LONG)
    second["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    return error_of(lambda: side.api.create_namespaced_pod(ns, second), NS=ns)


def test_a_pod_over_the_namespace_quota_is_403(backends: Backends):
    seen = backends.run(_in_fresh_namespace("fidelity-quota-", None, _over_quota))
    assert_same(seen)
    assert seen["real"]["http"] == 403


def _over_the_limit_range(side: Side, ns: str) -> dict[str, Any]:
    limits = [{"type": "Container", "max": {"memory": "3Gi"}}]
    side.api.create_namespaced_limit_range(
        ns, {"metadata": {"name": "per-container"}, "spec": {"limits": limits}}
    )
    big = pod_body("big", LONG)
    big["spec"]["containers"][0]["resources"] = {"limits": {"memory": "4Gi"}, "requests": {"memory": "1Gi"}}
    return error_of(lambda: side.api.create_namespaced_pod(ns, big), NS=ns)


def test_a_container_over_the_limit_range_maximum_is_403(backends: Backends):
    seen = backends.run(_in_fresh_namespace("fidelity-limits-", None, _over_the_limit_range))
    assert_same(seen)
    assert seen["real"]["http"] == 403


def _on_the_host(side: Side, ns: str) -> dict[str, Any]:
    # (privileged containers are refused earlier, with 422, by an API server without --allow-privileged)
    volumes = [{"name": "host", "hostPath": {"path": "/var/run"}}]
    body = pod_body("on-the-host", LONG, hostNetwork=True, volumes=volumes)
    return error_of(lambda: side.api.create_namespaced_pod(ns, body), NS=ns)


def test_a_pod_the_namespace_s_pod_security_level_forbids_is_403(backends: Backends):
    labels = {"pod-security.kubernetes.io/enforce": "baseline"}
    seen = backends.run(_in_fresh_namespace("fidelity-pss-", labels, _on_the_host))
    assert_same(seen)
    assert seen["real"]["http"] == 403
