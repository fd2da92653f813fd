"""Error answers: the HTTP code and the whole Status body a client decodes (``kind``, ``status``,
``reason``, ``code``, ``message``, ``details``), for the errors the package and the clients read."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry_testing import FakeCluster
from tests.cluster.fidelity.probes import Backends, Side, assert_same, delete_now, error_of, masked, pod_body

LONG = "registry.example.com/app:long"


def _with_pod(make_error: Callable[[Side, str, dict[str, Any]], object]) -> Callable[[Side], dict[str, Any]]:
    """A probe that creates one running-image pod, provokes an error about it, and cleans up."""

    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-status-")
        body = pod_body(name, LONG)
        created = side.api.create_namespaced_pod("default", body)
        try:
            return error_of(
                lambda: make_error(side, name, side.api.api_client.sanitize_for_serialization(created)),
                NAME=name,
            )
        finally:
            delete_now(side.api, name)

    return probe


def _without_pod(make_error: Callable[[Side, str], object]) -> Callable[[Side], dict[str, Any]]:
    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-status-")
        try:
            return error_of(lambda: make_error(side, name), NAME=name, NAME_=name.replace("-", "_"))
        finally:
            delete_now(side.api, name)

    return probe


CASES: dict[str, Callable[[Side], dict[str, Any]]] = {
    "404 a pod that does not exist": _without_pod(lambda s, n: s.api.read_namespaced_pod(n, "default")),
    "404 deleting a pod that does not exist": _without_pod(
        lambda s, n: s.api.delete_namespaced_pod(n, "default")
    ),
    "404 the log of a pod that does not exist": _without_pod(
        lambda s, n: s.api.read_namespaced_pod_log(n, "default")
    ),
    "404 evicting a pod that does not exist": _without_pod(
        lambda s, n: s.api.create_namespaced_pod_eviction(n, "default", {"metadata": {"name": n}})
    ),
    "409 creating a pod that exists": _with_pod(
        lambda s, n, pod: s.api.create_namespaced_pod("default", pod_body(n, LONG))
    ),
    "409 replacing from a stale resourceVersion": _with_pod(
        lambda s, n, pod: s.api.replace_namespaced_pod(
            n, "default", {**pod, "metadata": {**pod["metadata"], "resourceVersion": "1"}}
        )
    ),
    "409 deleting with another UID as precondition": _with_pod(
        lambda s, n, pod: s.api.delete_namespaced_pod(
            n, "default", body={"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}
        )
    ),
    "409 deleting with a stale resourceVersion as precondition": _with_pod(
        lambda s, n, pod: s.api.delete_namespaced_pod(
            n, "default", body={"preconditions": {"resourceVersion": "1"}}
        )
    ),
    "400 a field selector on an unsupported field": _without_pod(
        lambda s, n: s.api.list_namespaced_pod("default", field_selector="spec.bogus=1")
    ),
    "422 a container without an image": _without_pod(
        lambda s, n: s.api.create_namespaced_pod(
            "default", {"metadata": {"name": n}, "spec": {"containers": [{"name": "base"}]}}
        )
    ),
    "422 two containers with one name": _without_pod(
        lambda s, n: s.api.create_namespaced_pod(
            "default",
            pod_body(n, LONG, containers=[{"name": "a", "image": LONG}, {"name": "a", "image": LONG}]),
        )
    ),
    "422 an invalid pod name": _without_pod(
        lambda s, n: s.api.create_namespaced_pod("default", pod_body(n.replace("-", "_"), LONG))
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_status_body(backends: Backends, case: str):
    seen = backends.run(CASES[case])
    assert_same(seen)
    assert seen["real"]["http"] == int(case.split(maxsplit=1)[0])


def test_403_for_a_service_account_without_rbac(backends: Backends):
    """A ServiceAccount's token that no Role grants pods: 403 with RBAC's own message."""

    def probe(side: Side) -> dict[str, Any]:
        sa = side.unique("fidelity-sa-")
        if isinstance(side.backend, FakeCluster):
            user = f"system:serviceaccount:default:{sa}"
            side.backend.grant(f"token-{sa}", [], user=user)
            token, server, context = f"token-{sa}", side.backend.url, None
        else:
            import ssl

            side.api.create_namespaced_service_account("default", {"metadata": {"name": sa}})
            token = side.api.create_namespaced_service_account_token(
                sa, "default", {"spec": {"expirationSeconds": 600}}
            ).status.token
            server = side.backend.server
            context = ssl.create_default_context(cafile=str(Path(side.kubeconfig).parent / "pki" / "ca.crt"))
        request = urllib.request.Request(
            f"{server}/api/v1/namespaces/default/pods", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            urllib.request.urlopen(request, context=context, timeout=10).close()
        except urllib.error.HTTPError as exc:
            return {"http": exc.code, "body": masked(json.loads(exc.read()), SA=sa)}
        finally:
            if not isinstance(side.backend, FakeCluster):
                side.api.delete_namespaced_service_account(sa, "default")
        raise AssertionError("the request was allowed")

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["http"] == 403


def test_a_non_string_env_value_is_refused_by_the_decoder_with_400(backends: Backends):
    """``env_vars={"N": 5}`` from a DAG reaches the API as a JSON number: kube-apiserver's decoder
    answers 400 before validation, and so must the simulator (review finding R3-10)."""

    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-env-")
        body = pod_body(name, LONG)
        body["spec"]["containers"][0]["env"] = [{"name": "N", "value": 5}]
        try:
            return error_of(lambda: side.api.create_namespaced_pod("default", body), NAME=name)
        finally:
            delete_now(side.api, name)

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["http"] == 400
    assert (
        "cannot unmarshal number into Go struct field EnvVar.spec.containers.env.value of type string"
        in (seen["real"]["body"]["message"])
    )
