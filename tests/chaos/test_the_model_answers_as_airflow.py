"""Where the chaos judge's model of Airflow was checked against Airflow's own code, line by line.

The model's ``GET /task-instances/states`` (what the trigger's ``on_kill`` reads) filters rows as
the route's SQL does (``task_id IN (...)``, ``map_index = ?``) and spells the keys as the route
does: ``task_id``, or ``f"{task_id}_{map_index}"`` for a mapped task instance.
"""

from __future__ import annotations

from types import SimpleNamespace

from tests.chaos.airflow_model import TaskStates


def ti(task_id: str, map_index: int = -1, try_number: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        dag_id="d", run_id="r", task_id=task_id, map_index=map_index, try_number=try_number, state=None
    )


def test_a_mapped_task_is_not_found_under_a_task_whose_id_starts_like_it() -> None:
    states = TaskStates()
    states.set(ti("load"), "success")
    states.set(ti("load_data"), "deferred")
    states.set(ti("fan", 0), "deferred")
    states.set(ti("fan", 2, try_number=2), "failed")
    assert states.get_task_states("d", task_ids=["load"]) == {"r": {"load": "success"}}
    assert states.get_task_states("d", task_ids=["fan"]) == {"r": {"fan_0": "deferred", "fan_2": "failed"}}
    assert states.get_task_states("d", task_ids=["fan"], map_index=2) == {"r": {"fan_2": "failed"}}
    assert states.state_of(ti("fan", 2)) == ("failed", 2)
    assert states.state_of(ti("fan", 1)) is None
    states.delete_run("d", "r")
    assert states.get_task_states("d", task_ids=["load"]) == {}
