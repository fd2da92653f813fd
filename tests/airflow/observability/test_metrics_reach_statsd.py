"""Verdict metrics leave a real ``airflow dags test`` run as StatsD datagrams on a real UDP socket.

Airflow is configured as a deployment would be (``[metrics] statsd_on``, InfluxDB-style tags so the
tags are visible on the wire); nothing in the package is replaced. One DAG has a task per kind of
ending: an exit code (retry), an image that does not exist (a 2 s grace, then retry), an eviction
(a relaunch inside the try, then success) and a plain success.
"""

from __future__ import annotations

import re
import time

import pytest

from airflow_k8s_retry import metrics
from airflow_k8s_retry.classification import hint_for
from airflow_k8s_retry_testing import FakeCluster
from tests.airflow.observability.statsd_listener import Datagram, StatsdListener
from tests.support.paths import REPO
from tests.support.scenarios import Scenario
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

DOCS = REPO / "docs" / "metrics.md"
DAG_ID = "metrics_e2e"
SCENARIO = Scenario(
    DAG_ID,
    """
    RetryingPodOperator(task_id="exits", image="example.com/app:broken", retries=0)
    RetryingPodOperator(
        task_id="pull",
        image="registry.example.com/team/missing:1",
        retries=0,
        failure_policy=FailurePolicy(grace={"image.not_found": 2}),
    )
    RetryingPodOperator(task_id="train", image="example.com/ml/train:2", retries=0)
    RetryingPodOperator(task_id="ok", image="example.com/app:ok")
    """,
    {
        "time_scale": 0.1,
        "images": {
            "example.com/app:broken": {"run": {"exit_code": 3, "duration_seconds": 2, "log": "boom"}},
            "registry.example.com/team/missing:1": {"pull": "not_found"},
            "example.com/ml/train:2": {"run": {"duration_seconds": 30}},
            "example.com/app:ok": {"run": {"duration_seconds": 2}},
        },
        # Only the first pod of the try is evicted; the relaunched one (suffix -r1) runs to the end.
        "disruptions": [{"pod_name_prefix": "metrics-e2e-train-", "after_seconds": 10, "kind": "evict"}],
    },
)


@pytest.fixture(scope="module")
def received(
    migrated_database: MigratedDatabase, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DagRunResult, list[Datagram]]:
    work = tmp_path_factory.mktemp("metrics")
    dags = work / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(SCENARIO.dag_file())
    home = AirflowHome.create(work / "home", dags_folder=dags, database=migrated_database)
    listener = StatsdListener()
    try:
        with FakeCluster(scenario=SCENARIO.cluster) as cluster:
            result = home.run_dag(
                DAG_ID, kubeconfig=cluster.kubeconfig, timeout=240, extra_env=listener.env()
            )
        # UDP on loopback is delivered at once; give the receiving thread a moment to read the rest.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            d.name.endswith("verdict.succeed.pod__succeeded") for d in listener.datagrams()
        ):
            time.sleep(0.05)
    finally:
        listener.close()
    (work / "airflow-output.log").write_text(result.output)
    return result, listener.datagrams()


def named(datagrams: list[Datagram], name: str) -> list[Datagram]:
    return [d for d in datagrams if d.name == f"airflow.{name}"]


def test_the_dag_ran_as_expected(received: tuple[DagRunResult, list[Datagram]]) -> None:
    result, _ = received
    states = {t: result.final_state(t) for t in ("exits", "pull", "train", "ok")}
    assert states == {"exits": "failed", "pull": "failed", "train": "success", "ok": "success"}, (
        result.output[-4000:]
    )


def test_one_counter_per_verdict_named_by_outcome_and_reason(
    received: tuple[DagRunResult, list[Datagram]],
) -> None:
    _, datagrams = received
    counters = {
        (d.name, d.tags.get("task_id")): d
        for d in datagrams
        if d.name.startswith("airflow.k8s_retry.verdict.")
    }
    assert set(counters) == {
        ("airflow.k8s_retry.verdict.retry.container__exit_code", "exits"),
        ("airflow.k8s_retry.verdict.retry.image__not_found", "pull"),
        ("airflow.k8s_retry.verdict.relaunch.node__disruption", "train"),
        ("airflow.k8s_retry.verdict.succeed.pod__succeeded", "train"),
        ("airflow.k8s_retry.verdict.succeed.pod__succeeded", "ok"),
    }
    for d in counters.values():
        assert (d.value, d.type) == ("1", "c")
        assert d.tags["dag_id"] == DAG_ID
        assert d.tags["namespace"] == "default"
    relaunches = named(datagrams, metrics.RELAUNCHES)
    assert [(d.value, d.type, d.tags["task_id"], d.tags["reason"]) for d in relaunches] == [
        ("1", "c", "train", "node.disruption")
    ]


def test_detection_latency_and_grace_wait_are_timed_by_the_trigger(
    received: tuple[DagRunResult, list[Datagram]],
) -> None:
    _, datagrams = received
    latency = {d.tags["task_id"]: float(d.value) for d in named(datagrams, metrics.DETECTION_LATENCY)}
    assert all(d.type == "ms" for d in named(datagrams, metrics.DETECTION_LATENCY))
    # One verdict per trigger run: the evicted pod's, the relaunched pod's success (two for train).
    assert set(latency) == {"exits", "pull", "train", "ok"}
    assert all(0 <= ms < 5000 for ms in latency.values()), latency
    waits = named(datagrams, metrics.GRACE_WAIT)
    assert [(d.tags["task_id"], d.tags["reason"], d.type) for d in waits] == [
        ("pull", "image.not_found", "ms")
    ]
    # The grace was 2 s on the trigger's clock: the wait lasted at least that, and not much longer.
    assert 2000 <= float(waits[0].value) < 10000


def test_the_triggerer_reports_its_shared_feeds(received: tuple[DagRunResult, list[Datagram]]) -> None:
    _, datagrams = received
    feeds = [int(float(d.value)) for d in named(datagrams, metrics.FEEDS)]
    subs = [int(float(d.value)) for d in named(datagrams, metrics.SUBSCRIPTIONS)]
    # While a trigger runs: one pod feed and one Events feed, one subscription; after it: none.
    assert 2 in feeds and feeds[-1] == 0
    assert 1 in subs and subs[-1] == 0
    assert named(datagrams, metrics.WATCH_RECONNECTS)
    assert named(datagrams, metrics.POLLING_FEEDS)
    assert all(d.type == "g" and d.tags.get("hostname") for d in named(datagrams, metrics.FEEDS))


def test_every_name_sent_is_documented(received: tuple[DagRunResult, list[Datagram]]) -> None:
    _, datagrams = received
    documented = DOCS.read_text()
    sent = {d.name.removeprefix("airflow.") for d in datagrams if d.name.startswith("airflow.k8s_retry.")}
    assert sent
    for name in sent:
        assert f"`{name}`" in documented, name


@pytest.mark.parametrize(
    ("task_id", "reason"), [("exits", "container.exit_code"), ("pull", "image.not_found")]
)
def test_the_failure_report_opens_with_the_fix_hint(
    received: tuple[DagRunResult, list[Datagram]], task_id: str, reason: str
) -> None:
    result, _ = received
    lines = result.output.splitlines()
    start = next(
        i for i, line in enumerate(lines) if re.search(rf"\] Pod metrics-e2e-{task_id}-\w+-t1: ", line)
    )
    head = lines[start].split(": ", 1)[1]
    hint = hint_for(reason)
    if hint is None:
        assert head.startswith(f"{reason}: ")
    else:
        assert head == f"fix: {hint}"
        assert lines[start + 1].startswith(f"{reason}: ")
