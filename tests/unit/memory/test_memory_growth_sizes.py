"""The sizes ``MemoryGrowth`` asks for after an OOM kill, and the caps that bound them.

Pure: the caps come from LimitRange, ResourceQuota and Node objects as the API serves them (the
cluster tier reads the same objects from a real kube-apiserver); the record is the Variable's JSON.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from airflow_k8s_retry.kube.errors import Forbidden
from airflow_k8s_retry.kube.quantity import parse_memory
from airflow_k8s_retry.memory_growth import (
    Cap,
    MemoryGrowth,
    Planned,
    Record,
    Size,
    apply_size,
    format_memory,
    limit_range_caps,
    next_size,
    node_caps,
    quota_caps,
    read_caps,
    variable_key,
)
from airflow_k8s_retry.operators import RetryingPodOperator


def gib(n: float) -> Decimal:
    return Decimal(int(n * 2**30))


def pod(*containers: dict[str, Any], sidecars: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns"},
        "spec": {"containers": list(containers), "initContainers": list(sidecars)},
    }


def container(name: str, limit: str | None = None, request: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limit:
        resources["limits"] = {"memory": limit, "cpu": "1"}
    if request:
        resources["requests"] = {"memory": request}
    return {"name": name, "resources": resources}


def test_factor_and_step_grow_limit_and_request_rounded_up_to_a_mebibyte() -> None:
    ran = Size(gib(2), gib(1))
    assert next_size(MemoryGrowth(), "base", ran, 1, []).size == Size(gib(4), gib(2))  # type: ignore[union-attr]
    step = next_size(MemoryGrowth(step="512Mi"), "base", ran, 1, [])
    assert step is not None and step.size == Size(gib(2.5), gib(1.5))
    odd = MemoryGrowth(factor=1.3).grown(Decimal(1000 * 2**20))
    assert odd == Decimal(1300 * 2**20) and format_memory(odd) == "1300Mi"
    assert format_memory(gib(3)) == "3Gi" and format_memory(Decimal(1000)) == "1000"


def test_the_tightest_cap_wins_and_a_cap_at_the_killed_size_stops_growth() -> None:
    ran = Size(gib(2), gib(1))
    caps = [
        Cap("LimitRange lr (max 8Gi per container)", gib(8)),
        Cap("ResourceQuota q (3Gi of limits.memory left)", gib(3)),
    ]
    step = next_size(MemoryGrowth(maximum="16Gi"), "base", ran, 1, caps)
    assert step is not None and step.size == Size(gib(3), gib(2))
    assert (
        step.why
        == "container base try 1 was OOMKilled at 2Gi, capped by ResourceQuota q (3Gi of limits.memory left)"
    )
    stopped = next_size(MemoryGrowth(maximum="2Gi"), "base", ran, 3, caps)
    assert stopped is not None and stopped.size is None
    assert stopped.why == (
        "memory growth stopped: container base try 3 was OOMKilled at 2Gi, and the task's maximum "
        "(MemoryGrowth maximum=2Gi) allows no more than 2Gi"
    )


def test_a_container_without_memory_set_has_nothing_to_grow() -> None:
    assert next_size(MemoryGrowth(), "base", Size(), 1, []) is None
    only_request = next_size(MemoryGrowth(), "base", Size(None, gib(1)), 1, [])
    assert only_request is not None and only_request.size == Size(None, gib(2))


def test_limit_range_caps_per_container_and_per_pod_less_the_other_containers() -> None:
    p = pod(
        container("base", "2Gi"),
        container("helper", "1Gi"),
        sidecars=({**container("log", "512Mi"), "restartPolicy": "Always"},),
    )
    ranges = [
        {"metadata": {"name": "c"}, "spec": {"limits": [{"type": "Container", "max": {"memory": "6Gi"}}]}},
        {
            "metadata": {"name": "p"},
            "spec": {
                "limits": [
                    {"type": "Pod", "max": {"memory": "8Gi"}},
                    {"type": "Container", "max": {"cpu": "2"}},
                ]
            },
        },
    ]
    caps = limit_range_caps(ranges, p, "base")
    assert [(c.name, c.bytes) for c in caps] == [
        ("LimitRange c (max 6Gi per container)", gib(6)),
        ("LimitRange p (max 8Gi per pod)", gib(8) - gib(1.5)),
    ]


def test_quota_room_counts_used_and_the_other_containers() -> None:
    p = pod(container("base", "2Gi", "1Gi"), container("helper", "1Gi", "256Mi"))
    quotas = [
        {
            "metadata": {"name": "team"},
            "spec": {"hard": {"limits.memory": "10Gi", "requests.memory": "6Gi", "pods": "10"}},
            "status": {
                "hard": {"limits.memory": "10Gi", "requests.memory": "6Gi", "pods": "10"},
                "used": {"limits.memory": "4Gi", "requests.memory": "5Gi"},
            },
        }
    ]
    caps = quota_caps(quotas, p, "base")
    assert [(c.name, c.bytes) for c in caps] == [
        ("ResourceQuota team (6Gi of limits.memory left)", gib(6) - gib(1)),
        ("ResourceQuota team (1Gi of requests.memory left)", gib(1) - gib(0.25)),
    ]


def test_the_largest_schedulable_node_bounds_the_request() -> None:
    nodes = [
        {
            "metadata": {"name": "big"},
            "spec": {"unschedulable": True},
            "status": {"allocatable": {"memory": "64Gi"}},
        },
        {"metadata": {"name": "mid"}, "status": {"allocatable": {"memory": "16302032Ki"}}},
        {"metadata": {"name": "small"}, "status": {"allocatable": {"memory": "4Gi"}}},
    ]
    (cap,) = node_caps(nodes, pod(container("base", "2Gi")), "base")
    assert cap.bytes == Decimal(16302032 * 1024)
    assert (
        cap.name == f"the largest node's allocatable memory (mid: {format_memory(Decimal(16302032 * 1024))})"
    )


def test_a_refused_read_skips_its_cap_with_one_log_line() -> None:
    lines: list[str] = []

    def read(resource: str, namespace: str | None) -> list[dict[str, Any]]:
        if resource == "nodes":
            raise Forbidden(
                'nodes is forbidden: User "system:serviceaccount:ns:airflow" cannot list resource "nodes"'
            )
        if resource == "limitranges":
            return [
                {
                    "metadata": {"name": "c"},
                    "spec": {"limits": [{"type": "Container", "max": {"memory": "3Gi"}}]},
                }
            ]
        return []

    caps = read_caps(read, "ns", pod(container("base", "2Gi")), "base", lambda msg, *a: lines.append(msg % a))
    assert [c.name for c in caps] == ["LimitRange c (max 3Gi per container)"]
    assert lines == ["Memory growth: cannot list nodes (RBAC forbids it); that cap is skipped"]


def test_a_record_applies_to_later_tries_of_its_run_and_remembered_sizes_only_when_asked() -> None:
    size = Size(gib(4), gib(2))
    record = Record(
        next=Planned("base", size, "try 1 was OOMKilled at 2Gi", "run-a", 2),
        remembered=Planned("base", Size(gib(3)), "succeeded", "run-0", 1),
    )
    assert record.for_try("run-a", 2, remember=False) == record.next
    assert record.for_try("run-a", 3, remember=False) == record.next  # a later failure keeps the size
    assert record.for_try("run-a", 1, remember=True) == record.remembered
    assert record.for_try("run-b", 1, remember=False) is None
    assert record.for_try("run-b", 1, remember=True) == record.remembered
    assert Record.from_payload(record.to_payload()) == record
    assert Record.from_payload({"next": {"container": 1}, "remembered": "junk"}).empty


def test_apply_size_keeps_the_other_resources() -> None:
    c = container("base", "2Gi", "1Gi")
    apply_size(c, Size(gib(4), gib(2)))
    assert c["resources"] == {
        "limits": {"memory": "4Gi", "cpu": "1"},
        "requests": {"memory": "2Gi"},
    }


def test_variable_keys_fit_airflows_limit() -> None:
    assert variable_key("etl", "load", -1) == "k8s_retry.memory.etl.load"
    assert variable_key("etl", "load", 3) == "k8s_retry.memory.etl.load.3"
    long = variable_key("d" * 200, "t" * 200, 7)
    assert len(long) == 250 and long != variable_key("d" * 200, "t" * 200, 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"factor": 1}, "MemoryGrowth: factor must be a number greater than 1, got 1"),
        ({"factor": 2, "step": "1Gi"}, "MemoryGrowth: give factor or step, not both"),
        (
            {"step": "lots"},
            "MemoryGrowth step: 'lots' is not a memory quantity; write it as Kubernetes does, e.g. '2Gi'",
        ),
        ({"maximum": "0"}, "MemoryGrowth: maximum must be more than 0, got '0'"),
        ({"remember": "yes"}, "MemoryGrowth: remember must be True or False, got 'yes'"),
    ],
)
def test_bad_growth_settings_are_one_line_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        MemoryGrowth(**kwargs)
    assert str(raised.value) == message


def test_the_operator_refuses_anything_but_a_memory_growth() -> None:
    with pytest.raises(ValueError, match=r"^job: memory_growth must be a MemoryGrowth .*got dict$"):
        RetryingPodOperator(task_id="job", image="x", memory_growth={"factor": 2})


def test_parse_memory_reads_what_kubernetes_writes() -> None:
    assert parse_memory("1536Mi", "x") == Decimal(1536 * 2**20)
    assert parse_memory("1.5G", "x") == Decimal(1_500_000_000)
