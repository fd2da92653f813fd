"""The sync ``kubernetes`` client works unchanged against the simulator, error shapes included."""

from __future__ import annotations

import json
import threading
from contextlib import closing
from typing import Any

import kubernetes
import pytest
import urllib3
from kubernetes.client import ApiException
from kubernetes.stream import stream

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import phase, pod_body, pod_is


def status_of(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def test_discovery_and_version(core: kubernetes.client.CoreV1Api, cluster: FakeCluster) -> None:
    client = core.api_client
    version = kubernetes.client.VersionApi(client).get_code()
    assert version.major == "1" and version.git_version.startswith("v1.")
    resources = {r.name for r in core.get_api_resources().resources}
    assert {"pods", "pods/log", "pods/exec", "events", "namespaces", "secrets", "configmaps"} <= resources
    assert core.read_namespace("default").status.phase == "Active"


def test_create_get_list_with_label_and_field_selectors(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod_body("one", labels={"team": "a", "tier": "x"}))
    core.create_namespaced_pod("default", pod_body("two", labels={"team": "b"}))
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert created.status.phase == "Pending"
    assert created.spec.restart_policy == "Never"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    fetched = core.read_namespaced_pod("one", "default")
    assert fetched.metadata.uid == created.metadata.uid

    def names(**kwargs: Any) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod("default", **kwargs).items)

    assert names(label_selector="team=a") == ["one"]
    assert names(label_selector="team!=a") == ["two"]
    assert names(label_selector="team in (a,b),!tier") == ["two"]
    assert names(label_selector="tier") == ["one"]
    assert names(field_selector="metadata.name=two") == ["two"]
    assert names(field_selector="metadata.name!=two,status.phase!=Failed") == ["one"]
    everywhere = core.list_pod_for_all_namespaces(label_selector="team=a")
    assert [p.metadata.name for p in everywhere.items] == ["one"]
    page = core.list_namespaced_pod("default", limit=1)
    assert len(page.items) == 1 and page.metadata._continue
    rest = core.list_namespaced_pod("default", limit=1, _continue=page.metadata._continue)
    assert [p.metadata.name for p in page.items + rest.items] == ["one", "two"]
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", field_selector="spec.nonsense=1")
    assert caught.value.status == 400
    assert "field label not supported: spec.nonsense" in status_of(caught.value)["message"]


def test_error_answers_have_real_status_bodies(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("dup"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", pod_body("dup"))
    body = status_of(caught.value)
    assert (caught.value.status, body["reason"], body["message"]) == (
        409,
        "AlreadyExists",
        'pods "dup" already exists',
    )
    assert body["details"] == {"name": "dup", "kind": "pods"}

    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("nope", "default")
    body = status_of(caught.value)
    assert (caught.value.status, body["reason"], body["message"]) == (
        404,
        "NotFound",
        'pods "nope" not found',
    )

    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("missing-ns", pod_body("x"))
    assert status_of(caught.value)["message"] == 'namespaces "missing-ns" not found'

    bad = pod_body("Bad_Name")
    bad["spec"]["containers"][0].pop("image")
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", bad)
    body = status_of(caught.value)
    assert caught.value.status == 422 and body["reason"] == "Invalid"
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.name", "spec.containers[0].image"}
    assert body["message"].startswith('Pod "Bad_Name" is invalid: [')


def test_merge_strategic_and_json_patches(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p", labels={"keep": "1", "drop": "1"}))
    # The client sends a dict body as a strategic merge patch.
    patched = core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"drop": None, "new": "2"}}})
    assert patched.metadata.labels == {"keep": "1", "new": "2"}
    # A list body goes as a JSON patch.
    patched = core.patch_namespaced_pod(
        "p", "default", [{"op": "add", "path": "/metadata/annotations", "value": {"note": "x"}}]
    )
    assert patched.metadata.annotations == {"note": "x"}
    before = int(patched.metadata.resource_version)
    # An explicit merge patch through the raw API.
    core.patch_namespaced_pod(
        "p",
        "default",
        {"metadata": {"annotations": {"note": None, "other": "y"}}},
        _content_type="application/merge-patch+json",
    )
    after = core.read_namespaced_pod("p", "default")
    assert after.metadata.annotations == {"other": "y"}
    assert int(after.metadata.resource_version) > before
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p", "default", {"spec": {"restartPolicy": "Always"}})
    assert caught.value.status == 422
    assert "pod updates may not change fields" in status_of(caught.value)["message"]
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"bad": "a b"}}})
    assert caught.value.status == 422


def test_delete_with_preconditions_and_grace(core: kubernetes.client.CoreV1Api, cluster: FakeCluster) -> None:
    pod = core.create_namespaced_pod("default", pod_body("d", "example.com/long:1"))
    wrong_uid = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(uid="other")
    )
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_pod("d", "default", body=wrong_uid)
    body = status_of(caught.value)
    assert caught.value.status == 409
    assert (
        body["message"]
        == f'Operation cannot be fulfilled on Pod "d": the UID in the precondition (other) does not match '
        f"the UID in record ({pod.metadata.uid}). The object might have been deleted and then recreated"
    )
    stale = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(resource_version="1")
    )
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_pod("d", "default", body=stale)
    assert "the ResourceVersion in the precondition (1) does not match" in status_of(caught.value)["message"]
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_pod("d", "default", propagation_policy="Sometimes")
    assert caught.value.status == 422

    assert cluster.wait_for(pod_is("d", lambda p: phase(p) == "Running"), 5)
    right = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(uid=pod.metadata.uid),
        grace_period_seconds=30,
        propagation_policy="Background",
    )
    answer = core.delete_namespaced_pod("d", "default", body=right)
    assert answer.metadata.deletion_timestamp is not None
    assert answer.metadata.deletion_grace_period_seconds == 30
    assert cluster.wait_for(lambda c: c.pod("d") is None, 5)
    final = next(p for p in cluster.all_pods() if p["metadata"]["uid"] == pod.metadata.uid)
    assert final["deleted"] is True
    terminated = final["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 143


def test_watch_resumes_from_a_resource_version(
    core: kubernetes.client.CoreV1Api, cluster: FakeCluster
) -> None:
    listed = core.list_namespaced_pod("default")
    start = listed.metadata.resource_version
    core.create_namespaced_pod("default", pod_body("w1"))
    core.create_namespaced_pod("default", pod_body("w2"))
    w = kubernetes.watch.Watch()
    seen = []
    for event in w.stream(core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=1):
        seen.append(
            (event["type"], event["object"].metadata.name, int(event["object"].metadata.resource_version))
        )
        if event["object"].metadata.name == "w2" and event["type"] == "ADDED":
            w.stop()
    assert [s[:2] for s in seen if s[0] == "ADDED"] == [("ADDED", "w1"), ("ADDED", "w2")]
    assert [s[2] for s in seen] == sorted(s[2] for s in seen)
    # Resume from the middle: only later changes come back.
    middle = seen[0][2]
    resumed = [
        (e["type"], e["object"].metadata.name, int(e["object"].metadata.resource_version))
        for e in kubernetes.watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=str(middle), timeout_seconds=1
        )
    ]
    assert resumed and all(rv > middle for _, _, rv in resumed)
    assert ("ADDED", "w2") in [r[:2] for r in resumed]


def test_a_watch_from_the_version_compacted_to_misses_nothing(
    core: kubernetes.client.CoreV1Api, cluster: FakeCluster
) -> None:
    """Compaction removes the history before the current version, not the current version: a
    watch from it gets what comes next (it used to get 410 Gone)."""
    cluster.compact()  # nothing runs here, so the version stays the one compacted to
    now = core.list_namespaced_pod("default").metadata.resource_version
    raw = core.list_namespaced_pod(
        "default", watch=True, resource_version=now, timeout_seconds=1, _preload_content=False
    )
    lines = [json.loads(line) for line in raw.read().decode().splitlines() if line.strip()]
    assert all(line["type"] != "ERROR" for line in lines), lines


def test_watch_gets_410_gone_after_compaction(
    core: kubernetes.client.CoreV1Api, cluster: FakeCluster
) -> None:
    old = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("c1"))
    cluster.compact()
    raw = core.list_namespaced_pod(
        "default", watch=True, resource_version=old, timeout_seconds=2, _preload_content=False
    )
    lines = [json.loads(line) for line in raw.read().decode().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0]["type"] == "ERROR"
    status = lines[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {old} (")
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", resource_version=old, resource_version_match="Exact")
    assert caught.value.status == 410
    # The sync client's watch helper turns the ERROR event into an exception, as on a real cluster.
    with pytest.raises(ApiException) as caught:
        for _ in kubernetes.watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=1
        ):
            pass
    assert caught.value.status == 410


def raw_watch(core: kubernetes.client.CoreV1Api, resource_version: int | str) -> list[dict[str, Any]]:
    raw = core.list_namespaced_config_map(
        "default",
        watch=True,
        resource_version=str(resource_version),
        timeout_seconds=1,
        _preload_content=False,
    )
    return [json.loads(line) for line in raw.read().decode().splitlines() if line.strip()]


def test_a_watch_from_before_the_history_window_is_410_gone() -> None:
    """The window is the last ``history`` changes. A watch from a version whose next change has
    left it gets one ERROR event, a 410 Expired Status naming the newest version dropped, as
    kube-apiserver's watch cache names it (``too old resource version: X (Y)``, k8s.io/apiserver
    pkg/storage/cacher/watch_cache.go); a watch from that version still misses nothing."""
    with FakeCluster(history=5) as cluster:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
        start = int(core.list_namespaced_config_map("default").metadata.resource_version)
        for i in range(8):  # versions start+1 .. start+8; the window keeps the last five
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        dropped = start + 3
        (gone,) = raw_watch(core, dropped - 1)
        assert gone == {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {dropped - 1} ({dropped})",
                "reason": "Expired",
                "code": 410,
            },
        }
        served = raw_watch(core, dropped)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in served] == [
            ("ADDED", f"c{i}") for i in range(3, 8)
        ]


def test_a_list_at_a_compacted_version_and_a_continue_from_before_are_410_on_the_request(
    core: kubernetes.client.CoreV1Api, cluster: FakeCluster
) -> None:
    """As kube-apiserver answers from etcd (k8s.io/apiserver pkg/storage/etcd3/errors.go): an exact
    list at a version compacted away, and a list continued with a token from before, are 410
    Expired on the request; the latter comes with a token to go on at the latest version."""
    for name in ("a", "b", "c"):
        core.create_namespaced_pod("default", pod_body(name, labels={"page": "yes"}))
    first = core.list_namespaced_pod("default", label_selector="page=yes", limit=1)
    # With a selector the API server cannot say how many are left; without one it does.
    assert first.metadata.remaining_item_count is None
    assert core.list_namespaced_pod("default", limit=1).metadata.remaining_item_count == 2
    old = first.metadata.resource_version
    core.create_namespaced_pod("default", pod_body("d", labels={"page": "yes"}))
    cluster.compact()
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", resource_version=old, resource_version_match="Exact")
    body = status_of(caught.value)
    assert (body["code"], body["reason"], body["message"]) == (
        410,
        "Expired",
        "The resourceVersion for the provided list is too old.",
    )
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(
            "default", label_selector="page=yes", limit=1, _continue=first.metadata._continue
        )
    body = status_of(caught.value)
    assert (body["code"], body["reason"]) == (410, "Expired")
    assert body["message"].startswith("The provided continue parameter is too old to display a consistent")
    assert body["message"].endswith("may show up in the list.")
    rest = core.list_namespaced_pod(
        "default", label_selector="page=yes", _continue=body["metadata"]["continue"]
    )
    assert [p.metadata.name for p in rest.items] == ["b", "c", "d"]


def test_watch_bookmarks_and_timeout(core: kubernetes.client.CoreV1Api, cluster: FakeCluster) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    raw = core.list_namespaced_pod(
        "default",
        watch=True,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    events = [json.loads(line) for line in raw.read().decode().splitlines() if line.strip()]
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, "a 1 s watch with 0.2 s bookmark interval carries bookmarks"
    assert bookmarks[0]["object"]["kind"] == "Pod"
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_initial_events_end_with_a_bookmark(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("i1"))
    raw = core.list_namespaced_pod(
        "default",
        watch=True,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    events = [json.loads(line) for line in raw.read().decode().splitlines() if line.strip()]
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "i1"
    marker = next(e for e in events if e["type"] == "BOOKMARK")
    assert marker["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_events_by_involved_object(core: kubernetes.client.CoreV1Api, cluster: FakeCluster) -> None:
    pod = core.create_namespaced_pod("default", pod_body("ev"))
    core.create_namespaced_pod("default", pod_body("other"))
    assert cluster.wait_for(pod_is("ev", lambda p: phase(p) == "Succeeded"), 5)
    events = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name=ev,involvedObject.uid={pod.metadata.uid}"
    ).items
    reasons = [e.reason for e in sorted(events, key=lambda e: int(e.metadata.resource_version))]
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    for event in events:
        assert event.involved_object.kind == "Pod" and event.involved_object.namespace == "default"
        assert event.first_timestamp and event.last_timestamp and event.count == 1
    assert events[0].source.component in ("kubelet", "default-scheduler")
    watched = [
        e["object"].reason
        for e in kubernetes.watch.Watch().stream(
            core.list_namespaced_event, "default", field_selector="involvedObject.name=ev", timeout_seconds=1
        )
    ]
    assert sorted(watched) == sorted(reasons)


def test_logs_tail_timestamps_and_follow(core: kubernetes.client.CoreV1Api) -> None:
    with FakeCluster(
        {
            "images": {
                # The first pull fails (rate limit), so the container is surely waiting at first.
                "talk:1": {
                    "pull": "rate_limited",
                    "for_seconds": 5,
                    "run": {"log": "one\ntwo\nthree", "duration_seconds": 30},
                }
            }
        },
        time_scale=0.02,
    ) as cluster:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
        api.create_namespaced_pod("default", pod_body("talker", "talk:1"))
        with pytest.raises(ApiException) as caught:
            api.read_namespaced_pod_log("talker", "default", container="base")
        assert caught.value.status == 400
        assert "is waiting to start" in status_of(caught.value)["message"]
        assert cluster.wait_for(pod_is("talker", lambda p: phase(p) == "Running"), 5)
        follow = api.read_namespaced_pod_log(
            "talker", "default", container="base", follow=True, _preload_content=False
        )
        streamed = follow.read().decode()  # returns when the container ends, about 0.6 s later
        assert streamed == "one\ntwo\nthree\n"
        tail = api.read_namespaced_pod_log("talker", "default", tail_lines=1, _preload_content=False)
        assert tail.read() == b"three\n"
        stamped = api.read_namespaced_pod_log("talker", "default", timestamps=True, _preload_content=False)
        first = stamped.read().decode().splitlines()[0]
        stamp, text = first.split(" ", 1)
        assert text == "one" and stamp.endswith("Z") and len(stamp) == 30
        assert phase(cluster.pod("talker")) == "Succeeded"


def test_exec_reads_xcom_and_stops_the_sidecar(cluster: FakeCluster) -> None:
    with FakeCluster(
        {"images": {"calc:1": {"run": {"xcom": {"answer": 42}, "duration_seconds": 0.5}}}}, time_scale=0.02
    ) as sim:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))
        body = pod_body("x", "calc:1")
        body["spec"]["containers"].append(
            {"name": "airflow-xcom-sidecar", "image": "alpine", "command": ["sh", "-c", "trap ..."]}
        )
        api.create_namespaced_pod("default", body)
        assert sim.wait_for(
            lambda c: (
                "terminated" in (c.pod("x")["status"].get("containerStatuses") or [{}])[0].get("state", {})
            ),
            5,
        )
        assert phase(sim.pod("x")) == "Running", "the sidecar keeps the pod running"
        script = (
            "if [ -s /airflow/xcom/return.json ]; then cat /airflow/xcom/return.json; "
            "else echo __airflow_xcom_result_empty__; fi"
        )
        with closing(
            stream(
                api.connect_get_namespaced_pod_exec,
                "x",
                "default",
                container="airflow-xcom-sidecar",
                command=["/bin/sh", "-c", script],
                stdin=False,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        ) as session:
            session.run_forever(timeout=5)
            assert session.returncode == 0
            assert json.loads(session.read_stdout()) == {"answer": 42}
        failing = stream(
            api.connect_get_namespaced_pod_exec,
            "x",
            "default",
            container="airflow-xcom-sidecar",
            command=["cat", "/etc/nothing"],
            stderr=True,
            stdout=True,
            stdin=False,
            tty=False,
            _preload_content=False,
        )
        failing.run_forever(timeout=5)
        assert failing.returncode == 1
        with closing(
            stream(
                api.connect_get_namespaced_pod_exec,
                "x",
                "default",
                container="airflow-xcom-sidecar",
                command=["/bin/sh"],
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        ) as shell:
            shell.write_stdin("kill -2 $(pgrep -u $(id -u) -f 'sh')\n")
            shell.run_forever(timeout=5)
        assert sim.wait_for(pod_is("x", lambda p: phase(p) == "Succeeded"), 5)
        sidecar = sim.pod("x")["status"]["containerStatuses"][1]
        assert sidecar["state"]["terminated"]["exitCode"] == 0
        assert sim.request_counts()[("create", "pods/exec")] == 3


def test_requests_from_many_threads_are_all_served(
    core: kubernetes.client.CoreV1Api, cluster: FakeCluster
) -> None:
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            core.create_namespaced_pod("default", pod_body(f"t{i}"))
            core.read_namespaced_pod(f"t{i}", "default")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cluster.request_counts()[("create", "pods")] == 8
    assert len(cluster.all_pods()) == 8


def test_update_conflicts_collections_and_config_objects(
    core: kubernetes.client.CoreV1Api, cluster: FakeCluster
) -> None:
    core.create_namespaced_pod("default", pod_body("u1", labels={"batch": "b"}))
    core.create_namespaced_pod("default", pod_body("u2", labels={"batch": "b"}))
    # The kubelet keeps writing status, so a read-modify-write may meet a conflict: retry it,
    # as controllers do.
    for _ in range(50):
        current = core.read_namespaced_pod("u1", "default")
        current.metadata.labels["seen"] = "yes"
        try:
            replaced = core.replace_namespaced_pod("u1", "default", current)
            break
        except ApiException as exc:
            assert exc.status == 409
    assert replaced.metadata.labels["seen"] == "yes"
    current.metadata.labels["again"] = "no"  # still carries the resourceVersion before the replace
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_pod("u1", "default", current)
    assert caught.value.status == 409
    assert "the object has been modified" in status_of(caught.value)["message"]

    core.delete_collection_namespaced_pod("default", label_selector="batch=b", grace_period_seconds=0)
    assert cluster.wait_for(lambda c: not c.pods(), 5)

    cluster.add_secret("db", data={"password": "pw"})
    secret = core.read_namespaced_secret("db", "default")
    assert secret.data == {"password": "cHc="}
    core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "b"}})
    assert core.read_namespaced_config_map("cfg", "default").data == {"a": "b"}
    assert [cm.metadata.name for cm in core.list_namespaced_config_map("default").items] == ["cfg"]
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_secret("nope", "default")
    assert status_of(caught.value)["message"] == 'secrets "nope" not found'
    namespaces = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= namespaces


def test_dropped_watches_end_and_can_resume(core: kubernetes.client.CoreV1Api, cluster: FakeCluster) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    results: dict[str, Any] = {}

    def follow() -> None:
        raw = core.list_namespaced_pod("default", watch=True, resource_version=rv, _preload_content=False)
        results["body"] = raw.read().decode()

    reader = threading.Thread(target=follow)
    reader.start()
    core.create_namespaced_pod("default", pod_body("dw"))
    assert cluster.wait_for(lambda c: len(c.store.watchers) == 1, 5)
    assert cluster.wait_for(lambda c: c.drop_watches("pods") == 1, 5)
    reader.join(timeout=5)
    assert not reader.is_alive()
    seen = [json.loads(line) for line in results["body"].splitlines() if line.strip()]
    assert seen and seen[0]["type"] == "ADDED"
    last = seen[-1]["object"]["metadata"]["resourceVersion"]
    # Resuming from the last version seen loses nothing.
    resumed = (
        core.list_namespaced_pod(
            "default", watch=True, resource_version=last, timeout_seconds=1, _preload_content=False
        )
        .read()
        .decode()
    )
    later = [json.loads(line) for line in resumed.splitlines() if line.strip()]
    assert all(int(e["object"]["metadata"]["resourceVersion"]) > int(last) for e in later)
    assert cluster.drop_watches() == 0

    def follow_until_reset() -> None:
        raw = core.list_namespaced_pod("default", watch=True, _preload_content=False)
        try:
            raw.read()
        except Exception as exc:  # the connection reset surfaces as a urllib3 protocol error
            results["error"] = exc

    reader = threading.Thread(target=follow_until_reset)
    reader.start()
    assert cluster.wait_for(lambda c: c.drop_watches(reset=True) == 1, 5)
    reader.join(timeout=5)
    assert isinstance(results.get("error"), urllib3.exceptions.ProtocolError)


def test_malformed_bodies_get_400_not_a_crash(cluster: FakeCluster) -> None:
    import urllib.error
    import urllib.request

    def send(method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"{cluster.url}{path}", data=body, method=method)
        request.add_header("Authorization", f"Bearer {cluster.token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    code, body = send("POST", "/api/v1/namespaces/default/pods", b"{not json")
    assert code == 400 and body["reason"] == "BadRequest"
    code, body = send("POST", "/api/v1/namespaces/default/pods", b'["a list"]')
    assert code == 400 and body["kind"] == "Status"
    code, body = send(
        "POST", "/api/v1/namespaces/default/pods", b'{"metadata": {"name": "m"}, "spec": {"containers": "x"}}'
    )
    assert code in (400, 422) and body["kind"] == "Status"
    code, body = send("GET", "/api/v1/namespaces/default/widgets", b"")
    assert code == 404 and body["kind"] == "Status"
