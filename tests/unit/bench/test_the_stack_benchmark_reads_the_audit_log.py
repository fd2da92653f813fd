"""The whole-stack benchmark's arithmetic (``bench/stack.py``) on hand-made audit events: which
write shows a pod failed, the turnaround to the next try's pod, requests per namespace, and the
targets it says met or missed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.stack import PLANS, plan, ramp_over, resized
from bench.stack_measure import (
    PULL_GRACE,
    PodSeen,
    logged_worker_seconds,
    read_audit,
    session_usage,
    statement_groups,
    turnaround_stages,
    turnarounds,
)
from bench.stack_report import report, targets


def pod(
    uid: str, try_number: int, status: dict[str, Any] | None = None, task: str = "exit_0000"
) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "uid": uid,
            "name": f"{task.replace('_', '-')}-t{try_number}",
            "namespace": "failure-rpo",
            "labels": {"dag_id": "stack_rpo_failure", "task_id": task, "try_number": str(try_number)},
        },
        "status": status or {"phase": "Pending"},
    }


def event(
    n: int, t: str, verb: str, body: dict[str, Any] | None, sub: str | None = None, name: str | None = None
) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": "pods", "namespace": "failure-rpo", **({"name": name} if name else {})}
    if sub:
        ref["subresource"] = sub
    return {
        "auditID": str(n),
        "requestReceivedTimestamp": f"2026-12-05T10:00:{t}Z",
        "verb": verb,
        "objectRef": ref,
        "user": {"username": "kubernetes-admin"},
        "responseStatus": {"code": 201 if verb == "create" else 200},
        **({"responseObject": body} if body is not None else {}),
    }


RUNNING = {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}
EXITED = {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]}


def test_the_turnaround_runs_from_the_write_that_shows_the_failure_to_the_next_create(tmp_path: Path):
    audit = tmp_path / "audit.log"
    events = [
        event(1, "00.000", "create", pod("a", 1)),
        event(2, "01.000", "patch", pod("a", 1, RUNNING), "status"),
        event(3, "11.000", "patch", pod("a", 1, EXITED), "status"),
        event(4, "11.500", "patch", pod("a", 1, EXITED), "status"),  # a later write: not the first
        event(5, "12.000", "delete", pod("a", 1, EXITED)),
        event(6, "14.250", "create", pod("b", 2)),
        event(6, "14.250", "create", pod("b", 2)),  # the same request's second stage: once
        event(7, "15.000", "watch", None),
    ]
    audit.write_text("".join(json.dumps(e) + "\n" for e in events))
    seen = read_audit(audit)
    assert turnarounds(seen.pods, "stack_rpo_failure") == [3.25]
    assert seen.count("failure-rpo") == 7
    assert seen.count("failure-rpo", start=seen.requests["failure-rpo"][1]) == 6
    assert turnarounds(seen.pods, "stack_kpo_failure") == []


def test_an_eviction_shows_the_failure_and_is_not_counted_as_airflows_request(tmp_path: Path):
    audit = tmp_path / "audit.log"
    running = {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}
    events = [
        event(1, "00.000", "create", pod("a", 1, task="evict_0000")),
        event(2, "01.000", "patch", pod("a", 1, running, task="evict_0000"), "status"),
        event(3, "05.000", "create", None, "eviction", name="evict-0000-t1"),
        event(4, "09.500", "create", pod("b", 1, task="evict_0000")),  # our relaunch, in the same try
    ]
    audit.write_text("".join(json.dumps(e) + "\n" for e in events))
    seen = read_audit(audit)
    assert turnarounds(seen.pods, "stack_rpo_failure", "evict") == [4.5]
    assert turnarounds(seen.pods, "stack_rpo_failure", "exit") == []
    assert seen.count("failure-rpo") == 3


def test_a_failed_pulls_turnaround_counts_from_the_end_of_each_operators_grace(tmp_path: Path):
    audit = tmp_path / "audit.log"
    pulling = {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}
    events = [
        event(1, "00.000", "create", pod("a", 1, task="pull_0000")),
        event(2, "03.000", "patch", pod("a", 1, pulling, task="pull_0000"), "status"),
    ]
    audit.write_text("".join(json.dumps(e) + "\n" for e in events))
    later = {
        "kind": "Pod",
        "metadata": {**pod("b", 2, task="pull_0000")["metadata"]},
        "status": {"phase": "Pending"},
    }
    text = audit.read_text() + json.dumps(
        {**event(3, "00.000", "create", later), "requestReceivedTimestamp": "2026-12-05T10:02:05Z"}
    )
    audit.write_text(text + "\n")
    pods = read_audit(audit).pods
    assert turnarounds(pods, "stack_rpo_failure", "pull") == [122.0]
    assert turnarounds(pods, "stack_rpo_failure", "pull", pull_grace=PULL_GRACE["rpo"]) == [32.0]
    assert turnarounds(pods, "stack_rpo_failure", "pull", pull_grace=PULL_GRACE["kpo_deferrable"]) == [122.0]


def test_worker_seconds_are_the_stretches_of_a_tasks_log(tmp_path: Path):
    folder = tmp_path / "dag_id=d" / "run_id=r" / "task_id=t"
    folder.mkdir(parents=True)
    lines = [
        ("10:00:00.000", "::group::Pre Execute"),
        ("10:00:02.500", "Pausing task as DEFERRED."),
        ("10:00:12.000", "::group::Pre Execute"),
        ("10:00:13.000", "Task failed with exception"),
    ]
    log = "".join(json.dumps({"timestamp": f"2026-12-05T{t}Z", "event": e}) + "\n" for t, e in lines)
    (folder / "attempt=1.log").write_text(log + "not json\n")
    (folder / "attempt=1.log.trigger.3.log").write_text(log)  # the trigger's log is not the worker's
    assert logged_worker_seconds(tmp_path, "d") == 3.5


def test_a_sessions_usage_sums_its_processes_with_their_reaped_children(tmp_path: Path):
    import os

    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")

    def stat(pid: int, session: int, times: tuple[int, int, int, int], rss_pages: int) -> None:
        (tmp_path / str(pid)).mkdir()
        rest = ["S", "1", str(session), str(session)] + ["0"] * 7 + [str(x) for x in times]
        rest += ["0"] * 6 + [str(rss_pages)] + ["0"] * 10
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (a name) with) {' '.join(rest)}\n")

    stat(100, 100, (ticks, ticks, 2 * ticks, 0), 2**20 // page)
    stat(101, 100, (ticks, 0, 0, 0), 2**20 // page)
    stat(200, 200, (50 * ticks, 0, 0, 0), 2**20 // page)
    (tmp_path / "self").mkdir()
    usage = session_usage(100, tmp_path)
    assert (usage.cpu, usage.rss) == (5.0, 2.0)


def test_the_plan_puts_each_operator_and_kind_of_try_in_namespaces_of_its_own():
    dags = plan(PLANS["quick"])["dags"]
    owner: dict[str, tuple[str, str]] = {}
    for d in dags:
        for t in d["tasks"]:
            mine = (
                d["operator"],
                "scale" if d["kind"] == "scale" else d["kind"] + t["task_id"].rsplit("_", 1)[0],
            )
            assert owner.setdefault(t["namespace"], mine) == mine, t
    assert len({d["dag_id"] for d in dags}) == len(dags)
    scale = [d for d in dags if d["kind"] == "scale" and d["operator"] == "rpo"]
    assert sum(len(d["tasks"]) for d in scale) == max(PLANS["quick"].scale)
    seed = [d for d in dags if d["kind"] == "seed"]
    assert [t["image"] for d in seed for t in d["tasks"]] == ["notavalidimage", "notavalidimage"]
    assert all(t["retries"] == 3 for d in seed for t in d["tasks"])


def test_each_target_says_met_or_missed():
    def row(op: str, kind: str, p99: float, requests: float, statements: float) -> dict[str, Any]:
        return {
            "operator": op,
            "phase": "failure" if kind != "ok" else "success",
            "kind": kind,
            "turnaround_p99": p99,
            "requests_per_try": requests,
            "statements_per_try": statements,
        }

    result = {
        "rows": [
            row("rpo", "exit", 1.0, 9.0, 100.0),
            row("kpo_deferrable", "exit", 10.0, 30.0, 120.0),
            row("rpo", "ok", 0.0, 5.0, 90.0),
            row("kpo_deferrable", "ok", 0.0, 20.0, 80.0),
        ],
        "scale": [
            {"operator": "rpo", "tasks": 10, "requests_per_second": 0.1, "cores": {"triggerer": 0.01}},
            {"operator": "rpo", "tasks": 1000, "requests_per_second": 1.0, "cores": {"triggerer": 0.02}},
            {
                "operator": "kpo_deferrable",
                "tasks": 1000,
                "requests_per_second": 500.0,
                "cores": {"triggerer": 0.3},
            },
        ],
    }
    assert [(t, m) for t, _, m in targets(result)] == [
        ("retry turnaround p99 (exit 1) at most 1/5 of KPO deferrable's", "met"),
        ("database statements per try (failure phase) no more than KPO deferrable's", "met"),
        ("database statements per try (success phase) no more than KPO deferrable's", "missed"),
        ("one failed try (exit 1) at most 8 API requests in all", "missed"),
        ("at 1000 deferred tasks (RetryingPodOperator) at least 100x fewer API requests per second", "met"),
        ("at 1000 deferred tasks (RetryingPodOperator) at least 20x less triggerer CPU", "missed"),
    ]


def test_the_paced_plan_puts_its_failing_tasks_in_one_pool_a_retry_first():
    sizes = PLANS["paced"]
    dags = plan(sizes)["dags"]
    failing = [d for d in dags if d["kind"] == "failure"]
    assert sorted(d["operator"] for d in failing) == ["floor", "kpo", "kpo_deferrable", "rpo"]
    for d in failing:
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for t in d["tasks"]:
            by_kind.setdefault(t["task_id"].rsplit("_", 1)[0], []).append(t)
        expected = {"timer": 34} if d["operator"] == "floor" else {"exit": 17, "oom": 17}
        assert {k: len(v) for k, v in by_kind.items()} == expected
        # 51 turnarounds of exit 1 and of OOM: three retries of each task (the floor's alike).
        assert {t["retries"] for t in d["tasks"]} == {3}
        assert {t["retry_delay"] for t in d["tasks"]} == {0}
        assert {t["pool"] for t in d["tasks"]} == {"stack_paced"}
        # The scheduler starts the heaviest first: the kinds in turn, each task lighter than the
        # one before, so a retry outweighs every task not started yet.
        assert [t["priority_weight"] for t in d["tasks"]] == list(range(34, 0, -1))
        first = ["timer_0000", "timer_0001"] if d["operator"] == "floor" else ["exit_0000", "oom_0000"]
        assert [t["task_id"] for t in d["tasks"][:2]] == first
    # The floor defers for as long as a pod runs.
    assert {t["seconds"] for d in failing if d["operator"] == "floor" for t in d["tasks"]} == {10}
    # Evictions are a phase of their own: a try the cncf operator fails, ours relaunches.
    evicting = [d for d in dags if d["kind"] == "evict"]
    assert sorted(d["operator"] for d in evicting) == ["kpo", "kpo_deferrable", "rpo"]
    for d in evicting:
        assert [t["task_id"] for t in d["tasks"][:2]] == ["evict_0000", "evict_0001"]
        assert {t["retries"] for t in d["tasks"]} == {1}
        assert {t["pool"] for t in d["tasks"]} == {"stack_paced"}
        assert [t["priority_weight"] for t in d["tasks"]] == list(range(50, 0, -1))
    # No empty DAG (no pull, success or seed phase), and the scale phase only for its operators.
    assert all(d["tasks"] for d in dags)
    assert {d["kind"] for d in dags} == {"warmup", "failure", "evict", "seed", "ratelimit", "scale"}
    assert {d["operator"] for d in dags if d["kind"] == "scale"} == {"rpo_quiet", "kpo_deferrable"}
    assert all("pool" not in t for d in dags if d["kind"] not in ("failure", "evict") for t in d["tasks"])


def test_a_plan_runs_smaller_with_sizes_set_anew():
    sizes = resized(PLANS["paced"], ["exits=2", "ooms=1", "scale=20,40", "scale_window=20.5"])
    assert (sizes.exits, sizes.ooms, sizes.scale, sizes.scale_window) == (2, 1, (20, 40), 20.5)
    assert sizes.lanes == PLANS["paced"].lanes
    assert resized(PLANS["quick"], ["kinds=failure,evict"]).kinds == ("failure", "evict")
    for wrong, says in (("exit=2", "NAME one of exits,"), ("exits=two", "'two' is not of type int")):
        with pytest.raises(SystemExit, match=says):
            resized(PLANS["paced"], [wrong])


def test_statements_are_grouped_by_role_verb_and_first_table():
    rows = [
        (
            "api_server",
            3,
            "SELECT task_instance.id, task_instance.state \nFROM task_instance JOIN dag_run ON true",
        ),
        ("scheduler", 2, "SELECT count(*) FROM (SELECT xcom.key FROM xcom) AS anon_1"),
        ("api_server", 4, "INSERT INTO xcom (dag_run_id, key) VALUES ($1, $2)"),
        ("triggerer", 1, 'UPDATE "trigger" SET triggerer_id=$1'),
        ("api_server", 1, "DELETE FROM xcom WHERE xcom.key = $1"),
        (
            "scheduler",
            1,
            "WITH ranked AS (SELECT id FROM task_instance) UPDATE task_instance SET state=$1 FROM ranked",
        ),
        ("triggerer", 4, "BEGIN"),
        ("scheduler", 3, "BEGIN"),
        ("triggerer", 5, "select $1"),
    ]
    assert statement_groups(rows) == {
        "triggerer: select": 5,
        "api_server: insert xcom": 4,
        "triggerer: begin": 4,
        "api_server: select task_instance": 3,
        "scheduler: begin": 3,
        "scheduler: select xcom": 2,
        "api_server: delete xcom": 1,
        "scheduler: update task_instance": 1,
        "triggerer: update trigger": 1,
    }


def test_the_report_shows_the_floor_beside_ours_and_kpos_per_failed_try():
    def row(op: str, kind: str, statements: float, cpu: float, groups: dict[str, float]) -> dict[str, Any]:
        return {
            "phase": "failure",
            "operator": op,
            "kind": kind,
            "tasks": 2,
            "tries": 8,
            "pods": 0 if op == "floor" else 8,
            "turnarounds": [],
            "turnaround_p50": None,
            "turnaround_p99": None,
            "requests_per_try": 0.0 if op == "floor" else 6.0,
            "requests_per_task": 0.0 if op == "floor" else 24.0,
            "statements_per_try": statements,
            "statement_groups_per_try": groups,
            "worker_cpu_per_try": cpu,
            "worker_seconds_per_try": 2.0,
            "seconds": 60.0,
            "load_mean": 1.0,
            "load_max": 2.0,
            "apiserver_cpu": 1.0,
            "etcd_cpu": 0.5,
        }

    result = {
        "cores": 2,
        "idle_statements_per_second": 120.0,
        "sizes": {"lanes": 8},
        "rows": [
            row("rpo", "exit", 300.0, 1.5, {"scheduler: begin": 100.0, "api_server: insert xcom": 3.0}),
            row(
                "kpo_deferrable",
                "exit",
                310.0,
                1.6,
                {"scheduler: begin": 104.0, "api_server: insert xcom": 2.0},
            ),
            row("floor", "timer", 220.0, 0.4, {"scheduler: begin": 80.0, "triggerer: select trigger": 5.0}),
        ],
        "scale": [],
        "seed": [],
    }
    text = report(result, "paced")
    assert "Smaller than the plan" not in text
    assert "| failure | Airflow's floor | timer, then fails | 2 | 8 | 0 |" in text
    assert (
        "| statements per failed try, by role | RetryingPodOperator | KPO deferrable | Airflow's floor |"
        in text
    )
    assert "| schedulers | 100.00 | 104.00 | 80.00 |" in text
    assert (
        "| triggerers (their loop; a trigger's execution API calls, served in process) | 0.00 | 0.00 | 5.00 |"
        in text
    )
    assert "| all | 300.00 | 310.00 | 220.00 |" in text
    assert "| `api_server: insert xcom` | 3.00 | 2.00 | 0.00 |" in text
    assert [(t, m) for t, _, m in targets(result)] == [
        ("database statements per try (failure phase) no more than KPO deferrable's", "met"),
        ("worker CPU (s) per try (failure phase) no more than KPO deferrable's", "met"),
        ("one failed try (exit 1) at most 8 API requests in all", "met"),
    ]


def write_log(folder: Path, name: str, lines: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({"timestamp": f"2026-12-05T10:00:{t}Z", "event": e}) + "\n" for t, e in lines)
    (folder / name).write_text(text)


def seconds(stamp: str) -> float:
    from bench.stack_measure import stamp_seconds

    return stamp_seconds(f"2026-12-05T10:00:{stamp}Z")


def test_each_turnaround_splits_into_its_stages_from_the_task_logs(tmp_path: Path):
    task = tmp_path / "dag_id=stack_rpo_failure" / "run_id=r" / "task_id=exit_0000"
    write_log(
        task,
        "attempt=1.log",
        [
            ("00.000", "::group::Pre Execute"),
            ("01.000", "Pausing task as DEFERRED."),
            ("13.000", "::group::Pre Execute"),
            ("14.500", "Task failed with exception"),
        ],
    )
    write_log(
        task, "attempt=1.log.trigger.4.log", [("10.000", "starting"), ("11.250", "Trigger fired event")]
    )
    write_log(task, "attempt=2.log", [("15.000", "::group::Pre Execute"), ("16.000", "Pausing")])
    # Waiting in its worker (no trigger): the failure is found by the worker running at it.
    kpo = tmp_path / "dag_id=stack_kpo_failure" / "run_id=r" / "task_id=exit_0000"
    write_log(kpo, "attempt=1.log", [("00.000", "::group::Pre Execute"), ("11.500", "Task failed")])
    write_log(kpo, "attempt=2.log", [("13.000", "::group::Pre Execute")])
    # Relaunched in the same try, its first trigger's log replaced by the relaunch's.
    evict = tmp_path / "dag_id=stack_rpo_failure" / "run_id=r" / "task_id=evict_0000"
    write_log(
        evict,
        "attempt=1.log",
        [
            ("00.000", "::group::Pre Execute"),
            ("01.000", "Pausing"),
            ("07.000", "::group::Pre Execute"),
            ("08.000", "Pausing"),
        ],
    )
    write_log(evict, "attempt=1.log.trigger.4.log", [("18.000", "Trigger fired event")])
    pods = {
        "a": PodSeen("stack_rpo_failure", "exit_0000", 1, "ns", "a", seconds("00.500"), seconds("11.000")),
        "b": PodSeen("stack_rpo_failure", "exit_0000", 2, "ns", "b", seconds("16.250")),
        "c": PodSeen("stack_kpo_failure", "exit_0000", 1, "ns", "c", seconds("00.500"), seconds("11.000")),
        "d": PodSeen("stack_kpo_failure", "exit_0000", 2, "ns", "d", seconds("14.000")),
        "e": PodSeen("stack_rpo_failure", "evict_0000", 1, "ns", "e", seconds("00.500"), seconds("05.000")),
        "f": PodSeen("stack_rpo_failure", "evict_0000", 1, "ns", "f", seconds("07.500")),
    }
    assert turnaround_stages(pods, tmp_path, "stack_rpo_failure", "exit") == [
        {
            "detected": 0.25,
            "worker resumed": 1.75,
            "try ended": 1.5,
            "next try started": 0.5,
            "next pod created": 1.25,
        }
    ]
    assert turnaround_stages(pods, tmp_path, "stack_kpo_failure") == [
        {
            "detected": None,
            "worker resumed": None,
            "try ended": 0.5,
            "next try started": 1.5,
            "next pod created": 1.0,
        }
    ]
    assert turnaround_stages(pods, tmp_path, "stack_rpo_failure", "evict") == [
        {
            "detected": None,
            "worker resumed": 2.0,
            "try ended": 0.5,
            "next try started": None,
            "next pod created": None,
        }
    ]
    # Each turnaround's stages add up to it.
    assert turnarounds(pods, "stack_rpo_failure", "exit") == [5.25]
    assert turnarounds(pods, "stack_kpo_failure") == [3.0]
    assert turnarounds(pods, "stack_rpo_failure", "evict") == [2.5]


def test_a_scale_step_whose_tasks_fail_before_deferring_is_measured_at_what_it_has():
    # On its way: not over, however many are deferred short of the level.
    assert not ramp_over({"deferred": 600, "scheduled": 300, "running": 100}, 1000)
    assert not ramp_over({"deferred": 534, "failed": 306, "queued": 160}, 1000)
    assert not ramp_over({"deferred": 10, "none": 90}, 100)
    # Every task deferred: over.
    assert ramp_over({"deferred": 1000}, 1000)
    assert ramp_over({"deferred": 1000, "running": 3}, 1000)
    # None on its way any more, some failed: over, at the deferred ones it has.
    assert ramp_over({"deferred": 534, "failed": 466}, 1000)
    # Not every task of the level exists yet (its DAG runs not created): not over.
    assert not ramp_over({"deferred": 400}, 500)


def test_a_resized_run_says_so_in_its_report() -> None:
    sizes = {"lanes": 8, "exits": 2, "ooms": 2, "failure_retries": 3, "evictions": 2}
    result = {
        "cores": 2,
        "idle_statements_per_second": 120.0,
        "sizes": sizes,
        "size_settings": ["exits=2", "ooms=2", "evictions=2"],
        "rows": [],
        "scale": [],
        "seed": [],
    }
    assert (
        "Smaller than the plan: `--size exits=2 --size ooms=2 --size evictions=2` (2 tasks exiting 1 and "
        "2 OOM-killed per operator, each with 3 retries; 2 evicted tasks per operator)."
    ) in report(result, "paced")
