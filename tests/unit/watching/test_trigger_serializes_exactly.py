"""A deferred trigger is stored as (classpath, kwargs) and re-created from them in another process."""

from __future__ import annotations

import importlib

import pytest

from airflow_k8s_retry.classification import FailurePolicy, History, Outcome, Reason, Verdict
from airflow_k8s_retry.classification.model import Evidence
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.triggers.pod import PodEvent, PodStateTrigger
from airflow_k8s_retry.triggers.target import PodTargetTrigger, Target

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
        "logging_interval": None,
        "base_container_name": "base",
        "cluster": None,
    }


def test_the_cluster_and_the_log_copy_are_serialized_as_given() -> None:
    _, kwargs = make_trigger(
        logging_interval=30, base_container_name="main", cluster={"cluster_context": "prod"}
    ).serialize()
    assert (kwargs["logging_interval"], kwargs["base_container_name"], kwargs["cluster"]) == (
        30.0,
        "main",
        {"cluster_context": "prod"},
    )


def test_the_sensors_trigger_serializes_exactly() -> None:
    target = Target("jobs", label_selector="app=export", deadline=1_800_000_900.0, since=1_800_000_000.0)
    trigger = PodTargetTrigger(
        kubernetes_conn_id="k8s_fake",
        target=target.to_payload(),
        policy=POLICY.to_payload(),
        execution_deadline=None,
        poll_interval=7,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_k8s_retry.triggers.PodTargetTrigger"
    assert kwargs == {
        "kubernetes_conn_id": "k8s_fake",
        "target": {
            "namespace": "jobs",
            "pod_name": None,
            "label_selector": "app=export",
            "job_name": None,
            "deadline": 1_800_000_900.0,
            "since": 1_800_000_000.0,
        },
        "policy": POLICY.to_payload(),
        "execution_deadline": None,
        "poll_interval": 7.0,
        "cluster": None,
    }
    module, _, name = classpath.rpartition(".")
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    ("override", "complaint"),
    [({"target": {"namespace": "jobs"}}, "exactly one of"), ({"poll_interval": 0}, "poll_interval")],
)
def test_the_sensors_trigger_refuses_bad_kwargs_naming_them(
    override: dict[str, object], complaint: str
) -> None:
    kwargs: dict[str, object] = {
        "kubernetes_conn_id": None,
        "target": Target("jobs", pod_name="p").to_payload(),
        "policy": None,
    }
    with pytest.raises(ValueError, match=complaint):
        PodTargetTrigger(**{**kwargs, **override})  # type: ignore[arg-type]


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
    # for a worker (no trigger row is left then); a pod the task does not own has no connection.
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
    assert "connection" not in PodEvent("jobs", "p", "u", verdict, 0).to_payload()


def test_a_payload_that_is_not_a_pod_event_is_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="missing pod_uid"):
        PodEvent.from_payload({"namespace": "jobs", "pod_name": "p", "verdict": {}})


@pytest.mark.parametrize("kind", ["operator", "sensor"])
def test_a_trigger_row_loads_in_the_triggerer(kind: str) -> None:
    """As the triggerer loads a row: its kwargs through the Trigger model's encryption, the class
    by its stored classpath, then the kwargs decoded; it serializes back to the same row."""
    from airflow.models.trigger import Trigger

    try:
        from airflow.serialization.decoders import smart_decode_trigger_kwargs
    except ImportError:  # Airflow 3.1
        from airflow.serialization.serialized_objects import smart_decode_trigger_kwargs

    if kind == "operator":
        original: PodStateTrigger | PodTargetTrigger = make_trigger(cluster={"config_file": "/etc/kube/b"})
    else:
        original = PodTargetTrigger(
            kubernetes_conn_id="k8s_fake", target=Target("jobs", job_name="etl").to_payload(), policy=None
        )
    classpath, stored = original.serialize()
    row = Trigger._decrypt_kwargs(Trigger.encrypt_kwargs(stored))
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    trigger = cls(**{key: smart_decode_trigger_kwargs(value) for key, value in row.items()})
    assert trigger.serialize() == (classpath, stored)
