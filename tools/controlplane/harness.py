"""The harness process: what a scenario asks of the kubelet that KWOK's Stages cannot express.

It runs next to the components (``python -m tools.controlplane harness``),
watches every pod of the cluster once, and hands each change to its parts:

* :class:`~.disruptions.Disruptor`: the scenario's ``disruptions``, through the real paths;
* :class:`~.registry.Registry`: registry outages that end (``for_seconds``);
* :class:`~.podlogs.PodLogs`: the containers' logs (``run.log``), which KWOK's node servers serve;

and it serves each node's kubelet endpoint (:class:`~.kubeletfront.KubeletFront`).

It writes ``harness.ready`` once it has listed the pods, and what it does to its log.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from airflow_k8s_retry_testing.scenario import Scenario

if TYPE_CHECKING:
    from kubernetes.client import V1Pod

log = logging.getLogger(__name__)


class Part(Protocol):
    def on_pod(self, kind: str, pod: V1Pod) -> None: ...

    def close(self) -> None: ...


class Harness:
    def __init__(self, directory: Path, scenario: Scenario) -> None:
        from kubernetes import client, config

        from tools.controlplane.cluster import KUBELET_PREFIX, KWOK_PREFIX
        from tools.controlplane.disruptions import Disruptor
        from tools.controlplane.kubeletfront import KubeletFront
        from tools.controlplane.podlogs import PodLogs
        from tools.controlplane.registry import Registry

        self._api_client = config.new_client_from_config(str(directory / "kubeconfig"))
        self.core = client.CoreV1Api(self._api_client)
        logs = PodLogs(self._api_client, directory, scenario)
        self.parts: list[Part] = [
            Disruptor(self._api_client, directory, scenario),
            Registry(self._api_client, scenario),
            logs,
        ]
        ports = json.loads((directory / "state.json").read_text())["ports"]
        routes = {
            int(port): int(ports[KWOK_PREFIX + name[len(KUBELET_PREFIX) :]])
            for name, port in ports.items()
            if name.startswith(KUBELET_PREFIX)
        }
        self.front = KubeletFront(directory / "pki", routes, logs.terminated, self.container_started)

    def container_started(self, namespace: str, name: str, container: str) -> bool:
        """Whether the API server reports the container running or terminated (a kubelet has its
        log then)."""
        try:
            pod = self.core.read_namespaced_pod(name, namespace, _request_timeout=10)
        except Exception:
            return False
        for status in (pod.status and pod.status.container_statuses) or []:
            if status.name == container and status.state is not None:
                return status.state.running is not None or status.state.terminated is not None
        return False

    def dispatch(self, kind: str, pod: V1Pod) -> None:
        for part in self.parts:
            try:
                part.on_pod(kind, pod)
            except Exception:
                log.exception("%s failed on %s %s", type(part).__name__, kind, pod.metadata.name)

    def run(self, stop: threading.Event, ready: Path | None = None) -> None:
        from kubernetes import watch

        rv = self._list()
        if ready is not None:
            ready.write_text(rv)
        while not stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=30
                ):
                    pod = event["object"]
                    rv = pod.metadata.resource_version
                    self.dispatch(event["type"], pod)
                    if stop.is_set():
                        w.stop()
            except Exception as exc:
                if getattr(exc, "status", None) == 410:
                    rv = self._list()
                else:
                    log.warning("watching pods failed (%s); watching again", exc)
                    stop.wait(1.0)
        for part in self.parts:
            part.close()
        self.front.close()

    def _list(self) -> str:
        listing = self.core.list_pod_for_all_namespaces()
        for pod in listing.items:
            self.dispatch("ADDED", pod)
        return str(listing.metadata.resource_version)


def run_forever(directory: Path, scenario: Scenario) -> None:
    """The harness process of the control plane in ``directory``: runs until SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    harness = Harness(directory, scenario)
    harness.front.start()
    log.info("harness running (%d disruption entries)", len(scenario.disruptions))
    thread = threading.Thread(target=harness.run, args=(stop, directory / "harness.ready"), daemon=True)
    thread.start()
    while not stop.is_set():
        stop.wait(1.0)
