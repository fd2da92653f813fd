"""Container logs (an image's ``run.log``) on the real control plane.

The API server reads ``pods/log`` from the kubelet of the pod's node, at the address and port its
node status names, over TLS: here the harness's front (:mod:`.kubeletfront`) of the KWOK
process that plays that node. KWOK serves a
container's log from a file in the kubelet's log format (one ``TIME STREAM F TEXT`` line each),
found through a ``Logs`` object named as the pod; so its tail, ``sinceSeconds`` and
``limitBytes`` are the kubelet's own code at work.

When a pod starts running, this part writes one file per container under ``DIR/podlogs`` and the
pod's ``Logs`` object (owned by the pod, so the garbage collector removes it with the pod), then
writes the image's log lines over the run as the simulator does: in up to 50 chunks spread over
``run.duration_seconds``, each line stamped with the time it was written. A container whose image
has no log has an empty file. Before the pod runs there is no ``Logs`` object, and a log request
is answered 400, as a kubelet answers for a container that has not started.
"""

from __future__ import annotations

import datetime
import logging
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry_testing.scenario import Scenario

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Pod

log = logging.getLogger(__name__)

#: At most this many writes per container, as the simulator spreads a log over the run.
MAX_CHUNKS = 50


def cri_line(text: str, at: datetime.datetime) -> str:
    """One line of a container log file as the kubelet writes it (CRI format, full line)."""
    stamp = at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return f"{stamp} stdout F {text}\n"


class PodLogs:
    def __init__(self, api_client: ApiClient, directory: Path, scenario: Scenario) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.root = directory / "podlogs"
        self.scenario = scenario
        self.started: dict[str, Path] = {}
        #: (namespace, pod, container) of every container seen terminated
        self.finished: set[tuple[str, str, str]] = set()
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()

    def terminated(self, namespace: str, name: str, container: str) -> bool:
        return (namespace, name, container) in self.finished

    def on_pod(self, kind: str, pod: V1Pod) -> None:
        meta = pod.metadata
        for status in (pod.status and pod.status.container_statuses) or []:
            if status.state is not None and status.state.terminated is not None:
                self.finished.add((meta.namespace, meta.name, status.name))
        if kind == "DELETED":
            self.finished -= {k for k in self.finished if k[:2] == (meta.namespace, meta.name)}
            folder = self.started.pop(meta.uid, None)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            return
        if meta.uid in self.started or not _running(pod):
            return
        folder = self.root / f"{meta.namespace}_{meta.name}_{meta.uid}"
        folder.mkdir(parents=True, exist_ok=True)
        self.started[meta.uid] = folder
        entries = []
        for container in pod.spec.containers:
            path = folder / f"{container.name}.log"
            path.touch()
            entries.append({"containers": [container.name], "logsFile": str(path)})
            self._schedule(path, container.image)
        body: dict[str, Any] = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta.name, "uid": meta.uid}],
            },
            "spec": {"logs": entries},
        }
        self._create(meta.namespace, body)

    def _schedule(self, path: Path, image: str) -> None:
        behaviour = self.scenario.images.get(image)
        lines = behaviour.run.log.splitlines() if behaviour is not None else []
        if not lines or behaviour is None:
            return
        groups = min(len(lines), MAX_CHUNKS)
        per = -(-len(lines) // groups)
        duration = behaviour.run.duration_seconds * self.scenario.time_scale
        for g in range(groups):
            chunk = lines[g * per : (g + 1) * per]
            if not chunk:
                continue
            if g == 0:
                self._write(path, chunk)
                continue
            timer = threading.Timer(duration * g / groups, self._write, (path, chunk))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)

    def _write(self, path: Path, lines: list[str]) -> None:
        now = datetime.datetime.now(datetime.UTC)
        with self._lock:
            if not path.parent.exists():  # the pod is gone
                return
            with path.open("a") as f:
                f.write("".join(cri_line(line, now) for line in lines))

    def _create(self, namespace: str, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        where = ("kwok.x-k8s.io", "v1alpha1", namespace, "logs")
        try:
            self.custom.create_namespaced_custom_object(*where, body)
        except ApiException as exc:
            if exc.status == 409:  # a pod of the same name before this one: replace its Logs
                self.custom.delete_namespaced_custom_object(*where, body["metadata"]["name"])
                self.custom.create_namespaced_custom_object(*where, body)
            elif exc.status != 404:
                raise

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()


def _running(pod: V1Pod) -> bool:
    """Whether the pod's first container has started (KWOK's Stages start every container at once)."""
    statuses = (pod.status and pod.status.container_statuses) or []
    return bool(statuses) and statuses[0].state is not None and statuses[0].state.running is not None
