"""Each scripted kubelet behaviour reaches the statuses and events a real cluster shows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import (
    FAST,
    container_state,
    phase,
    pod_body,
    pod_is,
    snapshot_when,
    waiting_reason,
)

SCENARIO: dict[str, Any] = {
    "images": {
        "ghost:1": {"pull": "not_found"},
        "private/app:1": {"pull": "unauthorized"},
        "popular:1": {"pull": "rate_limited", "for_seconds": 15},
        "first-pod-limited:1": {"pull": "rate_limited", "for_pods": 1},
        "bad-ref:1": {"pull": "invalid_name"},
        "oom:1": {"run": {"oom": True, "duration_seconds": 1, "log": "allocating"}},
        "fails:1": {"run": {"exit_code": 3, "duration_seconds": 1, "log": "boom"}},
        "slow:1": {"run": {"duration_seconds": 600}},
    },
    "secrets": ["anything", {"name": "narrow", "data": {"token": "t"}}],
    "configmaps": ["settings"],
    "nodes": [{"name": "only-node", "cpu": "4", "memory": "8Gi"}],
}


@pytest.fixture
def sim() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=FAST) as cluster:
        yield cluster


@pytest.fixture
def api(sim: FakeCluster) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))


def events_of(sim: FakeCluster, name: str) -> list[tuple[str, str, str]]:
    items = sorted(sim.events(involved=name), key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [(e["type"], e["reason"], e["message"]) for e in items]


def lifecycle(sim: FakeCluster, name: str) -> list[str]:
    return [r["change"] for r in sim.audit_records() if r["kind"] == "lifecycle" and r["name"] == name]


def test_successful_image_goes_through_every_phase(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("ok"))
    assert sim.wait_for(pod_is("ok", lambda p: phase(p) == "Succeeded"), 5)
    pod = sim.pod("ok")
    assert pod is not None
    status = pod["status"]
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions["PodScheduled"] == ("True", None)
    assert conditions["Ready"] == ("False", "PodCompleted")
    cs = status["containerStatuses"][0]
    assert cs["imageID"].startswith("docker.io/library/busybox@sha256:")
    assert cs["image"] == "docker.io/library/busybox:1.36"
    assert cs["state"]["terminated"]["reason"] == "Completed" and cs["state"]["terminated"]["exitCode"] == 0
    assert cs["restartCount"] == 0 and cs["lastState"] == {}
    assert status["startTime"] and pod["spec"]["nodeName"] == "only-node"
    assert lifecycle(sim, "ok") == [
        "created",
        "scheduled",
        "waiting:ContainerCreating",
        "running:base",
        "phase:Running",
        "terminated:Completed",
        "phase:Succeeded",
    ]


def test_not_found_image_backs_off_with_containerd_messages(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("ghost", "ghost:1"))
    pulled = snapshot_when(sim, "ghost", lambda p: waiting_reason(p) == "ErrImagePull")
    message = container_state(pulled)["waiting"]["message"]
    assert message == (
        'rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/library/ghost:1": '
        'failed to resolve reference "docker.io/library/ghost:1": docker.io/library/ghost:1: not found'
    )
    backing_off = snapshot_when(sim, "ghost", lambda p: waiting_reason(p) == "ImagePullBackOff")
    assert container_state(backing_off)["waiting"]["message"] == 'Back-off pulling image "ghost:1"'
    # The second pull attempt comes after the 10 s back-off and bumps the aggregated events.
    assert sim.wait_for(
        lambda c: any(e["reason"] == "Pulling" and e["count"] >= 2 for e in c.events(involved="ghost")), 5
    )
    kinds = {(t, r) for t, r, _ in events_of(sim, "ghost")}
    assert {("Normal", "Pulling"), ("Warning", "Failed"), ("Normal", "BackOff")} <= kinds
    # Each later pull bumps its events' count and resourceVersion, so by the time they are read the
    # events may stand in any order: what is asserted is which messages they carry.
    failed = [m for t, r, m in events_of(sim, "ghost") if r == "Failed"]
    pull_failures = [m for m in failed if m.startswith('Failed to pull image "ghost:1": ')]
    assert len(pull_failures) == 1 and "rpc error: code = NotFound" in pull_failures[0], failed
    expected = [pull_failures[0], "Error: ErrImagePull", "Error: ImagePullBackOff"]
    assert sorted(failed) == sorted(expected), failed
    assert phase(sim.pod("ghost")) == "Pending"


def test_unauthorized_and_rate_limited_messages() -> None:
    # On the manual clock: the rate limit's 15 s and the back-offs are simulated time only, so a
    # machine that runs the kubelet's timers late cannot move the second pull past the limit (on a
    # scaled clock, a loaded make test once saw one ErrImagePull instead of two).
    with FakeCluster(SCENARIO, clock="manual") as cluster:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
        api.create_namespaced_pod("default", pod_body("priv", "private/app:1"))
        api.create_namespaced_pod("default", pod_body("pop", "popular:1"))
        first: dict[str, dict[str, Any]] = {}
        while phase(cluster.pod("pop")) != "Succeeded":
            assert cluster.sim_time < 120, lifecycle(cluster, "pop")
            cluster.advance(cluster.pending_timers()[0] - cluster.sim_time)
            for name in ("priv", "pop"):
                state = container_state(cluster.pod(name))
                if (state.get("waiting") or {}).get("reason") == "ErrImagePull":
                    first.setdefault(name, state)
        assert first["priv"]["waiting"]["message"].endswith("&service=registry.docker.io: 401 Unauthorized")
        limited = first["pop"]["waiting"]["message"]
        assert "429 Too Many Requests - Server message: toomanyrequests:" in limited
        # The rate limit lasts 15 s from the first pull: that pull and the one after the 10 s back-off
        # fail, the one after the 20 s back-off succeeds.
        assert lifecycle(cluster, "pop") == [
            "created",
            "scheduled",
            "waiting:ContainerCreating",
            "waiting:ErrImagePull",
            "waiting:ImagePullBackOff",
            "waiting:ErrImagePull",
            "waiting:ImagePullBackOff",
            "running:base",
            "phase:Running",
            "terminated:Completed",
            "phase:Succeeded",
        ]


def test_invalid_image_name(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("bad", "bad-ref:1"))
    api.create_namespaced_pod("default", pod_body("upper", "Busybox:Latest"))
    for name in ("bad", "upper"):
        assert sim.wait_for(pod_is(name, lambda p: waiting_reason(p) == "InvalidImageName"), 5)
        assert ("Warning", "Failed", "Error: InvalidImageName") in events_of(sim, name)
        assert "invalid reference format" in container_state(sim.pod(name))["waiting"]["message"]


def test_missing_secret_key_and_configmap_then_recovery(sim: FakeCluster, api: Any) -> None:
    env_missing = pod_body(
        "nosecret", env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]
    )
    key_missing = pod_body(
        "nokey", env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "narrow", "key": "k"}}}]
    )
    cm_missing = pod_body("nocm", envFrom=[{"configMapRef": {"name": "absent"}}])
    fine = pod_body(
        "fine",
        env=[
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "anything", "key": "whatever"}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "narrow", "key": "token"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "x", "optional": True}}},
        ],
        envFrom=[{"configMapRef": {"name": "settings"}}],
    )
    for body in (env_missing, key_missing, cm_missing, fine):
        api.create_namespaced_pod("default", body)
    expected = {
        "nosecret": 'secret "gone" not found',
        "nokey": "couldn't find key k in Secret default/narrow",
        "nocm": 'configmap "absent" not found',
    }
    for name, message in expected.items():
        assert sim.wait_for(pod_is(name, lambda p: waiting_reason(p) == "CreateContainerConfigError"), 5)
        assert container_state(sim.pod(name))["waiting"]["message"] == message
        assert ("Warning", "Failed", f"Error: {message}") in events_of(sim, name)
    assert sim.wait_for(pod_is("fine", lambda p: phase(p) == "Succeeded"), 5)
    # The kubelet retries: once the secret exists, the pod starts.
    sim.add_secret("gone", data={"k": "v"})
    assert sim.wait_for(pod_is("nosecret", lambda p: phase(p) == "Succeeded"), 5)


def test_missing_volume_source_stays_container_creating(sim: FakeCluster, api: Any) -> None:
    body = pod_body("vol", volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}])
    body["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "later"}}]
    api.create_namespaced_pod("default", body)
    assert sim.wait_for(lambda c: any(e["reason"] == "FailedMount" for e in c.events(involved="vol")), 5)
    event = next(e for e in sim.events(involved="vol") if e["reason"] == "FailedMount")
    assert event["message"] == 'MountVolume.SetUp failed for volume "cfg" : configmap "later" not found'
    assert event["type"] == "Warning"
    assert waiting_reason(sim.pod("vol")) == "ContainerCreating"
    sim.add_configmap("later", data={"a": "b"})
    assert sim.wait_for(pod_is("vol", lambda p: phase(p) == "Succeeded"), 5)


def test_init_containers_run_first(sim: FakeCluster, api: Any) -> None:
    body = pod_body("init")
    body["spec"]["initContainers"] = [
        {"name": "prep", "image": "busybox:1.36"},
        {"name": "prep2", "image": "fails:1"},
    ]
    api.create_namespaced_pod("default", body)
    assert sim.wait_for(pod_is("init", lambda p: phase(p) == "Failed"), 5)
    pod = sim.pod("init")
    assert pod is not None
    init = {s["name"]: s["state"] for s in pod["status"]["initContainerStatuses"]}
    assert init["prep"]["terminated"]["exitCode"] == 0
    assert init["prep2"]["terminated"]["exitCode"] == 3
    assert waiting_reason(pod) == "PodInitializing", (
        "main containers never start after a failed init container"
    )
    changes = lifecycle(sim, "init")
    assert changes.index("running:prep") < changes.index("running:prep2")


def test_oom_and_exit_code_with_logs(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("oom", "oom:1"))
    api.create_namespaced_pod("default", pod_body("fails", "fails:1"))
    assert sim.wait_for(pod_is("oom", lambda p: phase(p) == "Failed"), 5)
    assert sim.wait_for(pod_is("fails", lambda p: phase(p) == "Failed"), 5)
    oom = container_state(sim.pod("oom"))["terminated"]
    assert (oom["reason"], oom["exitCode"]) == ("OOMKilled", 137)
    fails = container_state(sim.pod("fails"))["terminated"]
    assert (fails["reason"], fails["exitCode"]) == ("Error", 3)
    assert sim.logs("fails") == "boom\n"
    assert "terminated:OOMKilled" in lifecycle(sim, "oom")


def test_restart_policy_always_crash_loops(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("crash", "fails:1", restart_policy="Always"))
    pod = snapshot_when(sim, "crash", lambda p: waiting_reason(p) == "CrashLoopBackOff")
    cs = pod["status"]["containerStatuses"][0]  # type: ignore[index]
    assert cs["restartCount"] == 1 and cs["lastState"]["terminated"]["exitCode"] == 3
    assert phase(pod) == "Running"
    previous = api.read_namespaced_pod_log("crash", "default", previous=True, _preload_content=False)
    assert previous.read() == b"boom\n"
    api.create_namespaced_pod("default", pod_body("once", "fails:1"))
    assert sim.wait_for(pod_is("once", lambda p: phase(p) == "Failed"), 5)
    with pytest.raises(kubernetes.client.ApiException) as caught:
        api.read_namespaced_pod_log("once", "default", previous=True)
    assert caught.value.status == 400
    assert (
        json.loads(caught.value.body)["message"]
        == 'previous terminated container "base" in pod "once" not found'
    )


def test_unschedulable_until_capacity_frees(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("hog", "slow:1", resources={"requests": {"cpu": "3"}}))
    api.create_namespaced_pod(
        "default", pod_body("wait", resources={"requests": {"cpu": "2", "memory": "1Gi"}})
    )
    assert sim.wait_for(
        pod_is(
            "wait",
            lambda p: any(
                c["type"] == "PodScheduled" and c["status"] == "False"
                for c in (p or {}).get("status", {}).get("conditions", [])
            ),
        ),
        5,
    )
    condition = next(c for c in sim.pod("wait")["status"]["conditions"] if c["type"] == "PodScheduled")  # type: ignore[index]
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    assert ("Warning", "FailedScheduling", condition["message"]) in events_of(sim, "wait")
    api.delete_namespaced_pod("hog", "default", grace_period_seconds=0)
    assert sim.wait_for(pod_is("wait", lambda p: phase(p) == "Succeeded"), 5)


def test_autoscaler_triggers_scale_up() -> None:
    scenario = {
        "nodes": [{"name": "small", "cpu": "1", "memory": "1Gi"}],
        "autoscaler": {"scale_up_after_seconds": 30, "node": {"cpu": "8", "memory": "16Gi"}},
    }
    with FakeCluster(scenario, time_scale=FAST) as sim:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))
        api.create_namespaced_pod("default", pod_body("big", resources={"requests": {"cpu": "4"}}))
        assert sim.wait_for(pod_is("big", lambda p: phase(p) == "Succeeded"), 5)
        reasons = [r for _, r, _ in events_of(sim, "big")]
        assert {"FailedScheduling", "TriggeredScaleUp", "Scheduled"} <= set(reasons)
        changes = lifecycle(sim, "big")
        assert changes.index("unschedulable") < changes.index("scheduled")
        scheduled = next(m for _, r, m in events_of(sim, "big") if r == "Scheduled")
        assert scheduled.endswith("to autoscaled-1")


def test_sidecar_keeps_the_pod_running(sim: FakeCluster, api: Any) -> None:
    body = pod_body("side")
    body["spec"]["containers"].append({"name": "airflow-xcom-sidecar", "image": "alpine:3.24.2"})
    api.create_namespaced_pod("default", body)
    assert sim.wait_for(pod_is("side", lambda p: "terminated" in container_state(p)), 5)
    assert phase(sim.pod("side")) == "Running"
    assert "running" in container_state(sim.pod("side"), "airflow-xcom-sidecar")


def disruption_condition(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    for c in (pod or {}).get("status", {}).get("conditions", []):
        if c["type"] == "DisruptionTarget":
            return dict(c)
    return None


def test_evict(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("ev", "slow:1"))
    assert sim.wait_for(pod_is("ev", lambda p: phase(p) == "Running"), 5)
    sim.disrupt("ev", "evict")
    assert sim.wait_for(pod_is("ev", lambda p: phase(p) == "Failed"), 5)
    pod = sim.pod("ev")
    assert pod is not None and pod["status"]["reason"] == "Evicted"
    assert disruption_condition(pod)["reason"] == "EvictionByEvictionAPI"  # type: ignore[index]
    assert container_state(pod)["terminated"]["exitCode"] == 137
    assert "evicted" in lifecycle(sim, "ev")


def test_preempt(sim: FakeCluster, api: Any) -> None:
    pod = api.create_namespaced_pod("default", pod_body("pre", "slow:1"))
    assert sim.wait_for(pod_is("pre", lambda p: phase(p) == "Running"), 5)
    sim.disrupt("pre", "preempt")
    assert sim.wait_for(lambda c: c.pod("pre") is None, 5)
    final = next(p for p in sim.all_pods() if p["metadata"]["uid"] == pod.metadata.uid)
    assert disruption_condition(final)["reason"] == "PreemptionByScheduler"  # type: ignore[index]
    assert final["deleted"] and final["metadata"]["deletionTimestamp"]
    assert any(r == "Preempted" for _, r, _ in events_of(sim, "pre"))


def test_node_lost_goes_stale_then_unknown_then_gone() -> None:
    with FakeCluster({"images": {"slow:1": {"run": {"duration_seconds": 6000}}}}, time_scale=0.005) as sim:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))
        pod = api.create_namespaced_pod("default", pod_body("lost", "slow:1"))
        assert sim.wait_for(pod_is("lost", lambda p: phase(p) == "Running"), 5)
        sim.disrupt("lost", "node_lost")
        unknown = snapshot_when(sim, "lost", lambda p: phase(p) == "Unknown")
        ready = next(c for c in unknown["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        stale = snapshot_when(sim, "lost", lambda p: disruption_condition(p) is not None)
        assert disruption_condition(stale)["reason"] == "DeletionByTaintManager"  # type: ignore[index]
        terminated = container_state(stale)["terminated"]
        assert (terminated["reason"], terminated["exitCode"]) == ("ContainerStatusUnknown", 137)
        assert stale["metadata"]["deletionTimestamp"]  # type: ignore[index]
        assert sim.wait_for(lambda c: c.pod("lost") is None, 5)
        final = next(p for p in sim.all_pods() if p["metadata"]["uid"] == pod.metadata.uid)
        assert final["deleted"] and final["status"]["phase"] == "Failed"
        # The taint manager's deletion is audited as every deletion is (``deleting``, with its grace).
        assert lifecycle(sim, "lost")[-5:] == [
            "disruption:DeletionByTaintManager",
            "terminated:ContainerStatusUnknown",
            "deleting",
            "phase:Failed",
            "deleted",
        ]


def test_scheduled_disruptions_hit_the_first_matching_pod() -> None:
    scenario = {
        "images": {"slow:1": {"run": {"duration_seconds": 600}}},
        "disruptions": [{"pod_name_prefix": "etl-", "after_seconds": 2, "kind": "delete"}],
    }
    with FakeCluster(scenario, time_scale=FAST) as sim:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))
        api.create_namespaced_pod("default", pod_body("etl-1", "slow:1"))
        assert sim.wait_for(lambda c: c.pod("etl-1") is None, 5)
        api.create_namespaced_pod("default", pod_body("etl-2", "slow:1"))
        assert sim.wait_for(pod_is("etl-2", lambda p: phase(p) == "Running"), 5)
        assert not sim.wait_for(lambda c: c.pod("etl-2") is None, 0.1), (
            "count defaults to 1: the relaunch survives"
        )
        assert "deleted_externally" in lifecycle(sim, "etl-1")


def test_eviction_api_marks_then_deletes(sim: FakeCluster, api: Any) -> None:
    pod = api.create_namespaced_pod("default", pod_body("evapi", "slow:1"))
    assert sim.wait_for(pod_is("evapi", lambda p: phase(p) == "Running"), 5)
    eviction = kubernetes.client.V1Eviction(
        metadata=kubernetes.client.V1ObjectMeta(name="evapi", namespace="default"),
        delete_options=kubernetes.client.V1DeleteOptions(grace_period_seconds=10),
    )
    api.create_namespaced_pod_eviction("evapi", "default", eviction)
    assert sim.wait_for(lambda c: c.pod("evapi") is None, 5)
    final = next(p for p in sim.all_pods() if p["metadata"]["uid"] == pod.metadata.uid)
    assert disruption_condition(final)["reason"] == "EvictionByEvictionAPI"  # type: ignore[index]
    assert final["metadata"]["deletionGracePeriodSeconds"] == 10
    assert sim.request_counts()[("create", "pods/eviction")] == 1


def test_node_selector_nobody_matches(sim: FakeCluster, api: Any) -> None:
    body = pod_body("picky")
    body["spec"]["nodeSelector"] = {"gpu": "a100"}
    api.create_namespaced_pod("default", body)
    assert sim.wait_for(
        lambda c: any(e["reason"] == "FailedScheduling" for e in c.events(involved="picky")), 5
    )
    message = next(e["message"] for e in sim.events(involved="picky") if e["reason"] == "FailedScheduling")
    assert message.startswith("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.")
    fits = pod_body("fits")
    fits["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "only-node"}
    api.create_namespaced_pod("default", fits)
    assert sim.wait_for(pod_is("fits", lambda p: phase(p) == "Succeeded"), 5)


def test_active_deadline_exceeded(sim: FakeCluster, api: Any) -> None:
    body = pod_body("deadline", "slow:1")
    body["spec"]["activeDeadlineSeconds"] = 5
    api.create_namespaced_pod("default", body)
    assert sim.wait_for(pod_is("deadline", lambda p: phase(p) == "Failed"), 5)
    pod = sim.pod("deadline")
    assert pod is not None and pod["status"]["reason"] == "DeadlineExceeded"
    assert container_state(pod)["terminated"]["exitCode"] == 137
    assert (
        "Warning",
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    ) in events_of(sim, "deadline")


def test_newer_kubelets_keep_the_pull_error_in_the_back_off_message() -> None:
    scenario = {"images": {"ghost:1": {"pull": "not_found"}}, "kubernetes_version": "1.32"}
    with FakeCluster(scenario, time_scale=FAST) as sim:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))
        assert kubernetes.client.VersionApi(api.api_client).get_code().minor == "32"
        api.create_namespaced_pod("default", pod_body("ghost", "ghost:1"))
        backing_off = snapshot_when(sim, "ghost", lambda p: waiting_reason(p) == "ImagePullBackOff")
        message = container_state(backing_off)["waiting"]["message"]
        assert message.startswith(
            'Back-off pulling image "ghost:1": ErrImagePull: rpc error: code = NotFound'
        )


def test_a_test_ends_a_running_container_when_it_chooses(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("held", image="slow:1"))
    with pytest.raises(KeyError, match="no live pod default/nowhere"):
        sim.exit_container("nowhere")
    assert sim.wait_for(pod_is("held", lambda p: phase(p) == "Running"), 5)
    sim.exit_container("held", 4)
    assert sim.wait_for(pod_is("held", lambda p: phase(p) == "Failed"), 5)
    terminated = container_state(sim.pod("held"))["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (4, "Error")
    assert "terminated:Error" in lifecycle(sim, "held")
    with pytest.raises(RuntimeError, match="its first main container of default/held is not running"):
        sim.exit_container("held")


def test_an_outage_for_one_pod_fails_its_pulls_and_no_later_pods(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", pod_body("first", "first-pod-limited:1"))
    assert sim.wait_for(pod_is("first", lambda p: waiting_reason(p) == "ImagePullBackOff"), 5)
    api.create_namespaced_pod("default", pod_body("second", "first-pod-limited:1"))
    assert sim.wait_for(pod_is("second", lambda p: phase(p) == "Succeeded"), 5)
    assert ("Normal", "Pulled") in [(t, r) for t, r, _ in events_of(sim, "second")]
    # The second pod's pull put the image on the (only) node: the first pod's next try finds it
    # there, as a kubelet with imagePullPolicy IfNotPresent does, and runs.
    assert sim.wait_for(pod_is("first", lambda p: phase(p) == "Succeeded"), 10)
    messages = [m for _, reason, m in events_of(sim, "first") if reason == "Pulled"]
    assert messages == ['Container image "first-pod-limited:1" already present on machine']
