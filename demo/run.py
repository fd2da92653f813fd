"""``make demo``: run every example DAG under real Airflow against the simulator, then show each try.

Starts one ``FakeCluster`` with ``demo/scenario.yaml``, runs each DAG in ``dags/`` with
``airflow dags test`` (three at a time, each in its own throw-away AIRFLOW_HOME under ``.demo/``),
and prints one row per pod and try: the try's final state, the verdict stamped on the pod, its
reason code, and whether the pod was deleted. It ends with the number of pods still alive.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags"
WORK = REPO / ".demo"
SCENARIO = Path(__file__).with_name("scenario.yaml")
VERDICT_ANNOTATION = "airflow-k8s-retry.io/verdict"


@dataclass
class Row:
    dag: str
    task: str
    try_number: int
    state: str
    pod: str
    verdict: str
    reason: str
    created: int
    deleted: int
    retry_in: str = "-"  # the delay a retry policy set before the next try (Airflow 3.3+)


def _verdict(pod: dict[str, Any]) -> tuple[str, str]:
    stamp = (pod["metadata"].get("annotations") or {}).get(VERDICT_ANNOTATION)
    if not stamp:
        return "-", "-"
    data = json.loads(stamp)
    return str(data.get("outcome", "-")), str(data.get("reason", "-"))


def build_rows(result: Any, pods: list[dict[str, Any]], deleted: set[str]) -> list[Row]:
    """One row per pod of each try; a sensor's row shows the pod it watched (created elsewhere)."""
    dag_id = result.dag_id
    rows: list[Row] = []
    delays = result.retry_delays()
    for t in result.tries():
        delay = delays.get((t.task_id, t.map_index, t.try_number))
        retry_in = "-" if delay is None else f"{delay:g} s"
        mine = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get("dag_id") == dag_id
            and p["metadata"]["labels"].get("task_id") == t.task_id
            and p["metadata"]["labels"].get("try_number") == str(t.try_number)
        ]
        if not mine:
            watched = result.xcom(t.task_id, "pod_name")
            pod = next((p for p in pods if p["metadata"]["name"] == watched), None)
            if pod is None:
                rows.append(Row(dag_id, t.task_id, t.try_number, str(t.state), "-", "-", "-", 0, 0, retry_in))
                continue
            outcome, reason = _verdict(pod)
            deleted_here = int(watched in deleted)
            rows.append(
                Row(
                    dag_id,
                    t.task_id,
                    t.try_number,
                    str(t.state),
                    str(watched),
                    outcome,
                    reason,
                    0,
                    deleted_here,
                    retry_in,
                )
            )
        for pod in mine:
            name = pod["metadata"]["name"]
            outcome, reason = _verdict(pod)
            rows.append(
                Row(
                    dag_id,
                    t.task_id,
                    t.try_number,
                    str(t.state),
                    name,
                    outcome,
                    reason,
                    1,
                    int(name in deleted),
                    retry_in,
                )
            )
    return rows


def print_table(rows: list[Row]) -> None:
    headers = ["dag", "task", "try", "state", "pod", "verdict", "reason", "created", "deleted", "retry_in"]
    table = [
        [
            r.dag,
            r.task,
            str(r.try_number),
            r.state,
            r.pod,
            r.verdict,
            r.reason,
            str(r.created),
            str(r.deleted),
            r.retry_in,
        ]
        for r in rows
    ]
    widths = [max([len(h), *(len(row[i]) for row in table)]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line.rstrip())
    print("  ".join("-" * w for w in widths))
    previous = None
    for row in table:
        if previous is not None and row[0] != previous:
            print()
        previous = row[0]
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_page_hint(results: dict[str, Any]) -> None:
    """How to open the failures page on the demo run with the most published verdicts."""
    import sqlite3

    def verdicts(result: Any) -> int:
        """The latest tries' verdict XComs, and the earlier (failed) tries kept in their history."""
        with sqlite3.connect(result.database) as db:
            latest = int(db.execute("select count(*) from xcom where key = 'verdict'").fetchone()[0])
            earlier = int(db.execute("select count(*) from task_instance_history").fetchone()[0])
        return latest + earlier

    counts = {dag_id: verdicts(r) for dag_id, r in results.items()}
    dag_id = max(counts, key=lambda d: (counts[d], d))
    home = results[dag_id].database.parent
    print(
        f"\nFailures page ({counts[dag_id]} failed tries of {dag_id}; every run has its own AIRFLOW_HOME):\n"
        f"  AIRFLOW_HOME={home} AIRFLOW__CORE__DAGS_FOLDER={DAGS} "
        f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=sqlite:///{home / 'airflow.db'} "
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True AIRFLOW__CORE__LOAD_EXAMPLES=False "
        ".venv/bin/airflow api-server --port 8080\n"
        "  then open http://127.0.0.1:8080/k8s-retry/ (or Browse > Kubernetes pod failures in the UI)"
    )


def main() -> int:
    sys.path.insert(0, str(REPO))
    from airflow_k8s_retry_testing import FakeCluster
    from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

    started = time.monotonic()
    WORK.mkdir(exist_ok=True)
    print("Preparing Airflow's metadata database (once) ...", flush=True)
    database = MigratedDatabase.create(WORK / "template")
    dag_ids = sorted(p.stem for p in DAGS.glob("[0-9][0-9]_*.py"))
    runs_dir = WORK / "runs"
    shutil.rmtree(runs_dir, ignore_errors=True)

    with FakeCluster(scenario=SCENARIO, audit=WORK / "audit.jsonl") as cluster:
        print(f"Simulated cluster at {cluster.url} (scenario {SCENARIO.relative_to(REPO)})")
        print(
            f"Running {len(dag_ids)} example DAGs with `airflow dags test`, three at a time ...\n", flush=True
        )

        def run(dag_id: str) -> DagRunResult:
            home = AirflowHome.create(runs_dir / dag_id, dags_folder=DAGS, database=database)
            result = home.run_dag(dag_id, kubeconfig=cluster.kubeconfig, timeout=300)
            (runs_dir / dag_id / "airflow-output.log").write_text(result.output)
            print(
                f"  {dag_id:<24} run {result.dag_run_state() or '?':<8} in {result.seconds:5.1f} s",
                flush=True,
            )
            return result

        with ThreadPoolExecutor(max_workers=3) as pool:
            results = dict(zip(dag_ids, pool.map(run, dag_ids), strict=True))

        cluster.wait_for(
            lambda c: not any(p["metadata"].get("deletionTimestamp") for p in c.pods()), timeout=15
        )
        audit = cluster.audit_records()
        pods = cluster.all_pods()
        live = cluster.pods()

    deleted = {
        str(r["name"])
        for r in audit
        if r.get("kind") == "request"
        and r.get("verb") == "delete"
        and r.get("resource") == "pods"
        and r.get("status") == 200
    }
    rows: list[Row] = []
    for dag_id in dag_ids:
        rows += build_rows(results[dag_id], pods, deleted)
    owned = {r.pod for r in rows}
    created_by_operators = sum(r.created for r in rows)
    others = [p for p in pods if p["metadata"]["name"] not in owned]
    for pod in others:  # pods created outside any operator and watched by no sensor
        name = pod["metadata"]["name"]
        outcome, reason = _verdict(pod)
        rows.append(Row("(other)", "-", 0, "-", name, outcome, reason, 1, int(name in deleted)))

    print()
    print_table(rows)
    print()
    print(
        f"pods created: {len(pods)} ({created_by_operators} by RetryingPodOperator, "
        f"{len(pods) - created_by_operators} by a task for the sensor)   "
        f"pods deleted: {len(deleted)}   live pods: {len(live)}"
    )
    print_page_hint(results)
    elapsed = time.monotonic() - started
    print(f"demo finished in {elapsed:.0f} s; Airflow output is under {runs_dir.relative_to(REPO)}/")
    return 0 if not live else 1


if __name__ == "__main__":
    sys.exit(main())
