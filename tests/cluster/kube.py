"""Small helpers the cluster tests share: an admin client, pods, and waiting on a real watch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client as k
from kubernetes import config as kconfig
from kubernetes import watch


@contextmanager
def core_api(kubeconfig: Path) -> Iterator[k.CoreV1Api]:
    api_client = kconfig.new_client_from_config(str(kubeconfig))
    try:
        yield k.CoreV1Api(api_client)
    finally:
        api_client.close()


def pod_body(name: str, image: str, **spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", None) or [{"name": "base", "image": image}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": "cluster-tier"}},
        "spec": {"restartPolicy": "Never", "containers": containers, **spec},
    }


def as_json(api: k.CoreV1Api, obj: Any) -> dict[str, Any]:
    return dict(api.api_client.sanitize_for_serialization(obj))


def wait_for_pod(
    api: k.CoreV1Api,
    name: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    namespace: str = "default",
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Watch one pod until ``predicate(pod_json)`` holds; returns that pod, or fails with the last seen."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    pod = api.read_namespaced_pod(name, namespace)
    last = as_json(api, pod)
    if predicate(last):
        return last
    rv = pod.metadata.resource_version
    while (left := deadline - time.monotonic()) > 0:
        w = watch.Watch()
        for event in w.stream(
            api.list_namespaced_pod,
            namespace,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=max(1, int(left)),
        ):
            obj = as_json(api, event["object"])
            rv = obj["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                raise AssertionError(f"pod {name} was deleted while waiting; last seen: {last}")
            last = obj
            if predicate(obj):
                w.stop()
                return obj
    raise AssertionError(f"pod {name}: condition not reached in {timeout} s; last seen: {last}")


def wait_for_events(
    api: k.CoreV1Api,
    name: str,
    predicate: Callable[[list[dict[str, Any]]], bool],
    *,
    namespace: str = "default",
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """The Events about the object ``name`` once ``predicate(events_json)`` holds, through a watch.

    A kubelet (and KWOK's Stages, and the scheduler) writes a pod's status first and its Event
    after, asynchronously: a status seen does not mean its Event exists yet."""
    deadline = time.monotonic() + timeout
    selector = f"involvedObject.name={name}"
    listing = api.list_namespaced_event(namespace, field_selector=selector)
    events = {e.metadata.uid: as_json(api, e) for e in listing.items}
    rv = listing.metadata.resource_version
    while not predicate(list(events.values())):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"events of {name}: condition not reached in {timeout} s; seen: {events}")
        w = watch.Watch()
        for change in w.stream(
            api.list_namespaced_event,
            namespace,
            field_selector=selector,
            resource_version=rv,
            timeout_seconds=max(1, int(left)),
        ):
            obj = as_json(api, change["object"])
            rv = obj["metadata"]["resourceVersion"]
            if change["type"] == "DELETED":
                events.pop(obj["metadata"]["uid"], None)
            else:
                events[obj["metadata"]["uid"]] = obj
            if predicate(list(events.values())):
                w.stop()
                break
    return list(events.values())


def reasons(*wanted: str) -> Callable[[list[dict[str, Any]]], bool]:
    """An Events predicate: an Event of each of these reasons is there."""
    return lambda events: set(wanted) <= {e.get("reason") for e in events}


def waiting_reason(pod: dict[str, Any]) -> str | None:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (statuses[0].get("state", {}).get("waiting") or {}).get("reason") if statuses else None


def terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (statuses[0].get("state", {}).get("terminated")) if statuses else None


def delete_now(api: k.CoreV1Api, name: str, namespace: str = "default") -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


def eventually(check: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> bool:
    """Re-check ``check`` until it holds (for state only a request can observe, such as RBAC)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def wait_for_node_ready(api: k.CoreV1Api, name: str, timeout: float = 60.0) -> bool:
    """Watch one node until its Ready condition is True."""
    w = watch.Watch()
    selector = f"metadata.name={name}"
    for event in w.stream(api.list_node, field_selector=selector, timeout_seconds=int(timeout)):
        conditions = {c.type: c.status for c in (event["object"].status.conditions or [])}
        if conditions.get("Ready") == "True":
            w.stop()
            return True
    return False


class PodRecorder:
    """Every pod of a namespace as last seen, and which of them were deleted, from one watch kept
    open while DAGs run (the pods are gone by the time the runs end, their verdict stamps with them).

    Example::

        with PodRecorder(kubeconfig) as recorder:
            ...  # run DAGs
        assert recorder.deleted == set(recorder.pods)
    """

    def __init__(self, kubeconfig: Path, namespace: str = "default") -> None:
        import threading

        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.pods: dict[str, dict[str, Any]] = {}  # by uid
        self.deleted: set[str] = set()  # uids
        #: uid -> the first container's waiting reasons, in the order they were seen
        self.waiting: dict[str, list[str]] = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._listed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodRecorder:
        self._thread.start()
        if not self._listed.wait(30):
            raise AssertionError(f"the pod recorder could not list pods: {self.error}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            with core_api(self.kubeconfig) as api:
                listing = api.list_namespaced_pod(self.namespace)
                for pod in listing.items:
                    self._seen(as_json(api, pod))
                rv = listing.metadata.resource_version
                self._listed.set()
                while not self._stop.is_set():
                    for event in watch.Watch().stream(
                        api.list_namespaced_pod, self.namespace, resource_version=rv, timeout_seconds=2
                    ):
                        obj = as_json(api, event["object"])
                        rv = obj["metadata"]["resourceVersion"]
                        self._seen(obj)
                        if event["type"] == "DELETED":
                            self.deleted.add(obj["metadata"]["uid"])
        except ApiException as exc:  # a 410 would lose deletions: fail rather than re-list
            self.error = exc
        except BaseException as exc:
            self.error = exc
        finally:
            self._listed.set()

    def _seen(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        self.pods[uid] = pod
        reason = waiting_reason(pod)
        history = self.waiting.setdefault(uid, [])
        if reason and (not history or history[-1] != reason):
            history.append(reason)

    def of_dag(self, dag_id: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.values() if (p["metadata"].get("labels") or {}).get("dag_id") == dag_id]

    def deleted_names(self) -> set[str]:
        return {p["metadata"]["name"] for uid, p in self.pods.items() if uid in self.deleted}
