"""A watch's history on both backends: 410 Gone for a version compacted away (in the watch's
stream, and on the request for a list), and the bookmark a watch gets before its timeout."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry_testing import FakeCluster
from tests.cluster.fidelity.probes import Backends, Side, assert_same, delete_now, error_of, pod_body

_NUMBERS = re.compile(r"\d+")
TIMEOUT = 8


def _raw_watch(
    side: Side, resource_version: str, timeout: int, at: float | None = None, **params: str
) -> dict[str, Any]:
    """One watch of the default namespace's pods, read raw: its HTTP code, each event, and when
    each bookmark came (seconds after ``at``)."""
    query = [("watch", "1"), ("resourceVersion", resource_version), ("timeoutSeconds", str(timeout))]
    query += list(params.items())
    try:
        response = side.api.api_client.call_api(
            "/api/v1/namespaces/default/pods",
            "GET",
            query_params=query,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
    except ApiException as exc:
        return {"http": exc.status, "events": [], "body": json.loads(exc.body)}
    events: list[dict[str, Any]] = []
    times: list[float] = []
    buffer = b""
    for chunk in response.stream(1024):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                events.append(json.loads(line))
                if events[-1]["type"] == "BOOKMARK" and at is not None:
                    times.append(time.monotonic() - at)
    if buffer.strip():
        events.append(json.loads(buffer))
    return {"http": response.status, "events": events, "times": times}


def _churn(side: Side, stop: threading.Event) -> None:
    """Pods created and deleted until ``stop``: changes the watch below does not select."""
    while not stop.is_set():
        name = side.unique("fidelity-churn-")
        body = pod_body(name, "registry.example.com/app:long")
        body["metadata"]["labels"] = {"probe": "churn"}
        side.api.create_namespaced_pod("default", body)
        delete_now(side.api, name)
        stop.wait(0.5)


def test_a_watch_gets_a_bookmark_before_its_timeout(backends: Backends):
    """With ``allowWatchBookmarks``, the API server's watch cache sends a BOOKMARK about 2 s
    before the watch's ``timeoutSeconds`` (and about once a minute) carrying its newest version,
    so a client resumes from a recent version even when nothing it selects changed. (It sends
    one only when it has a version newer than the watch's: the probe keeps other pods changing,
    as a cluster in use does.)"""

    def probe(side: Side) -> dict[str, Any]:
        stop = threading.Event()
        churn = threading.Thread(target=_churn, args=(side, stop))
        churn.start()
        try:
            listed = side.api.list_namespaced_pod("default", label_selector="probe=nothing")
            started = time.monotonic()
            seen = _raw_watch(
                side,
                listed.metadata.resource_version,
                timeout=TIMEOUT,
                allowWatchBookmarks="true",
                labelSelector="probe=nothing",
                at=started,
            )
        finally:
            stop.set()
            churn.join()
        bookmarks = [e for e in seen["events"] if e["type"] == "BOOKMARK"]
        shapes = [
            {**e["object"], "metadata": {**e["object"]["metadata"], "resourceVersion": "RV"}}
            for e in bookmarks
        ]
        return {
            "http": seen["http"],
            "types": sorted({e["type"] for e in seen["events"]}),
            "bookmark objects": [
                dict(t) for t in {json.dumps(s, sort_keys=True): s for s in shapes}.values()
            ],
            # the first comes in the last 3 s before the timeout (not at once, not a minute later)
            "first bookmark in the last 3 s": bool(bookmarks) and seen["times"][0] >= TIMEOUT - 3.5,
            "versions newer than the list's": all(
                int(e["object"]["metadata"]["resourceVersion"]) >= int(listed.metadata.resource_version)
                for e in bookmarks
            ),
        }

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["types"] == ["BOOKMARK"]
    assert seen["real"]["first bookmark in the last 3 s"]


def test_a_watch_from_before_the_servers_start_is_410_gone_without_a_compaction(backends: Backends):
    """The API server's watch cache starts at the version it lists when the server starts: a watch
    from an older version is 410 Gone once the server restarted, with no compaction (kube-apiserver
    1.36: ``too old resource version: 276 (287)``). Before the restart the same watch replays every
    change since that version, as on a server never restarted (``resourceVersion=1`` on a fresh
    server is served, not 410). FakeCluster plays a restarted server's cache by dropping its history
    (``compact()``)."""

    def probe(side: Side) -> dict[str, Any]:
        name = side.unique("fidelity-start-")
        old = side.api.list_namespaced_pod("default").metadata.resource_version
        body = pod_body(name, "registry.example.com/app:long")
        body["metadata"]["labels"] = {"probe": "server-start"}
        side.api.create_namespaced_pod("default", body)
        delete_now(side.api, name)

        def changes() -> list[Any]:
            seen = _raw_watch(side, old, timeout=2, labelSelector="probe=server-start")
            # How many status writes a pod gets on its way differs (the real scheduler's and
            # kubelet's): the kinds of change, in the order they first came, are compared.
            kinds = [
                e["type"]
                if e["type"] != "ERROR"
                else (e["object"]["code"], _NUMBERS.sub("N", e["object"]["message"]))
                for e in seen["events"]
            ]
            return list(dict.fromkeys(kinds))

        before = changes()
        if isinstance(side.backend, FakeCluster):
            side.backend.compact()
        else:
            side.backend.restart("kube-apiserver")
        return {"before the restart": before, "after": changes()}

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"] == {
        "before the restart": ["ADDED", "MODIFIED", "DELETED"],
        "after": [(410, "too old resource version: N (N)")],
    }


def test_a_version_compacted_away_is_410_for_a_watch_in_its_stream_and_for_a_list_on_the_request(
    backends: Backends,
):
    """After a compaction (the API server compacts etcd every five minutes), once the API server's
    watch cache starts after it (a restart: the compaction alone leaves the cache serving the old
    version), a watch from an older resourceVersion gets a 200 stream with one ERROR event carrying
    a 410 Expired Status: the client must list again. A list gets its 410 on the request: at that
    version exactly (``resourceVersionMatch=Exact``), or continued with a token from before the
    compaction, whose Status carries a token to go on at the latest version; going on with it lists
    the rest."""

    def probe(side: Side) -> dict[str, Any]:
        label = side.unique("fidelity-page-")

        def create(i: int) -> None:
            body = {"metadata": {"name": f"{label}-{i}", "labels": {"probe": label}}}
            side.api.create_namespaced_config_map("default", body)

        for i in range(3):
            create(i)
        try:
            first = side.api.list_namespaced_config_map("default", label_selector=f"probe={label}", limit=1)
            old = first.metadata.resource_version
            create(3)  # history after ``old``, so that compacting removes it
            if isinstance(side.backend, FakeCluster):
                side.backend.compact()
            else:
                side.backend.compact_etcd()
                side.backend.restart("kube-apiserver")
            watch = _raw_watch(side, old, timeout=5)
            for event in watch["events"]:
                if event.get("type") == "ERROR":
                    event["object"]["message"] = _NUMBERS.sub("N", event["object"]["message"])
            exact = error_of(
                lambda: side.api.list_namespaced_config_map(
                    "default", resource_version=old, resource_version_match="Exact"
                )
            )
            expired = error_of(
                lambda: side.api.list_namespaced_config_map(
                    "default", label_selector=f"probe={label}", limit=1, _continue=first.metadata._continue
                )
            )
            token = expired["body"]["metadata"].pop("continue", None)
            rest = side.api.list_namespaced_config_map(
                "default", label_selector=f"probe={label}", _continue=token
            )
            return {
                "watch": {"http": watch["http"], "events": watch["events"]},
                "first page": [c.metadata.name.removeprefix(label) for c in first.items],
                "remaining count": first.metadata.remaining_item_count,
                "exact": exact,
                "continue": expired,
                "a token to go on": bool(token),
                "the rest": [c.metadata.name.removeprefix(label) for c in rest.items],
            }
        finally:
            for i in range(4):
                with contextlib.suppress(ApiException):
                    side.api.delete_namespaced_config_map(f"{label}-{i}", "default")

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["watch"] == {
        "http": 200,
        "events": [
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "too old resource version: N (N)",
                    "reason": "Expired",
                    "code": 410,
                },
            }
        ],
    }
    assert seen["real"]["exact"] == {
        "http": 410,
        "body": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "The resourceVersion for the provided list is too old.",
            "reason": "Expired",
            "code": 410,
        },
    }
    assert seen["real"]["continue"]["http"] == 410 and seen["real"]["a token to go on"]
    assert seen["real"]["the rest"] == ["-1", "-2", "-3"]
