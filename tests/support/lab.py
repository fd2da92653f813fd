"""The bench the watching tests stand on: pods of a try in a FakeCluster, and a trigger run to its end.

Pods are created directly through the synchronous client, labelled and named exactly as the
operator names them, so the trigger sees the same objects it sees in production.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.kills import policy
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, TryIdentity
from airflow_k8s_retry.triggers.pod import PodEvent, PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster

CONN_ID = "k8s_fake"


def kill_work() -> set[asyncio.Future[None]]:
    """The kill work under way on the running event loop (what ``kills.policy.keep_until_done``
    holds on to)."""
    return {f for f in policy._KILL_WORK if f.get_loop() is asyncio.get_running_loop()}


def use_cluster(monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, kubeconfig: Any = None) -> str:
    """Point the ``k8s_fake`` Airflow connection at ``cluster`` (or at a restricted kubeconfig)."""
    extra = {"kube_config_path": str(kubeconfig or cluster.kubeconfig)}
    connection = json.dumps({"conn_type": "kubernetes", "extra": extra})
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", connection)
    return CONN_ID


def pod_body(
    identity: TryIdentity,
    image: str,
    *,
    relaunch: int = 0,
    env_from_secret: str | None = None,
    spec: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "base", "image": image}
    if env_from_secret:
        container["env"] = [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": env_from_secret, "key": "token"}}}
        ]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": identity.pod_name(relaunch),
            "labels": dict(labels) if labels is not None else identity.labels(relaunch),
        },
        "spec": {"restartPolicy": "Never", "containers": [container], **dict(spec or {})},
    }
    return body


def create_pod(cluster: FakeCluster, body: Mapping[str, Any], namespace: str = "default") -> dict[str, Any]:
    """Create the pod and return it as JSON (with its UID)."""
    client = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        from kubernetes import client as k

        created = k.CoreV1Api(client).create_namespaced_pod(namespace, dict(body))
        return dict(client.sanitize_for_serialization(created))
    finally:
        client.close()


def stamped_signals(cluster: FakeCluster, name: str) -> dict[str, float]:
    """When the trigger first saw each signal of pod ``name``, as stamped in its history annotation."""
    pod = cluster.pod(name)
    raw = ((pod or {}).get("metadata", {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    return dict(json.loads(raw)["first_seen"]) if raw else {}


@dataclass
class Launched:
    """A pod and the trigger watching it."""

    pod: dict[str, Any]
    trigger: PodStateTrigger
    identity: TryIdentity | None

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])


def trigger_for(
    pod: Mapping[str, Any],
    identity: TryIdentity | None,
    *,
    policy: Mapping[str, Any] | None = None,
    owned: bool = True,
    **kwargs: Any,
) -> PodStateTrigger:
    meta = pod["metadata"]
    return PodStateTrigger(
        kubernetes_conn_id=CONN_ID,
        namespace=meta.get("namespace", "default"),
        pod_name=meta["name"],
        pod_uid=meta["uid"],
        identity=identity.to_payload() if identity is not None else None,
        policy=dict(policy) if policy is not None else None,
        owned=owned,
        **kwargs,
    )


@dataclass
class Run:
    """A trigger running in the test's event loop, like the triggerer runs it."""

    trigger: PodStateTrigger
    events: list[PodEvent] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def _consume(self) -> None:
        try:
            async for event in self.trigger.run():
                self.events.append(PodEvent.from_payload(event.payload))
        finally:
            await self.trigger.cleanup()

    def start(self) -> Run:
        self.task = asyncio.get_running_loop().create_task(self._consume())
        return self

    async def finish(self, within: float) -> PodEvent:
        """Wait for the trigger to return; it must have fired exactly one event."""
        assert self.task is not None
        await asyncio.wait_for(asyncio.shield(self.task), within)
        assert len(self.events) == 1, f"expected exactly one event, got {self.events}"
        return self.events[0]

    async def stop(self) -> None:
        """Cancel the trigger (a triggerer going away) and let it clean up."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def run_trigger(trigger: PodStateTrigger, within: float) -> PodEvent:
    return await Run(trigger).start().finish(within)


async def cluster_reaches(cluster: FakeCluster, predicate: Any, within: float) -> None:
    """Wait, without blocking the test's loop, until the cluster's state satisfies ``predicate``."""
    reached = await asyncio.to_thread(cluster.wait_for, predicate, within)
    assert reached, f"the cluster did not reach the expected state within {within} s"


class TriggerLog:
    """The lines the trigger logged (Airflow's structlog writes them to stdout), from ``capsys``."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.text = ""

    def lines(self, containing: str) -> list[str]:
        """The lines so far that contain ``containing``."""
        self.text += self.capsys.readouterr().out
        return [row for row in self.text.splitlines() if containing in row]

    async def until(self, containing: str, count: int = 1, within: float = 30) -> list[str]:
        """Wait until ``count`` lines contain ``containing``; return them. (Output has no event to
        await: it is read again every 20 ms until the deadline.)"""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while len(found := self.lines(containing)) < count:
            assert loop.time() < deadline, f"{count} line(s) with {containing!r} not logged within {within} s"
            await asyncio.sleep(0.02)
        return found
