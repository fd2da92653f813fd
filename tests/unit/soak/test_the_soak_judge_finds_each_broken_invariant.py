"""The soak's judge (tests/soak/judge.py) finds each invariant broken in hand-made evidence, and
nothing in a clean soak: audit events shaped as kube-apiserver writes them, tries as Airflow's
metadata database holds them."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.kube.naming import RELAUNCH_LABEL, VERDICT_ANNOTATION, encode_stamp
from tests.soak.judge import Try, judge, pod_lives
from tests.soak.plan import Plan, TaskPlan, draw

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
_ids = itertools.count()


def _event(
    verb: str, seconds: float, name: str, pod: dict[str, Any] | None = None, sub: str = ""
) -> dict[str, Any]:
    ref = {"resource": "pods", "namespace": "default", "name": name}
    if sub:
        ref["subresource"] = sub
    event: dict[str, Any] = {
        "auditID": str(next(_ids)),
        "verb": verb,
        "objectRef": ref,
        "responseStatus": {"code": 201 if verb == "create" else 200},
        "requestReceivedTimestamp": (T0 + datetime.timedelta(seconds=seconds)).isoformat(),
    }
    if pod is not None:
        event["responseObject"] = pod
    return event


def _pod(
    name: str, task: str, try_number: int = 1, relaunch: int = 0, phase: str = "Pending", **meta: Any
) -> dict[str, Any]:
    labels = {"dag_id": "soak", "task_id": task, "try_number": str(try_number), RELAUNCH_LABEL: str(relaunch)}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels, **meta},
        "status": {"phase": phase},
    }


def _stamped(pod: dict[str, Any], reason: str, outcome: Outcome) -> dict[str, Any]:
    verdict = Verdict(outcome=outcome, reason=Reason(reason), message="m", rule="r")
    pod = {**pod, "metadata": {**pod["metadata"], "annotations": {}}}
    pod["metadata"]["annotations"][VERDICT_ANNOTATION] = encode_stamp(verdict, kept=False)
    return pod


def _plan(*tasks: TaskPlan) -> Plan:
    return Plan(7, list(tasks), [])


def _task(task_id: str = "t000", fate: str = "exit_code", retries: int = 1) -> TaskPlan:
    return TaskPlan(task_id, fate, f"soak.example.com/{task_id}:1", retries)


def _try(number: int, state: str, task_id: str = "t000", ran: float = 30) -> Try:
    start = T0 + datetime.timedelta(seconds=100 * number)
    return Try(task_id, number, state, start, start + datetime.timedelta(seconds=ran))


def _clean_events() -> list[dict[str, Any]]:
    """Try 1's pod exits 3, is stamped and deleted; then try 2's pod, the same."""
    return [
        _event("create", 0, "a-t1", _pod("a-t1", "t000")),
        _event("patch", 5, "a-t1", _pod("a-t1", "t000", phase="Failed"), sub="status"),
        _event(
            "patch",
            6,
            "a-t1",
            _stamped(_pod("a-t1", "t000", phase="Failed"), "container.exit_code", Outcome.RETRY),
        ),
        _event("delete", 7, "a-t1", _pod("a-t1", "t000", phase="Failed", deletionTimestamp="x")),
        _event("create", 10, "a-t2", _pod("a-t2", "t000", try_number=2)),
        _event("delete", 20, "a-t2", _pod("a-t2", "t000", try_number=2, deletionTimestamp="x")),
    ]


def _violations(events: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    plan = kwargs.pop("plan", _plan(_task()))
    tries = kwargs.pop("tries", [_try(1, "failed"), _try(2, "failed")])
    left = kwargs.pop("left", [])
    killed = kwargs.pop("killed", set())
    return sorted(v.invariant for v in judge(plan, pod_lives(events, "soak"), tries, left, killed))


def test_a_clean_soak_breaks_nothing() -> None:
    assert _violations(_clean_events()) == []


def test_a_second_pod_for_one_try_is_a_duplicate() -> None:
    events = [*_clean_events(), _event("create", 30, "a-t2", _pod("a-t2", "t000", try_number=2) | {})]
    events[-1]["responseObject"]["metadata"]["uid"] = "uid-again"
    assert _violations(events) == ["duplicate_pod"]


def test_a_pod_created_while_the_previous_one_runs_is_two_live_pods() -> None:
    events = _clean_events()
    del events[1:4]  # try 1's pod neither ends nor is deleted before try 2's is created
    events.append(_event("delete", 40, "a-t1", _pod("a-t1", "t000", deletionTimestamp="x")))
    assert _violations(events) == ["two_live_pods"]


def test_an_eviction_ends_a_pods_life() -> None:
    events = [
        _event("create", 0, "a-t1", _pod("a-t1", "t000")),
        _event("create", 5, "a-t1", sub="eviction"),
        _event("create", 6, "a-t1-r1", _pod("a-t1-r1", "t000", relaunch=1)),
    ]
    assert _violations(events, tries=[_try(1, "success")], plan=_plan(_task(fate="disruption_evict"))) == []


def test_a_pod_left_not_being_deleted_is_leaked_and_one_being_deleted_is_not() -> None:
    left = [_pod("a-t2", "t000", try_number=2), _pod("b-t1", "t000", deletionTimestamp="x")]
    assert _violations(_clean_events(), left=left) == ["leaked_pod"]


def test_two_different_verdicts_on_one_pod() -> None:
    events = _clean_events()
    other = _stamped(_pod("a-t1", "t000", phase="Failed"), "node.lost", Outcome.RELAUNCH)
    events.insert(3, _event("patch", 6.5, "a-t1", other))
    assert _violations(events) == ["two_verdicts"]


@pytest.mark.parametrize(
    ("tries", "killed", "fate", "expected"),
    [
        ([_try(1, "failed")], set(), "exit_code", ["retries_skipped"]),
        ([_try(1, "failed")], {"t000"}, "user_kill", []),
        ([_try(1, "failed")], set(), "pull_invalid_name", []),
        (
            [_try(1, "failed"), _try(2, "failed"), _try(3, "failed")],
            set(),
            "exit_code",
            ["retries_overspent"],
        ),
        ([_try(1, "failed"), _try(2, "deferred")], set(), "exit_code", ["not_terminal"]),
        ([_try(1, "failed"), _try(2, "success")], set(), "oom", ["wrong_end"]),
        ([_try(1, "failed"), _try(2, "success")], set(), "succeed", []),
        # Airflow took 1,100 s to resume try 2 (its queue) while the pod had ended in time.
        ([_try(1, "failed"), _try(2, "failed", ran=1100)], set(), "exit_code", []),
    ],
)
def test_what_the_tries_show(tries: list[Try], killed: set[str], fate: str, expected: list[str]) -> None:
    assert _violations(_clean_events(), tries=tries, killed=killed, plan=_plan(_task(fate=fate))) == expected


def test_a_seed_draws_one_plan_and_its_scenario_hits_only_that_tasks_pods() -> None:
    plan = draw(11, 60)
    assert plan.to_json() == draw(11, 60).to_json()
    assert plan.to_json() != draw(12, 60).to_json()
    scenario = plan.scenario()
    assert set(scenario["images"]) == {t.image for t in plan.tasks}
    prefixes = [d["pod_name_prefix"] for d in scenario["disruptions"]]
    assert all(not a.startswith(b) for a, b in itertools.permutations(prefixes, 2))


def test_a_pod_running_past_its_trys_deadline() -> None:
    # Try 2 starts at +200 s; its pod is deleted 1,100 s later, past 900 s and the margin.
    events = [
        *_clean_events()[:4],
        _event("create", 201, "a-t2", _pod("a-t2", "t000", try_number=2)),
        _event("delete", 1300, "a-t2", _pod("a-t2", "t000", try_number=2, deletionTimestamp="x")),
    ]
    assert _violations(events) == ["past_deadline"]
    events[-1] = _event("delete", 1200, "a-t2", _pod("a-t2", "t000", try_number=2, deletionTimestamp="x"))
    assert _violations(events) == []  # 1,000 s: inside the margin
