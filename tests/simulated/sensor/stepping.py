"""What the sensor's trigger tests on manual clocks read and move: the cluster one scripted step at a
time, the trigger's requests from the simulator's audit, and the decisions in the trigger's log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_k8s_retry_testing import FakeCluster

#: The label a Job's pods carry with its uid (the trigger lists a failed Job's pods by it).
CONTROLLER_UID = "batch.kubernetes.io/controller-uid="
#: How far a test lets the cluster's clock run before it calls the step it waits for missing.
LONGEST_RUN = 600.0
#: What the trigger's feeds ask while they watch: one LIST, then one WATCH.
WATCHED = ["list 200", "watch 200"]
#: The images the following tests run: a quick success, a pod that runs until deleted, a failure.
SCENARIO = {
    "images": {
        "quick:1": {"run": {"duration_seconds": 2}},
        "long:1": {"run": {"duration_seconds": 100_000}},
        "fails:1": {"run": {"exit_code": 3, "duration_seconds": 1, "log": "boom"}},
    }
}


def requests(cluster: FakeCluster) -> dict[str, list[str]]:
    """The requests of the watch hub's feeds and of the triggers, from the simulator's audit, as
    "<what> <status>" per stream, in the order the cluster answered them.

    Each feed makes one request at a time, so its order is exact: ``"pods in default"`` (with its
    label selector, if any, in brackets), ``"jobs in default"``, ``"events in all namespaces"``;
    each asks ``list`` or ``watch``. ``"reads"`` are the pods read one by one (``get <name>``, the
    last look, and ``log <name>``, the failed container's last log lines that go with it) and a
    failed Job's pods listed afresh (``list job <name>'s pods``). The test's own
    creates and deletes are left out; an injected fault shows instead of the status.
    """
    jobs = {j["metadata"]["uid"]: j["metadata"]["name"] for j in cluster.jobs()}
    found: dict[str, list[str]] = {}
    for record in cluster.audit_records():
        if record.get("kind") != "request" or record["verb"] not in ("get", "list", "watch", "patch"):
            continue
        selector = (parse_qs(urlsplit(record["request_uri"]).query).get("labelSelector") or [""])[0]
        if record["verb"] in ("get", "patch"):
            verb = "log" if record["resource"] == "pods/log" else record["verb"]
            stream, what = "reads", f"{verb} {record['name']}"
        elif selector.startswith(CONTROLLER_UID):
            stream, what = "reads", f"list job {jobs.get(selector.removeprefix(CONTROLLER_UID))}'s pods"
        else:
            where = record["namespace"] or "all namespaces"
            stream = f"{record['resource']} in {where}" + (f" ({selector})" if selector else "")
            what = record["verb"]
        found.setdefault(stream, []).append(f"{what} {record.get('fault', record['status'])}")
    return found


async def made(cluster: FakeCluster, expected: dict[str, list[str]], within: float = 20) -> None:
    """Until the requests made (:func:`requests`) are exactly ``expected``."""
    reached = await asyncio.to_thread(cluster.wait_for, lambda c: requests(c) == expected, within)
    assert reached, f"expected the requests {expected}, made {requests(cluster)}"


def run_until(cluster: FakeCluster, done: Callable[[FakeCluster], bool]) -> None:
    """Advance the cluster's manual clock from one scripted step to the next until ``done``."""
    while not done(cluster):
        steps = cluster.pending_timers()
        assert steps and cluster.sim_time < LONGEST_RUN, f"nothing left to run at {cluster.sim_time} s"
        cluster.advance(steps[0] - cluster.sim_time)


def phase(cluster: FakeCluster, name: str) -> str | None:
    found = cluster.pod(name)
    return None if found is None else found["status"].get("phase")


def created(cluster: FakeCluster) -> list[str]:
    """The pods' names in the order the cluster created them."""
    return [
        r["name"] for r in cluster.audit_records() if r["kind"] == "lifecycle" and r["change"] == "created"
    ]


def job_failed(cluster: FakeCluster) -> bool:
    conditions = [c for j in cluster.jobs() for c in (j.get("status") or {}).get("conditions") or []]
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)


class TaskLog:
    """The trigger's log lines, which Airflow's structlog writes to stdout (captured by pytest)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.lines: list[tuple[str, str]] = []  # (the module that logged it, the message)

    def read(self) -> list[tuple[str, str]]:
        for line in self.capsys.readouterr().out.splitlines():
            if "] " in line and " [airflow" in line and " loc=" in line:
                message = line.split("] ", 1)[1].split(" [airflow", 1)[0]
                self.lines.append((line.rsplit(" loc=", 1)[1].split(":", 1)[0], message))
        return self.lines

    def decisions(self) -> list[str]:
        """What the following trigger itself logged (not its judges): what it waits for, which pod
        it judges, what it leaves to the Job."""
        return [message for module, message in self.read() if module == "target.py"]

    async def says(self, message: str, within: float = 20) -> None:
        """Until the following trigger has logged ``message`` (checked every few milliseconds)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within
        while message not in self.decisions():
            assert loop.time() < give_up, f"not logged within {within} s: {message!r}; logged: {self.lines}"
            await asyncio.sleep(0.005)
