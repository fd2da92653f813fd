"""Registry outages that end (an image's ``for_seconds``) on the real control plane.

A registry outage is global: it lasts ``for_seconds`` (times ``time_scale``) from the first pull
of the image anywhere in the cluster, then every pull of it works. KWOK's Stages see one pod at a
time, so the registry keeps that clock: it stamps each pod of such an image, once it is on a node,
with the Unix time the outage ends (:data:`~.stages.REGISTRY_UP_AT`); the image's Stages pull
again after each back-off and succeed on the first pull that starts at or after that time.
Until it is stamped, such a pod waits in ``ContainerCreating``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from airflow_k8s_retry_testing.scenario import Scenario
from tools.controlplane.stages import REGISTRY_UP_AT, runs

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Pod

log = logging.getLogger(__name__)


class Registry:
    def __init__(self, api_client: ApiClient, scenario: Scenario) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        #: image reference -> how long its outage lasts, in real seconds
        self.outages = {
            ref: behaviour.for_seconds * scenario.time_scale
            for ref, behaviour in scenario.images.items()
            if behaviour.for_seconds is not None and behaviour.pull != "ok" and runs(behaviour)
        }
        #: image reference -> when its first pull started (Unix time)
        self.first_pull: dict[str, float] = {}
        self.stamped: set[str] = set()

    def on_pod(self, kind: str, pod: V1Pod) -> None:
        meta = pod.metadata
        if kind == "DELETED":
            self.stamped.discard(meta.uid)
            return
        if not self.outages or meta.uid in self.stamped or meta.deletion_timestamp:
            return
        if REGISTRY_UP_AT in (meta.annotations or {}):
            self.stamped.add(meta.uid)
            return
        image = pod.spec.containers[0].image
        if image not in self.outages or not pod.spec.node_name:
            return
        first = self.first_pull.setdefault(image, time.time())
        up_at = first + self.outages[image]
        self._stamp(meta.namespace, meta.name, meta.uid, up_at)
        self.stamped.add(meta.uid)

    def _stamp(self, namespace: str, name: str, uid: str, up_at: float) -> None:
        from kubernetes.client.exceptions import ApiException

        patch = {"metadata": {"uid": uid, "annotations": {REGISTRY_UP_AT: f"{up_at:.3f}"}}}
        try:
            self.core.patch_namespaced_pod(name, namespace, patch)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or replaced by a pod of the same name
                raise
            return
        log.info("registry: pulls for %s/%s work from %.3f", namespace, name, up_at)

    def close(self) -> None:
        pass
