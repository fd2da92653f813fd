"""The control plane's ``preempt`` disruption creates a pod that asks for all of the victim's node's
CPU; the disruptor deletes it (grace 0) once the victim is gone or being deleted, or after a bounded
wait, so that it never fills the node, and stops waiting when it is closed. Here against a stand-in
for the API (tests/cluster/test_disruptions.py does it on the real control plane)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry_testing.scenario import Scenario
from tools.controlplane import disruptions
from tools.controlplane.disruptions import PREEMPTOR_PREFIX, Disruptor

PREEMPTOR = f"{PREEMPTOR_PREFIX}abcde"


def _pod(uid: str, deleting: bool = False) -> SimpleNamespace:
    return SimpleNamespace(metadata=SimpleNamespace(uid=uid, deletion_timestamp="now" if deleting else None))


class FakeCore:
    """Answers reads of the victim in turn (the last one again and again) and records deletes."""

    def __init__(self, *reads: object, delete_errors: int = 0) -> None:
        self.reads = list(reads)
        self.read_count = 0
        self.delete_errors = delete_errors
        self.deleted: list[tuple[str, str, int]] = []
        self.created: list[dict[str, Any]] = []

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> object:
        self.read_count += 1
        answer = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> None:
        if self.delete_errors:
            self.delete_errors -= 1
            raise ApiException(status=500, reason="Internal Server Error")
        self.deleted.append((namespace, name, kwargs["grace_period_seconds"]))

    def read_node(self, name: str) -> object:
        return SimpleNamespace(status=SimpleNamespace(allocatable={"cpu": "64"}))

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> object:
        self.created.append(body)
        return SimpleNamespace(metadata=SimpleNamespace(name=PREEMPTOR))


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disruptions, "PREEMPTOR_POLL", 0.01)
    monkeypatch.setattr(disruptions, "PREEMPTOR_WAIT", 2.0)


def _disruptor(core: FakeCore, tmp_path: Path) -> Disruptor:
    disruptor = Disruptor(ApiClient(), tmp_path, Scenario.from_dict({}))
    disruptor.core = core  # type: ignore[assignment]
    return disruptor


@pytest.mark.parametrize(
    "gone",
    [
        ApiException(status=404, reason="Not Found"),
        _pod("uid-of-the-next-pod-of-that-name"),
        _pod("uid-victim", deleting=True),
    ],
    ids=["read-404s", "another-uid", "being-deleted"],
)
def test_the_preemptor_is_deleted_once_the_victim_is_gone(tmp_path: Path, gone: object) -> None:
    core = FakeCore(_pod("uid-victim"), _pod("uid-victim"), gone)
    _disruptor(core, tmp_path)._remove_preemptor("default", PREEMPTOR, "victim", "uid-victim")
    assert core.read_count == 3
    assert core.deleted == [("default", PREEMPTOR, 0)]


def test_an_api_server_that_does_not_answer_is_waited_out(tmp_path: Path) -> None:
    core = FakeCore(
        ConnectionRefusedError(), ApiException(status=503), ApiException(status=404), delete_errors=2
    )
    _disruptor(core, tmp_path)._remove_preemptor("default", PREEMPTOR, "victim", "uid-victim")
    assert core.read_count == 3
    assert core.deleted == [("default", PREEMPTOR, 0)]


def test_a_victim_that_stays_does_not_keep_the_preemptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(disruptions, "PREEMPTOR_WAIT", 0.1)
    core = FakeCore(_pod("uid-victim"))
    caplog.set_level("INFO", logger=disruptions.__name__)
    _disruptor(core, tmp_path)._remove_preemptor("default", PREEMPTOR, "victim", "uid-victim")
    assert core.deleted == [("default", PREEMPTOR, 0)]
    assert "default/victim is still there after" in caplog.text


def test_closing_stops_the_wait_without_deleting(tmp_path: Path) -> None:
    core = FakeCore(_pod("uid-victim"))
    disruptor = _disruptor(core, tmp_path)
    thread = threading.Thread(
        target=disruptor._remove_preemptor, args=("default", PREEMPTOR, "victim", "uid-victim")
    )
    thread.start()
    time.sleep(0.05)
    started = time.monotonic()
    disruptor.close()
    thread.join(1.0)
    assert not thread.is_alive()
    assert time.monotonic() - started < 1.0
    assert core.deleted == []


def test_preempt_starts_the_removal(tmp_path: Path) -> None:
    victim = SimpleNamespace(
        metadata=SimpleNamespace(uid="uid-victim", deletion_timestamp=None),
        spec=SimpleNamespace(
            node_name="kwok-node-1",
            containers=[SimpleNamespace(resources=SimpleNamespace(requests={"cpu": "100m"}))],
        ),
    )
    core = FakeCore(victim, victim, ApiException(status=404))
    disruptor = _disruptor(core, tmp_path)
    disruptor.scheduling = SimpleNamespace(create_priority_class=lambda body: None)  # type: ignore[assignment]
    disruptor._preempt("default", "victim", "uid-victim")
    assert core.created[0]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "64"}}
    deadline = time.monotonic() + 5
    while not core.deleted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert core.deleted == [("default", PREEMPTOR, 0)]
