"""The benchmark's real backend, small: the latency phase on kube-apiserver, etcd and KWOK nodes.

One control plane, one pod per failure and side (about 30 s with the control plane's start). It
checks what ``make bench CLUSTER=real`` stands on: both triggers answer each failure through the
real API server, the request counts and the "state changed at" times come from the API server's
own audit log, and kube-apiserver's and etcd's CPU time can be read from ``/proc``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from bench.driver import process_cpu_seconds
from bench.phases import SIDES, run_latency
from tools.controlplane.realcluster import RealCluster, RealClusterError, binaries


class MeasuredCluster(RealCluster):
    """Keeps its records and its components' CPU time for the test to look at."""

    made: list[MeasuredCluster] = []

    def __enter__(self) -> MeasuredCluster:
        super().__enter__()
        MeasuredCluster.made.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = {name: process_cpu_seconds(pid) for name, pid in self.component_pids().items()}
        super().__exit__(*exc)


@pytest.fixture(scope="module")
def latency(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    try:
        binaries()
    except RealClusterError as exc:
        if os.environ.get("AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    work = tmp_path_factory.mktemp("bench-real")
    MeasuredCluster.made.clear()
    result = run_latency(work, {"pull": 1, "term": 1, "evict": 1}, after=6.0, backend=MeasuredCluster)
    (cluster,) = MeasuredCluster.made
    return {"result": result, "cluster": cluster, "records": cluster.records(), "work": work}


def test_both_triggers_answer_every_failure_on_the_real_api_server(latency: dict[str, Any]) -> None:
    for kind, entry in latency["result"]["kinds"].items():
        for side in SIDES:
            # A wrong answer names the pod, the status and the reason; a missing one the pod.
            assert entry[side]["n"] == 1, (kind, side, entry[side]["wrong"], entry[side]["missing"])
            assert 0 <= entry[side]["samples"][0] < 30


def test_requests_and_state_changes_come_from_the_api_server_audit_log(latency: dict[str, Any]) -> None:
    audit = latency["cluster"].audit
    assert audit.stat().st_size > 0
    records = latency["records"]
    ours = {
        f"{r['verb']} {r['resource']}" for r in records if r["kind"] == "request" and r["namespace"] == "ours"
    }
    kpo = {
        f"{r['verb']} {r['resource']}" for r in records if r["kind"] == "request" and r["namespace"] == "kpo"
    }
    assert {"list pods", "watch pods"} <= ours
    assert "get pods" in kpo
    changes = {r["change"].split(":")[0] + ":" for r in records if r["kind"] == "lifecycle"}
    assert {"waiting:", "terminated:", "disruption:"} <= changes


def test_kube_apiserver_and_etcd_cpu_time_is_read(latency: dict[str, Any]) -> None:
    cpu = latency["cluster"].cpu
    assert set(cpu) == {"kube-apiserver", "etcd"}
    assert all(seconds > 0 for seconds in cpu.values())
