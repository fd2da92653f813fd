"""A scenario's ``disruptions`` on the real control plane, through the paths a cluster really has.

The disruptor watches pods in every namespace; ``after_seconds`` (times the scenario's
``time_scale``) after a pod whose name starts with an entry's ``pod_name_prefix`` is created, it:

* ``evict``: posts an Eviction (policy/v1): the API server adds ``DisruptionTarget`` reason
  ``EvictionByEvictionAPI`` and deletes the pod gracefully;
* ``delete``: deletes the pod through the API, gracefully, as ``kubectl delete`` does;
* ``preempt``: creates a pod of a higher PriorityClass that asks for all of the victim's node's
  CPU, so the real scheduler preempts the victim (``DisruptionTarget`` reason
  ``PreemptionByScheduler``); only a victim that requests CPU can be preempted this way. The
  preemptor is deleted (grace 0) once the victim is gone or being deleted, or after
  :data:`PREEMPTOR_WAIT` seconds if it is not, so it never fills the node: the pods that come
  after the victim find the node's CPU free, and no preemptor is left behind;
* ``node_lost``: stops the KWOK process that plays the victim's node (one per node, as one
  kubelet per node), so that node's heartbeats (its Lease) stop; the real node lifecycle
  controller marks it not ready after its grace period (50 s) and the taint eviction controller
  evicts its pods after their ``tolerationSeconds`` (300 s by default);
* ``admit``: lifts the pod's scheduling gates with a JSON merge patch, as Kueue's controller does
  when it admits the pod; the real scheduler then places it.

It is one part of the harness process (:mod:`.harness`), which feeds it every pod it sees, and
writes what it did to the harness's log.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry_testing.scenario import Disruption, Scenario

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Pod

log = logging.getLogger(__name__)

PREEMPTOR_CLASS = "airflow-k8s-retry-preemptor"
#: The name prefix of the preemptor pods (``generateName``); the disruptor never disrupts them.
PREEMPTOR_PREFIX = "airflow-k8s-retry-preemptor-"
#: Seconds a preemptor waits at most for its victim to go before it is deleted anyway, and then
#: for its own deletion to get through (the API server may be restarting).
PREEMPTOR_WAIT = 120.0
#: Seconds between two looks at a preemptor's victim.
PREEMPTOR_POLL = 1.0


class Disruptor:
    def __init__(self, api_client: ApiClient, directory: Path, scenario: Scenario) -> None:
        from kubernetes import client

        self.directory = directory
        self.core = client.CoreV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)
        self.scenario = scenario
        self.left: list[int | None] = [d.count for d in scenario.disruptions]
        self.seen: set[str] = set()
        self._timers: list[threading.Timer] = []
        self._closing = threading.Event()

    def on_pod(self, kind: str, pod: V1Pod) -> None:
        if kind == "ADDED":
            meta = pod.metadata
            self._on_created(meta.namespace, meta.name, meta.uid, meta.creation_timestamp)

    def close(self) -> None:
        """Cancel the disruptions to come and stop waiting on preemptors' victims (not waiting for
        those threads: a preemptor still there then is left to the control plane going down)."""
        self._closing.set()
        for timer in self._timers:
            timer.cancel()

    def _on_created(self, namespace: str, name: str, uid: str, created: datetime.datetime | None) -> None:
        if uid in self.seen or name.startswith(PREEMPTOR_PREFIX):
            return
        self.seen.add(uid)
        for index, disruption in enumerate(self.scenario.disruptions):
            if not name.startswith(disruption.pod_name_prefix) or self.left[index] == 0:
                continue
            remaining = self.left[index]
            self.left[index] = None if remaining is None else remaining - 1
            delay = disruption.after_seconds * self.scenario.time_scale
            if created is not None:  # counted from the pod's creation, even if seen late
                delay -= (datetime.datetime.now(datetime.UTC) - created).total_seconds()
            delay = max(delay, 0.0)
            timer = threading.Timer(delay, self._disrupt, (disruption, namespace, name, uid))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)
            log.info("%s %s/%s in %.1f s", disruption.kind, namespace, name, delay)

    def _disrupt(self, disruption: Disruption, namespace: str, name: str, uid: str) -> None:
        try:
            getattr(self, f"_{disruption.kind}")(namespace, name, uid)
            log.info("did %s on %s/%s", disruption.kind, namespace, name)
        except Exception as exc:
            log.error("could not %s %s/%s: %s", disruption.kind, namespace, name, exc)

    def _evict(self, namespace: str, name: str, uid: str) -> None:
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        self.core.create_namespaced_pod_eviction(name, namespace, body)

    def _admit(self, namespace: str, name: str, uid: str) -> None:
        body = {"metadata": {"uid": uid}, "spec": {"schedulingGates": None}}  # the uid: a precondition
        self.core.patch_namespaced_pod(name, namespace, body, _content_type="application/merge-patch+json")

    def _delete(self, namespace: str, name: str, uid: str) -> None:
        self.core.delete_namespaced_pod(name, namespace, body={"preconditions": {"uid": uid}})

    def _preempt(self, namespace: str, name: str, uid: str) -> None:
        from kubernetes.client.exceptions import ApiException

        pod = self.core.read_namespaced_pod(name, namespace)
        node_name = pod.spec.node_name
        if not node_name:
            raise RuntimeError("the pod is not on a node yet")
        requests = [((c.resources and c.resources.requests) or {}).get("cpu") for c in pod.spec.containers]
        if not any(requests):
            raise RuntimeError("preempt needs a victim that requests CPU (spec.containers[].resources)")
        try:
            self.scheduling.create_priority_class(
                {
                    "metadata": {"name": PREEMPTOR_CLASS},
                    "value": 1_000_000_000,
                    "preemptionPolicy": "PreemptLowerPriority",
                }
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        node = self.core.read_node(node_name)
        cpu = node.status.allocatable["cpu"]
        preemptor = self.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"generateName": PREEMPTOR_PREFIX},
                "spec": {
                    "priorityClassName": PREEMPTOR_CLASS,
                    "nodeSelector": {"kubernetes.io/hostname": node_name},
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "preemptor",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu}},
                        }
                    ],
                },
            },
        )
        preemptor_name: str = preemptor.metadata.name
        log.info("created preemptor %s/%s for %s on node %s", namespace, preemptor_name, name, node_name)
        threading.Thread(
            target=self._remove_preemptor,
            args=(namespace, preemptor_name, name, uid),
            name=f"remove-{preemptor_name}",
            daemon=True,
        ).start()

    def _remove_preemptor(self, namespace: str, preemptor: str, victim: str, uid: str) -> None:
        """Delete the preemptor once the victim is gone or being deleted, or after
        :data:`PREEMPTOR_WAIT` seconds if it is not; stop without deleting when the disruptor
        closes."""
        started = time.monotonic()
        why = f"{namespace}/{victim} is gone or being deleted"
        while not self._victim_gone(namespace, victim, uid):
            if time.monotonic() - started >= PREEMPTOR_WAIT:
                why = f"{namespace}/{victim} is still there after {PREEMPTOR_WAIT:.0f} s"
                break
            if self._closing.wait(PREEMPTOR_POLL):
                log.info("closing: preemptor %s/%s is left", namespace, preemptor)
                return
        waited = time.monotonic() - started
        deadline = time.monotonic() + PREEMPTOR_WAIT
        while not self._delete_now(namespace, preemptor):
            if self._closing.wait(PREEMPTOR_POLL):
                log.info("closing: preemptor %s/%s is left", namespace, preemptor)
                return
            if time.monotonic() >= deadline:
                log.error("could not delete preemptor %s/%s; it is left", namespace, preemptor)
                return
        log.info("deleted preemptor %s/%s after %.1f s: %s", namespace, preemptor, waited, why)

    def _victim_gone(self, namespace: str, name: str, uid: str) -> bool:
        """Whether the pod ``uid`` is gone (its name is free or another pod's) or being deleted."""
        from kubernetes.client.exceptions import ApiException

        try:
            pod = self.core.read_namespaced_pod(name, namespace, _request_timeout=10)
        except ApiException as exc:
            return bool(exc.status == 404)
        except Exception:  # the API server is not answering (restarting): look again later
            return False
        return pod.metadata.uid != uid or pod.metadata.deletion_timestamp is not None

    def _delete_now(self, namespace: str, name: str) -> bool:
        """Delete the pod with grace 0; whether it is gone now (already gone counts)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _request_timeout=10)
        except Exception as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return True
            log.warning("deleting %s/%s failed (%s); trying again", namespace, name, exc)
            return False
        return True

    def _node_lost(self, namespace: str, name: str, uid: str) -> None:
        pod = self.core.read_namespaced_pod(name, namespace)
        node_name = pod.spec.node_name
        if not node_name:
            raise RuntimeError("the pod is not on a node yet")
        from tools.controlplane.cluster import KWOK_PREFIX, ControlPlane, _alive

        cp = ControlPlane.attach(self.directory)
        if cp is None:
            raise RuntimeError(f"the control plane in {self.directory} is not running")
        pid = cp.pids.get(f"{KWOK_PREFIX}{node_name}")
        if pid is None or not _alive(pid, cp.binary(f"{KWOK_PREFIX}{node_name}")):
            raise RuntimeError(f"no running KWOK process plays node {node_name}")
        marker = cp.lost_marker(node_name)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(pid))
        os.kill(pid, signal.SIGTERM)
