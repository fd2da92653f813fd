"""``pods/log`` (whole, tail, since, previous; before the container starts) and deleting a pod
that has already finished, on both backends."""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.cluster.fidelity.probes import Backends, Side, assert_same, delete_now, follow, pod_body

#: tests/cluster/scenario.yaml: runs 1 s and writes three lines.
LOGS = "registry.example.com/app:logs"


def _finished(side: Side, name: str, image: str) -> dict[str, Any]:
    api = side.api
    rv = api.list_namespaced_pod("default", field_selector=f"metadata.name={name}").metadata.resource_version
    api.create_namespaced_pod("default", pod_body(name, image))
    seen = follow(
        api,
        name,
        lambda _k, p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
        resource_version=rv,
        timeout=30,
    )
    return seen[-1][1]


def _log(side: Side, name: str, **options: Any) -> dict[str, Any]:
    try:
        response = side.api.read_namespaced_pod_log(name, "default", _preload_content=False, **options)
    except ApiException as exc:
        return {"http": exc.status}
    return {"http": response.status, "text": response.data.decode()}


def test_the_log_whole_tailed_and_since(backends: Backends):
    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-log-")
        try:
            pod = _finished(side, name, LOGS)
            out = {
                "phase": pod["status"]["phase"],
                "whole": _log(side, name),
                "tail 2": _log(side, name, tail_lines=2),
                "tail 0": _log(side, name, tail_lines=0),
                "since an hour": _log(side, name, since_seconds=3600),
                "previous": _log(side, name, previous=True),
            }
            # sinceSeconds counts real seconds from now: the lines were written during the run,
            # so 2.5 s after it ended every one of them is older than 2 s.
            time.sleep(2.5)
            out["since 2 s"] = _log(side, name, since_seconds=2)
            return out
        finally:
            delete_now(side.api, name)

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["whole"] == {"http": 200, "text": "one\ntwo\nthree\n"}
    assert seen["real"]["tail 2"] == {"http": 200, "text": "two\nthree\n"}


def test_the_log_of_a_container_that_has_not_started_is_400(backends: Backends):
    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-log-")
        api = side.api
        rv = api.list_namespaced_pod(
            "default", field_selector=f"metadata.name={name}"
        ).metadata.resource_version
        api.create_namespaced_pod("default", pod_body(name, "registry.example.com/app:missing"))
        try:
            follow(
                api,
                name,
                lambda _k, p: bool(p.get("status", {}).get("containerStatuses")),
                resource_version=rv,
                timeout=30,
            )
            return _log(side, name)
        finally:
            delete_now(api, name)

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"] == {"http": 400}


def test_deleting_a_finished_pod_removes_it_at_once(backends: Backends):
    """A terminal pod (or one never scheduled) is deleted without grace whatever the request
    says: the API server writes the deletion mark (MODIFIED, grace 0) and removes the object in
    the same request (DELETED); FakeCluster used to send DELETED alone."""

    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-done-")
        api = side.api
        try:
            pod = _finished(side, name, "registry.example.com/app:ok")
            answer = api.api_client.sanitize_for_serialization(api.delete_namespaced_pod(name, "default"))
            rest = follow(
                api,
                name,
                lambda kind, _p: kind == "DELETED",
                resource_version=pod["metadata"]["resourceVersion"],
                timeout=10,
            )
            return {
                "phase": pod["status"]["phase"],
                "answer": {
                    "kind": answer.get("kind"),
                    "deletionTimestamp": "deletionTimestamp" in answer["metadata"],
                    "deletionGracePeriodSeconds": answer["metadata"].get("deletionGracePeriodSeconds"),
                },
                "events": [
                    (
                        kind,
                        "deletionTimestamp" in p["metadata"],
                        p["metadata"].get("deletionGracePeriodSeconds"),
                    )
                    for kind, p in rest
                ],
            }
        finally:
            delete_now(api, name)

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["events"] == [("MODIFIED", True, 0), ("DELETED", True, 0)]
