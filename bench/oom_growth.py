"""The classic OOM DAG under real Airflow: a container that needs 3500Mi runs with a 2Gi limit and
``retries=3``; what each way of running it spends.

Three DAGs, one run each under ``airflow dags test``, each against its own simulator (a container
that needs more memory than its limit is OOM-killed halfway through its 10 simulated minutes):

* the cncf ``KubernetesPodOperator`` (deferrable), as written;
* ``RetryingPodOperator`` as written (growth off);
* ``RetryingPodOperator(memory_growth=MemoryGrowth())`` (growth on, factor 2).

The provider's suggested workaround, Jinja on ``ti.try_number`` in ``container_resources``, is not
measured here: ``airflow dags test`` runs every try on the same operator object, and the provider
renders a ``V1ResourceRequirements`` in place, so from try 2 on there is no template left (tried:
all four pods got the first try's 2Gi).

Tries and outcomes come from Airflow's database; pods, their memory limits and their lifetimes from
the simulator's audit log. Container-minutes is the simulated time the pods' containers ran (from
``phase:Running`` to the pod's terminal phase); pod-minutes is each pod's life from create to its
deletion, in simulated minutes, so it includes Airflow's own time between the kill and the delete.

    python -m bench.oom_growth            # prints the table, writes bench/results/oom_growth.{md,json}
"""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from airflow_k8s_retry_testing import FakeCluster
from tools.airflow_runner import AirflowHome, MigratedDatabase

TIME_SCALE = 0.02  # 10 simulated minutes in 12 real seconds
IMAGE = "example.com/train:1"
SCENARIO = {
    "time_scale": TIME_SCALE,
    "images": {IMAGE: {"run": {"memory_needed": "3500Mi", "duration_seconds": 600}}},
}
HEADER = """
from datetime import datetime, timedelta

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_k8s_retry.memory_growth import MemoryGrowth
from airflow_k8s_retry.operators import RetryingPodOperator
"""
SIZED = 'container_resources=k8s.V1ResourceRequirements(requests={"memory": "1Gi"}, limits={"memory": "2Gi"})'
COMMON = 'task_id="train", image="{image}", namespace="default", retries=3, retry_delay=timedelta(seconds=0)'
VARIANTS: dict[str, tuple[str, str]] = {
    "KubernetesPodOperator": ("KubernetesPodOperator", 'name="train", deferrable=True, ' + SIZED),
    "RetryingPodOperator, growth off": ("RetryingPodOperator", SIZED),
    "RetryingPodOperator, memory_growth=MemoryGrowth()": (
        "RetryingPodOperator",
        SIZED + ", memory_growth=MemoryGrowth()",
    ),
}


def dag_file(dag_id: str, operator: str, args: str) -> str:
    task = f"{operator}({COMMON.format(image=IMAGE)}, {args})"
    return (
        textwrap.dedent(HEADER)
        + f"\nwith DAG(dag_id={dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1)):\n    {task}\n"
    )


def run_variant(root: Path, database: MigratedDatabase, index: int, name: str) -> dict[str, Any]:
    operator, args = VARIANTS[name]
    dag_id = f"oom_{index}"
    work = root / dag_id
    dags = work / "dags"
    dags.mkdir(parents=True)
    (dags / f"{dag_id}.py").write_text(dag_file(dag_id, operator, args))
    home = AirflowHome.create(work / "home", dags_folder=dags, database=database)
    with FakeCluster(scenario=SCENARIO, audit=work / "audit.jsonl") as cluster:
        result = home.run_dag(dag_id, kubeconfig=cluster.kubeconfig, timeout=900)
        (work / "airflow-output.log").write_text(result.output)
        cluster.wait_for(lambda c: not c.pods(), timeout=30)
        audit, pods = cluster.audit_records(), cluster.all_pods()
    tries = result.tries("train")
    return {
        "variant": name,
        "outcome": result.final_state("train"),
        "tries": len(tries),
        "wall_seconds": round(result.seconds, 1),
        **pod_figures(audit, pods),
    }


def pod_figures(audit: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """Pods, their limits, container-minutes and pod-minutes (simulated) from the audit log."""
    times: dict[str, dict[str, float]] = defaultdict(dict)
    for record in audit:
        if record.get("kind") != "lifecycle":
            continue
        change = str(record.get("change"))
        if change in ("created", "deleted", "phase:Running", "phase:Failed", "phase:Succeeded"):
            times[str(record["uid"])].setdefault(change, float(record["t"]))
    container = pod = 0.0
    for t in times.values():
        ended = t.get("phase:Failed", t.get("phase:Succeeded"))
        if "phase:Running" in t and ended is not None:
            container += (ended - t["phase:Running"]) / TIME_SCALE
        if "created" in t and "deleted" in t:
            pod += (t["deleted"] - t["created"]) / TIME_SCALE
    limits = [
        ((p["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get("memory", "-")
        for p in pods
    ]
    return {
        "pods": len(pods),
        "limits": limits,
        "container_minutes": round(container / 60, 1),
        "pod_minutes": round(pod / 60, 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| how the DAG runs | outcome | tries | pods | memory limit per pod | container-minutes "
        "| pod-minutes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['outcome']} | {r['tries']} | {r['pods']} | {', '.join(r['limits'])} "
            f"| {r['container_minutes']} | {r['pod_minutes']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    root = Path(mkdtemp(prefix="oom-growth-"))
    database = MigratedDatabase.create(root / "template")
    names = list(VARIANTS)
    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = list(pool.map(lambda i: run_variant(root, database, i, names[i]), range(len(names))))
    text = table(rows)
    load = os.getloadavg()
    note = f"load average during the run's end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    print(text)
    print(note)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "oom_growth.json").write_text(json.dumps({"rows": rows, "load": load}, indent=2) + "\n")
    header = "# The classic OOM DAG: 3500Mi needed, 2Gi limit, retries=3\n\n"
    (args.out / "oom_growth.md").write_text(header + text + "\n\n" + note + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
