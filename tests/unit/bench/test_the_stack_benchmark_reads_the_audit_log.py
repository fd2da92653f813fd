"""The whole-stack benchmark's arithmetic (``bench/stack.py``) on hand-made audit events: which
write shows a pod failed, the turnaround to the next try's pod, requests per namespace, and the
targets it says met or missed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.stack import PLANS, plan, read_audit, targets, turnarounds


def pod(uid: str, try_number: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "uid": uid,
            "name": f"exit-00-t{try_number}",
            "namespace": "failure-rpo",
            "labels": {"dag_id": "stack_rpo_failure", "task_id": "exit_00", "try_number": str(try_number)},
        },
        "status": status or {"phase": "Pending"},
    }


def event(n: int, t: str, verb: str, body: dict[str, Any] | None, sub: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": "pods", "namespace": "failure-rpo"}
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
    pods, requests = read_audit(audit)
    assert turnarounds(pods, "stack_rpo_failure") == [3.25]
    assert requests == {"failure-rpo": 7}
    assert turnarounds(pods, "stack_kpo_failure") == []


def test_the_plan_puts_each_operator_in_namespaces_of_its_own():
    dags = plan(PLANS["quick"])["dags"]
    namespaces = {d["dag_id"]: {t["namespace"] for t in d["tasks"]} for d in dags}
    assert all(len(ns) == 1 for ns in namespaces.values())
    assert len({next(iter(ns)) for ns in namespaces.values()}) == len(dags)
    seed = [d for d in dags if d["kind"] == "seed"]
    assert [t["image"] for d in seed for t in d["tasks"]] == ["notavalidimage", "notavalidimage"]
    assert all(t["retries"] == 3 for d in seed for t in d["tasks"])


def test_each_target_says_met_or_missed():
    def row(op: str, kind: str, p99: float, requests: float, statements: float) -> dict[str, Any]:
        return {
            "operator": op,
            "kind": kind,
            "turnaround_p99": p99,
            "requests_per_try": requests,
            "statements_per_try": statements,
        }

    result = {
        "rows": [
            row("rpo", "failure", 1.0, 9.0, 100.0),
            row("kpo_deferrable", "failure", 10.0, 30.0, 120.0),
            row("rpo", "success", 0.0, 5.0, 90.0),
            row("kpo_deferrable", "success", 0.0, 20.0, 80.0),
        ]
    }
    assert [(t, m) for t, _, m in targets(result)] == [
        ("retry turnaround p99 at most 1/5 of KPO deferrable's", "met"),
        ("database statements per failure try no more than KPO deferrable's", "met"),
        ("database statements per success try no more than KPO deferrable's", "missed"),
        ("one failed try at most 8 API requests in all", "missed"),
    ]
