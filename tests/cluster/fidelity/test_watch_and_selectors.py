"""Watch semantics (order, resourceVersion, the initial-events bookmark, a clean end) and the
label and field selectors the package's LIST+WATCH uses."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from tests.cluster.fidelity.probes import Backends, Side, assert_same, delete_now, follow, masked, pod_body

LONG = "registry.example.com/app:long"


def _raw_watch(
    side: Side, query: list[tuple[str, str]], path: str = "/api/v1/namespaces/default/pods"
) -> tuple[int, list[dict[str, Any]], float]:
    started = time.monotonic()
    response = side.api.api_client.call_api(
        path,
        "GET",
        query_params=[("watch", "1"), *query],
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    lines = [json.loads(line) for line in response.data.decode().splitlines() if line]
    return response.status, lines, time.monotonic() - started


def test_a_pod_s_watch_is_ordered_and_ends_with_its_deletion(backends: Backends):
    """From a list's resourceVersion: ADDED first, strictly increasing versions, each event's
    object at the version the stream reports, DELETED last, carrying the last state."""

    def probe(side: Side) -> dict[str, Any]:
        api = side.api
        name = side.unique("fidelity-order-")
        rv = api.list_namespaced_pod(
            "default", field_selector=f"metadata.name={name}"
        ).metadata.resource_version
        api.create_namespaced_pod("default", pod_body(name, LONG))
        try:
            seen = follow(
                api,
                name,
                lambda _k, p: p.get("status", {}).get("phase") == "Running",
                resource_version=rv,
                timeout=30,
            )
            api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            seen += follow(
                api,
                name,
                lambda k, _p: k == "DELETED",
                resource_version=seen[-1][1]["metadata"]["resourceVersion"],
                timeout=15,
            )
        finally:
            delete_now(api, name)
        versions = [int(p["metadata"]["resourceVersion"]) for _, p in seen]
        return {
            "first": seen[0][0],
            "last": seen[-1][0],
            "types": sorted({kind for kind, _ in seen}),
            "increasing": all(a < b for a, b in itertools.pairwise(versions)),
            "after_the_list": versions[0] > int(rv),
            "deleted_has_deletion_timestamp": bool(seen[-1][1]["metadata"].get("deletionTimestamp")),
            "deleted_grace": seen[-1][1]["metadata"].get("deletionGracePeriodSeconds"),
        }

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["first"] == "ADDED" and seen["real"]["last"] == "DELETED"


def test_a_watch_ends_cleanly_at_its_timeout(backends: Backends):
    """``timeoutSeconds`` with nothing changing: a 200 stream that ends, no ERROR event."""

    def probe(side: Side) -> dict[str, Any]:
        rv = side.api.list_namespaced_pod(
            "default", label_selector="fidelity=nothing"
        ).metadata.resource_version
        status, events, took = _raw_watch(
            side, [("resourceVersion", rv), ("labelSelector", "fidelity=nothing"), ("timeoutSeconds", "2")]
        )
        return {"status": status, "events": [e["type"] for e in events], "ended_near_2s": 1.5 < took < 5}

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"] == {"status": 200, "events": [], "ended_near_2s": True}


def test_initial_events_end_with_a_bookmark(backends: Backends):
    """``sendInitialEvents=true`` (a watch-list): the current pods as ADDED, then a BOOKMARK
    annotated ``k8s.io/initial-events-end``, whose version a client resumes from."""

    def probe(side: Side) -> dict[str, Any]:
        api = side.api
        label = side.unique("wl-")
        names = [f"{label}-{i}" for i in range(2)]
        for name in names:
            body = pod_body(name, LONG)
            body["metadata"]["labels"] = {"fidelity": label}
            api.create_namespaced_pod("default", body)
        try:
            status, events, _ = _raw_watch(
                side,
                [
                    ("labelSelector", f"fidelity={label}"),
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan"),
                    ("allowWatchBookmarks", "true"),
                    ("timeoutSeconds", "2"),
                ],
            )
        finally:
            for name in names:
                delete_now(api, name)
        added = [e for e in events if e["type"] == "ADDED"]
        bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
        first_bookmark = events.index(bookmarks[0]) if bookmarks else None
        return {
            "status": status,
            "added": sorted(masked(e["object"]["metadata"]["name"], L=label) for e in added),
            "bookmark_after_the_added": first_bookmark == len(added),
            "bookmark": bookmarks[0]["object"]["kind"] if bookmarks else None,
            "bookmark_annotations": bookmarks[0]["object"]["metadata"].get("annotations")
            if bookmarks
            else None,
            "bookmark_version_is_a_number": bool(bookmarks)
            and bookmarks[0]["object"]["metadata"]["resourceVersion"].isdigit(),
        }

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["bookmark_annotations"] == {"k8s.io/initial-events-end": "true"}


SELECTORS = {
    "label equality": {"label_selector": "tier=web"},
    "label inequality": {"label_selector": "tier!=web"},
    "label set": {"label_selector": "tier in (web,db)"},
    "label not in set": {"label_selector": "tier notin (web)"},
    "label exists": {"label_selector": "tier"},
    "label absent": {"label_selector": "!tier"},
    "two labels": {"label_selector": "tier=web,track=canary"},
    "field name": {"field_selector": "metadata.name=SEL-a"},
    "field name inequality": {"field_selector": "metadata.name!=SEL-a"},
    "field phase": {"field_selector": "status.phase=Pending"},
    "field phase and label": {"field_selector": "status.phase!=Running", "label_selector": "tier=db"},
}


def test_label_and_field_selectors(backends: Backends):
    """Three pods, every selector form listed: the same pods come back."""

    def probe(side: Side) -> dict[str, list[str]]:
        api = side.api
        label = side.unique("sel")
        pods = {"a": {"tier": "web", "track": "canary"}, "b": {"tier": "db"}, "c": {}}
        for suffix, labels in pods.items():
            body = pod_body(f"{label}-{suffix}", "registry.example.com/app:bad-name")
            body["metadata"]["labels"] = {"fidelity": label, **labels}
            body["spec"]["nodeName"] = "nowhere"  # stays Pending on both: no node runs it
            api.create_namespaced_pod("default", body)
        out: dict[str, list[str]] = {}
        try:
            for case, selector in SELECTORS.items():
                fields = selector.get("field_selector", "").replace("SEL", label) or None
                labels = ",".join(filter(None, [f"fidelity={label}", selector.get("label_selector")]))
                listed = api.list_namespaced_pod("default", label_selector=labels, field_selector=fields)
                out[case] = sorted(p.metadata.name.removeprefix(f"{label}-") for p in listed.items)
        finally:
            for suffix in pods:
                delete_now(api, f"{label}-{suffix}")
        return out

    seen = backends.run(probe)
    assert_same(seen)
    assert seen["real"]["label set"] == ["a", "b"]
