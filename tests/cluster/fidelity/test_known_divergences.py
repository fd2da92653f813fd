"""The three differences between FakeCluster and a real cluster that were known before this suite
existed, each probed on both backends (and fixed in FakeCluster)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.cluster.fidelity.probes import (
    Backends,
    Side,
    assert_same,
    condition,
    delete_now,
    error_of,
    follow,
    pod_body,
)


def test_a_pod_deleted_gracefully_while_it_is_evicted_goes_away(backends: Backends):
    """The operator deletes a pod as soon as it sees ``DisruptionTarget``; the eviction then makes
    the pod terminal, and a terminal pod under deletion is finalized at once (on FakeCluster it
    used to keep its ``deletionTimestamp`` for ever: the eviction cancelled the deletion)."""

    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("disrupt-evict-")
        api = side.api
        rv = api.list_namespaced_pod(
            "default", field_selector=f"metadata.name={name}"
        ).metadata.resource_version
        api.create_namespaced_pod("default", pod_body(name, "registry.example.com/app:long"))
        try:
            seen = follow(
                api,
                name,
                lambda kind, pod: kind == "DELETED" or condition(pod, "DisruptionTarget") is not None,
                resource_version=rv,
                timeout=30,
            )
            target = condition(seen[-1][1], "DisruptionTarget") if seen else None
            try:  # as the operator does: by UID, with the pod's grace period
                api.delete_namespaced_pod(
                    name,
                    "default",
                    body={"preconditions": {"uid": seen[-1][1]["metadata"]["uid"]}},
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
            rest = follow(
                api,
                name,
                lambda kind, _pod: kind == "DELETED",
                resource_version=seen[-1][1]["metadata"]["resourceVersion"],
                timeout=10,
            )
            gone = seen[-1][0] == "DELETED" or any(kind == "DELETED" for kind, _ in rest)
            return {
                "disruption_target": target and {k: target[k] for k in ("status", "reason")},
                "gone_within_10s": gone,
            }
        finally:
            delete_now(api, name)

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"] == {
        "disruption_target": {"status": "True", "reason": "EvictionByEvictionAPI"},
        "gone_within_10s": True,
    }


def test_a_watch_from_a_version_the_server_has_not_reached_replays_nothing(backends: Backends):
    """A client that kept a resourceVersion from another server (or another run) and watches a
    fresh one: the real API server delivers nothing until its own history passes that version; it
    never replays changes older than the one asked for (FakeCluster used to stream them all)."""

    def probe(side: Side) -> list[str]:
        api = side.api
        name = side.unique("fidelity-future-")
        rv = int(api.list_namespaced_pod("default").metadata.resource_version)

        def create() -> None:
            time.sleep(1.0)
            api.create_namespaced_pod("default", pod_body(name, "registry.example.com/app:long"))

        creator = threading.Thread(target=create)
        creator.start()
        try:
            response = api.api_client.call_api(
                "/api/v1/namespaces/default/pods",
                "GET",
                query_params=[
                    ("watch", "1"),
                    ("resourceVersion", str(rv + 100_000)),
                    ("timeoutSeconds", "4"),
                ],
                auth_settings=["BearerToken"],
                _preload_content=False,
            )
            return [json.loads(line)["type"] for line in response.data.decode().splitlines() if line]
        finally:
            creator.join()
            delete_now(api, name)

    seen = backends.run(probe)
    assert seen == {"fake": [], "real": []}


def test_duplicate_volume_names_are_refused_with_422(backends: Backends):
    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-dup-")
        volumes = [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]
        body = pod_body(name, "registry.example.com/app:ok", volumes=volumes)
        try:
            return error_of(lambda: side.api.create_namespaced_pod("default", body), NAME=name)
        finally:
            delete_now(side.api, name)

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["http"] == 422
    assert (
        seen["real"]["body"]["message"] == 'Pod "NAME" is invalid: spec.volumes[1].name: Duplicate value: "v"'
    )


def test_the_eviction_api_answers_and_the_pod_goes(backends: Backends):
    """POST pods/NAME/eviction on a running pod: 201 with a Success Status, then the pod goes."""

    def probe(side: Side) -> dict[str, Any]:
        api = side.api
        name = side.unique("fidelity-evict-")
        rv = api.list_namespaced_pod(
            "default", field_selector=f"metadata.name={name}"
        ).metadata.resource_version
        api.create_namespaced_pod("default", pod_body(name, "registry.example.com/app:long"))
        try:
            seen = follow(
                api,
                name,
                lambda _k, p: p.get("status", {}).get("phase") == "Running",
                resource_version=rv,
                timeout=30,
            )
            response = api.api_client.call_api(
                f"/api/v1/namespaces/default/pods/{name}/eviction",
                "POST",
                body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}},
                header_params={"Content-Type": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
            )
            answer = json.loads(response.data)
            rest = follow(
                api,
                name,
                lambda kind, _p: kind == "DELETED",
                resource_version=seen[-1][1]["metadata"]["resourceVersion"],
                timeout=10,
            )
            target = next(
                (condition(p, "DisruptionTarget") for _, p in rest if condition(p, "DisruptionTarget")), None
            )
            return {
                "http": response.status,
                "answer": answer,
                "disruption_target": target and {k: target[k] for k in ("status", "reason")},
                "gone_within_10s": any(kind == "DELETED" for kind, _ in rest),
            }
        finally:
            delete_now(api, name)

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["http"] == 201
