"""A scenario's ``disruptions`` on the real control plane, through the paths a cluster really has.

The disruptor watches pods in every namespace; ``after_seconds`` (times the scenario's
``time_scale``) after a pod whose name starts with an entry's ``pod_name_prefix`` is created, it:

* ``evict``: posts an Eviction (policy/v1): the API server adds ``DisruptionTarget`` reason
  ``EvictionByEvictionAPI`` and deletes the pod gracefully;
* ``delete``: deletes the pod through the API, gracefully, as ``kubectl delete`` does;
* ``preempt``: creates a pod of a higher PriorityClass that asks for all of the victim's node's
  CPU, so the real scheduler preempts the victim (``DisruptionTarget`` reason
  ``PreemptionByScheduler``); only a victim that requests CPU can be preempted this way;
* ``node_lost``: stops the KWOK process that plays the victim's node (one per node, as one
  kubelet per node), so that node's heartbeats (its Lease) stop; the real node lifecycle
  controller marks it not ready after its grace period (50 s) and the taint eviction controller
  evicts its pods after their ``tolerationSeconds`` (300 s by default).

It is one part of the harness process (:mod:`.harness`), which feeds it every pod it sees, and
writes what it did to the harness's log.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry_testing.scenario import Disruption, Scenario

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Pod

log = logging.getLogger(__name__)

PREEMPTOR_CLASS = "airflow-k8s-retry-preemptor"


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

    def on_pod(self, kind: str, pod: V1Pod) -> None:
        if kind == "ADDED":
            meta = pod.metadata
            self._on_created(meta.namespace, meta.name, meta.uid, meta.creation_timestamp)

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()

    def _on_created(self, namespace: str, name: str, uid: str, created: datetime.datetime | None) -> None:
        if uid in self.seen or name.startswith("airflow-k8s-retry-preemptor-"):
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
        self.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"generateName": "airflow-k8s-retry-preemptor-"},
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

    def _node_lost(self, namespace: str, name: str, uid: str) -> None:
        pod = self.core.read_namespaced_pod(name, namespace)
        node_name = pod.spec.node_name
        if not node_name:
            raise RuntimeError("the pod is not on a node yet")
        from airflow_k8s_retry_testing.controlplane.cluster import KWOK_PREFIX, ControlPlane, _alive

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
