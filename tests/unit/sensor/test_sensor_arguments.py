"""The sensor is an Airflow sensor: BaseSensorOperator's arguments keep their meaning, and those
that mean nothing for a sensor that never pokes are refused when the DAG is parsed, with the reason."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk import BaseSensorOperator

from airflow_k8s_retry.compat import AirflowException
from airflow_k8s_retry.sensors import PodCompletionSensor


def sensor(**kwargs: object) -> PodCompletionSensor:
    kwargs.setdefault("pod_name", "report-1")
    return PodCompletionSensor(task_id="wait", **kwargs)  # type: ignore[arg-type]


def test_it_is_a_base_sensor_with_the_sensor_colour():
    s = sensor()
    assert isinstance(s, BaseSensorOperator)
    assert s._is_sensor is True
    assert PodCompletionSensor.ui_color == BaseSensorOperator.ui_color


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pod_name": None},
        {"pod_name": "a", "label_selector": "app=a"},
        {"pod_name": None, "label_selector": "app=a", "job_name": "etl"},
    ],
)
def test_exactly_one_of_name_selector_and_job(kwargs):
    with pytest.raises(ValueError, match="exactly one of pod_name, label_selector and job_name"):
        sensor(**kwargs)


def test_timeout_defaults_to_airflows_sensor_default_and_takes_a_timedelta():
    assert sensor().timeout == 7 * 24 * 3600  # [sensors] default_timeout
    assert sensor(timeout=timedelta(minutes=5)).timeout == 300
    assert sensor(timeout=30).timeout == 30


def test_soft_fail_and_never_fail_are_mutually_exclusive_as_in_airflow():
    with pytest.raises(ValueError, match="mutually exclusive"):
        sensor(soft_fail=True, never_fail=True)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"exponential_backoff": True}, "no interval to back off"),
        ({"max_wait": 60}, "no interval between pokes to cap"),
        ({"silent_fail": True}, "use soft_fail to skip on failure"),
        ({"deferrable": False}, "always defers"),
    ],
)
def test_arguments_without_meaning_here_are_refused_with_the_reason(kwargs, reason):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"does not take {name}=.*{reason}"):
        sensor(**kwargs)


def test_their_defaults_are_accepted():
    sensor(exponential_backoff=False, max_wait=None, silent_fail=False, deferrable=True)


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_mode_is_accepted_and_the_mode_airflow_validates(mode):
    assert sensor(mode=mode).mode == mode
    # Airflow 3.2+ raises ValueError here, 3.1 its own AirflowException: the check is Airflow's.
    with pytest.raises((ValueError, AirflowException), match="The mode must be one of"):
        sensor(mode="sometimes")


def test_poke_interval_is_the_polling_interval_when_watching_is_forbidden():
    assert sensor(poke_interval=timedelta(seconds=30)).poke_interval == 30
    with pytest.raises(ValueError, match="poke_interval must be a positive number"):
        sensor(poke_interval=0)


def test_the_interval_is_airflows_poke_interval():
    assert sensor(poke_interval=2).poke_interval == 2
    with pytest.raises(TypeError, match="poll_interval"):
        sensor(poll_interval=2)


def test_templated_fields():
    assert set(PodCompletionSensor.template_fields) == {
        "pod_name",
        "label_selector",
        "job_name",
        "namespace",
        "kubernetes_conn_id",
    }
