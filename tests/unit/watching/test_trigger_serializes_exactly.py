"""A deferred trigger is stored as (classpath, kwargs) and re-created from them in another process."""

from __future__ import annotations

import importlib

import pytest

from airflow_k8s_retry.classification import FailurePolicy, History, Outcome, Reason, Verdict
from airflow_k8s_retry.classification.model import Evidence
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.triggers import PodEvent, PodStateTrigger

IDENTITY = TryIdentity("etl", "load", "manual__2026-01-01", map_index=3, try_number=2)
POLICY = FailurePolicy(grace={"image.not_found": 5})
HISTORY = History(first_seen={"image.not_found": 1_800_000_000.0})


def make_trigger(**overrides: object) -> PodStateTrigger:
    kwargs: dict[str, object] = {
        "kubernetes_conn_id": "k8s_fake",
        "namespace": "jobs",
        "pod_name": IDENTITY.pod_name(),
        "pod_uid": "0b7c-uid",
        "identity": IDENTITY.to_payload(),
        "policy": POLICY.to_payload(),
        "history": HISTORY.to_payload(),
        "relaunches": 1,
        "execution_deadline": 1_800_000_600.5,
        "poll_interval": 7.0,
        "owned": True,
    }
    kwargs.update(overrides)
    return PodStateTrigger(**kwargs)  # type: ignore[arg-type]


def test_serialize_gives_the_exact_classpath_and_kwargs() -> None:
    classpath, kwargs = make_trigger().serialize()
    assert classpath == "airflow_k8s_retry.triggers.PodStateTrigger"
    assert kwargs == {
        "kubernetes_conn_id": "k8s_fake",
        "namespace": "jobs",
        "pod_name": IDENTITY.pod_name(),
        "pod_uid": "0b7c-uid",
        "identity": {
            "dag_id": "etl",
            "task_id": "load",
            "run_id": "manual__2026-01-01",
            "map_index": 3,
            "try_number": 2,
        },
        "policy": POLICY.to_payload(),
        "history": {"first_seen": {"image.not_found": 1_800_000_000.0}, "strongest": None},
        "relaunches": 1,
        "execution_deadline": 1_800_000_600.5,
        "poll_interval": 7.0,
        "owned": True,
    }


def test_a_trigger_recreated_from_its_kwargs_serializes_the_same() -> None:
    classpath, kwargs = make_trigger().serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    again = cls(**kwargs)
    assert again.serialize() == (classpath, kwargs)


def test_sensor_trigger_without_identity_or_policy_round_trips() -> None:
    trigger = make_trigger(identity=None, policy=None, history=None, owned=False, execution_deadline=None)
    classpath, kwargs = trigger.serialize()
    assert kwargs["identity"] is None and kwargs["policy"] is None and kwargs["owned"] is False
    assert PodStateTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ({"pod_uid": ""}, "pod_uid"),
        ({"namespace": ""}, "namespace"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"policy": {"grace": {"not.a.reason": 3}}}, "not.a.reason"),
    ],
)
def test_bad_kwargs_fail_at_defer_time_naming_the_field(override: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        make_trigger(**override)


def test_pod_event_payload_round_trips() -> None:
    verdict = Verdict(
        outcome=Outcome.RETRY,
        reason=Reason.IMAGE_NOT_FOUND,
        message="image registry.example/nope:1 not found",
        rule="image.not_found",
        evidence=(Evidence(Reason.IMAGE_NOT_FOUND, "event", "manifest unknown", "base", 1_800_000_001.0),),
        history=HISTORY,
    )
    event = PodEvent(namespace="jobs", pod_name="p", pod_uid="u", verdict=verdict, relaunches=2)
    payload = event.to_payload()
    assert payload["verdict"]["reason"] == "image.not_found"
    assert PodEvent.from_payload(payload) == event


def test_a_pod_event_names_the_connection_of_a_pod_its_task_owns() -> None:
    # The api-server's kill listener deletes the pod from the event while the task instance waits
    # for a worker (no trigger row is left then); an event stored before carried no connection.
    verdict = Verdict(outcome=Outcome.RETRY, reason=Reason.EXECUTION_TIMEOUT, message="m", rule="r")
    connection = {"kubernetes_conn_id": "k8s_fake", "cluster": {"cluster_context": "prod"}}
    event = PodEvent("jobs", "p", "u", verdict, 0, connection=connection)
    payload = event.to_payload()
    assert payload == {
        "namespace": "jobs",
        "pod_name": "p",
        "pod_uid": "u",
        "verdict": verdict.to_payload(),
        "relaunches": 0,
        "connection": connection,
    }
    assert PodEvent.from_payload(payload) == event
    older = {k: v for k, v in payload.items() if k != "connection"}
    assert PodEvent.from_payload(older) == PodEvent("jobs", "p", "u", verdict, 0)
    assert "connection" not in PodEvent("jobs", "p", "u", verdict, 0).to_payload()


def test_a_payload_that_is_not_a_pod_event_is_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="missing pod_uid"):
        PodEvent.from_payload({"namespace": "jobs", "pod_name": "p", "verdict": {}})


#: Two trigger rows as the release before the operators/, sensors/, triggers/ packages stored them
#: (its own ``serialize()`` of an operator's trigger and of a sensor's), kept literally.
STORED_BY_THE_PREVIOUS_RELEASE = {
    "operator": {
        "execution_deadline": 1800000600.5,
        "history": {"first_seen": {"image.not_found": 1800000000.0}, "strongest": None},
        "identity": {
            "dag_id": "etl",
            "map_index": 3,
            "run_id": "manual__2026-01-01",
            "task_id": "load",
            "try_number": 2,
        },
        "kubernetes_conn_id": "k8s_fake",
        "namespace": "jobs",
        "owned": True,
        "pod_name": "etl-load-40bdb1b0-t2",
        "pod_uid": "0b7c-uid",
        "policy": {
            "fail_on_exit_codes": [],
            "grace": {"image.not_found": 5.0},
            "outcomes": {},
            "relaunch_budget": 3,
            "running_recheck": 600.0,
            "scale_up_timeout": 900.0,
            "schedule_timeout": 600.0,
            "skip_on_exit_codes": [],
            "startup_timeout": 900.0,
        },
        "poll_interval": 7.0,
        "relaunches": 1,
    },
    "sensor": {
        "execution_deadline": None,
        "history": None,
        "identity": None,
        "kubernetes_conn_id": "k8s_fake",
        "namespace": "jobs",
        "owned": False,
        "pod_name": "",
        "pod_uid": "",
        "policy": None,
        "poll_interval": 10.0,
        "relaunches": 0,
        "target": {
            "deadline": None,
            "job_name": None,
            "label_selector": "app=export",
            "namespace": "jobs",
            "pod_name": None,
            "since": None,
        },
    },
}


@pytest.mark.parametrize("kind", sorted(STORED_BY_THE_PREVIOUS_RELEASE))
def test_a_trigger_row_of_the_previous_release_loads_in_the_triggerer(kind: str) -> None:
    """As the triggerer loads a row: its kwargs through the Trigger model's encryption, the class
    by its stored classpath, then the kwargs decoded; it serializes back to the same row."""
    from airflow.models.trigger import Trigger

    try:
        from airflow.serialization.decoders import smart_decode_trigger_kwargs
    except ImportError:  # Airflow 3.1
        from airflow.serialization.serialized_objects import smart_decode_trigger_kwargs

    classpath, stored = "airflow_k8s_retry.triggers.PodStateTrigger", STORED_BY_THE_PREVIOUS_RELEASE[kind]
    row = Trigger._decrypt_kwargs(Trigger.encrypt_kwargs(stored))
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    trigger = cls(**{key: smart_decode_trigger_kwargs(value) for key, value in row.items()})
    assert trigger.serialize() == (classpath, stored)
