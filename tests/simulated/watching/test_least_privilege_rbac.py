"""The RBAC manifests in deploy/rbac/ grant exactly what the code uses, and that is enough.

The whole lifecycle (the operator creates a pod, defers, the trigger follows it through the shared
feed and fires, the operator reads logs and XCom, stamps and deletes the pod) runs under a token
holding exactly the manifests' rules: the Role alone (one watch per namespace), and the Role with
the ClusterRole (one watch for all namespaces). Without any one of the trigger's verbs, the log
says in one line which verb on which resource is missing.

The cluster runs on a manual clock (the pod moves only when the test advances it), the hub's feeds
wait (backoff, polling) on a clock nobody advances and the trigger's clock stands still, so the
requests asserted are exactly those made, and each refusal is logged at a step the test waits for.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.kube import rbac
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.feeds import REFUSALS_FOR_RBAC
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import requests, through_refusals, until_watching
from tests.support.lab import Run
from tests.support.paths import REPO

DEPLOY = REPO / "deploy" / "rbac"
SCENARIO = {
    "images": {
        "job:1": {
            "pull": "ok",
            "run": {"exit_code": 0, "duration_seconds": 60, "log": "hello\n", "xcom": {"n": 1}},
        },
        "ghost:1": {"pull": "not_found"},
    }
}
#: Simulated seconds from the pod's creation: its first pull is refused; it has run its 60 s.
PULL_REFUSED, DONE = 0.4, 61.0
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: A deleted pod's container stops within this many simulated seconds, and the pod is gone.
STOPPED = 1.0


def manifest(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / name).read_text()))


def rules_of(document: dict[str, Any]) -> set[tuple[str, str, frozenset[str]]]:
    return {
        (group, resource, frozenset(rule["verbs"]))
        for rule in document["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def granted(
    namespaces: list[str], *, cluster_role: bool, without: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """The manifests' rules as the simulator's per-token rules (optionally minus one verb)."""
    granted_rules = []
    documents = [(manifest("role.yaml"), namespaces)]
    if cluster_role:
        documents.append((manifest("clusterrole.yaml"), None))
    for document, where in documents:
        for rule in document["rules"]:
            for resource in rule["resources"]:
                verbs = [v for v in rule["verbs"] if (v, resource) != without]
                if verbs:
                    granted_rules.append({"verbs": verbs, "resources": [resource], "namespaces": where})
    return granted_rules


@dataclass
class TaskInstanceStandIn:
    """The attributes of Airflow's task instance the operator reads, and its XCom push."""

    dag_id: str = "rbac"
    task_id: str = "load"
    run_id: str = "manual__2024-06-01T00:00:00+00:00"
    map_index: int = -1
    try_number: int = 1
    start_date: datetime = field(default_factory=lambda: datetime.now(UTC))
    xcom: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def test_the_manifests_hold_exactly_the_rules_the_code_documents() -> None:
    assert rules_of(manifest("role.yaml")) == set(rbac.NAMESPACED_RULES)
    assert rules_of(manifest("clusterrole.yaml")) == set(rbac.CLUSTER_RULES)
    subject = manifest("serviceaccount.yaml")["metadata"]
    for binding, role in (("rolebinding.yaml", "role.yaml"), ("clusterrolebinding.yaml", "clusterrole.yaml")):
        document = manifest(binding)
        assert document["roleRef"]["name"] == manifest(role)["metadata"]["name"]
        assert document["subjects"] == [
            {"kind": "ServiceAccount", "name": subject["name"], "namespace": subject["namespace"]}
        ]
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}


async def run_lifecycle(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, trigger_clock: ManualClock
) -> dict[str, Any]:
    """execute -> defer -> the trigger -> execute_complete, under ``kubeconfig``'s token."""
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    ti = TaskInstanceStandIn()
    context = {"ti": ti, "run_id": ti.run_id}
    op = RetryingPodOperator(
        task_id="load", kubernetes_conn_id=None, namespace="default", image="job:1", do_xcom_push=True
    )
    with pytest.raises(TaskDeferred) as deferred:
        await asyncio.to_thread(op.execute, context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, PodStateTrigger)
    run = Run(trigger).start()
    # The trigger waits on the pending pod through feeds that watch; then the pod runs to its end.
    await until_watching(cluster)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
    cluster.advance(DONE)
    event = await run.finish(within=30)
    result = await asyncio.to_thread(op.execute_complete, context, event.to_payload())
    # The operator deleted the pod (gracefully: the kubelet stops it, then it is gone).
    cluster.advance(STOPPED)
    assert cluster.pod(trigger.pod_name) is None, "the pod was deleted"
    return {"result": result, "event": event}


def refused(cluster: FakeCluster) -> list[tuple[str, str, str]]:
    """(verb, resource, namespace or "cluster") of every request answered 403, in order."""
    return [(verb, resource, where) for verb, resource, where, status in requests(cluster) if status == 403]


#: What the whole lifecycle asks of the API besides the feeds' LISTs and WATCHes, in order: the
#: operator creates the pod; once the trigger saw it succeed (no last look for a success), the
#: operator reads it and its log, reads the XCom and stops the sidecar (an exec each), stamps the
#: verdict and deletes the pod.
LIFECYCLE = [
    ("create", "pods", "default", 201),
    ("get", "pods", "default", 200),
    ("get", "pods/log", "default", 200),
    ("get", "pods", "default", 200),
    ("get", "pods", "default", 200),
    ("create", "pods/exec", "default", 101),
    ("create", "pods/exec", "default", 101),
    ("patch", "pods", "default", 200),
    ("delete", "pods", "default", 200),
]


@pytest.mark.parametrize("cluster_role", [False, True], ids=["role", "role+clusterrole"])
async def test_the_whole_lifecycle_runs_under_exactly_these_rules(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    cluster_role: bool,
    trigger_clock: ManualClock,
    held_hub: ManualClock,
) -> None:
    with FakeCluster(SCENARIO, clock="manual", audit=tmp_path / "audit.jsonl") as cluster:
        kubeconfig = cluster.grant(
            "least-privilege",
            granted(["default"], cluster_role=cluster_role),
            user="system:serviceaccount:airflow:airflow-k8s-retry",
        )
        outcome = await run_lifecycle(cluster, monkeypatch, kubeconfig, trigger_clock)
        assert outcome["event"].verdict.outcome.value == "succeed"
        assert outcome["result"] == {"n": 1}
        if cluster_role:
            assert refused(cluster) == []
        else:
            # The one refusal the code expects: the cluster-wide feeds, once each, then per namespace.
            assert sorted(refused(cluster)) == [("list", "events", "cluster"), ("list", "pods", "cluster")]
        # Per namespace under the Role alone (after the one refusal), or one for the cluster.
        where = "cluster" if cluster_role else "default"
        feeds = [(verb, kind, where, 200) for verb in ("list", "watch") for kind in ("events", "pods")]
        if not cluster_role:
            feeds += [("list", "events", "cluster", 403), ("list", "pods", "cluster", 403)]
        made = requests(cluster)
        assert sorted(r for r in made if r[0] in ("list", "watch")) == sorted(feeds)
        assert [r for r in made if r[0] not in ("list", "watch")] == LIFECYCLE
        used = {(verb, resource) for verb, resource, _, status in made if status not in (401, 403)}
        allowed = {(v, r) for _, r, verbs in rbac.NAMESPACED_RULES for v in verbs}
        assert used <= allowed


@pytest.mark.parametrize(
    ("verb", "resource"),
    [("watch", "pods"), ("list", "pods"), ("patch", "pods"), ("watch", "events"), ("list", "events")],
)
async def test_a_missing_verb_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    trigger_clock: ManualClock,
    held_hub: ManualClock,
    verb: str,
    resource: str,
) -> None:
    with FakeCluster(SCENARIO, clock="manual") as cluster:
        rules = granted(["default"], cluster_role=False, without=(verb, resource))
        kubeconfig = cluster.grant("short-of-one", rules)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        ti = TaskInstanceStandIn()
        # A pull that fails: the trigger sees a signal and saves its history (a PATCH) at once.
        op = RetryingPodOperator(
            task_id="load", kubernetes_conn_id=None, namespace="default", image="ghost:1"
        )
        with pytest.raises(TaskDeferred) as deferred:
            await asyncio.to_thread(op.execute, {"ti": ti, "run_id": ti.run_id})
        trigger = deferred.value.trigger
        printed: list[str] = []

        def errors() -> list[str]:
            # The hub logs through logging, the trigger through Airflow's (structured) task logger.
            printed.extend(line for line in capfd.readouterr().out.splitlines() if "[error" in line)
            return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] + printed

        def named() -> list[str]:
            return [line for line in errors() if f"RBAC: may not {verb} {resource} in" in line]

        with caplog.at_level(logging.ERROR):
            run = Run(trigger).start()
            # The trigger sees the pending pod (through whatever the rules still allow) and waits.
            await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
            if (verb, resource) == ("patch", "pods"):
                # The pull is refused: the trigger stamps the first-seen time of that at once, is
                # refused, says so, and waits out the grace.
                cluster.advance(PULL_REFUSED)
                await trigger_clock.wait_for_sleeper(trigger_clock.now() + 90)
            elif (verb, resource) == ("list", "events"):
                # Stepping down would give up the Events: the LIST is asked again after each
                # backoff (the default's third is at most 2 s) until it is refused for good.
                await through_refusals(held_hub, cluster, longest_backoff=2.0)
                await held_hub.wait_for_sleeper(later_than=held_hub.now())
            else:
                # The feed refused says so, then waits on the hub's clock (it polls instead).
                await held_hub.wait_for_sleeper(later_than=held_hub.now())
            await run.stop()
        assert len(named()) == 1, f"not one error naming {verb} {resource}: {errors()}"
        assert all("\n" not in line for line in named())
        # Refused: each kind's cluster-wide LIST (a Role grants none), then the missing verb, once
        # (the Events' LIST until it is taken as RBAC).
        times = REFUSALS_FOR_RBAC if (verb, resource) == ("list", "events") else 1
        expected = [("list", "events", "cluster"), ("list", "pods", "cluster")] + [
            (verb, resource, "default")
        ] * times
        assert sorted(refused(cluster)) == sorted(expected)


async def test_without_pods_exec_the_xcom_read_names_the_verb(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    from airflow_k8s_retry.kube.errors import Forbidden

    with FakeCluster(SCENARIO, clock="manual", audit=tmp_path / "audit.jsonl") as cluster:
        rules = [r for r in granted(["default"], cluster_role=True) if r["resources"] != ["pods/exec"]]
        kubeconfig = cluster.grant("no-exec", rules)
        with pytest.raises(Forbidden) as refused_read:
            await run_lifecycle(cluster, monkeypatch, kubeconfig, trigger_clock)
        # Refused: the XCom read, and the sidecar's stop after it (an exec each), nothing else.
        assert refused(cluster) == [("create", "pods/exec", "default")] * 2
        message = str(refused_read.value)
        assert "\n" not in message
        # The API's own message stops at "is forbidden: " (as kube-apiserver's does without
        # "create"): the line still names the resource and both verbs an exec needs.
        assert message.endswith("is forbidden:") and "cannot" not in message, message
        assert 'RBAC: may not create pods/exec in namespace "default"' in message, message
        assert 'grant verbs "create" and "get" on "pods/exec"' in message, message
