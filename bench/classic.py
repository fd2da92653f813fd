"""The classic failure under real Airflow: ``image="notavalidimage"``, ``retries=3``, both operators.

Each operator gets its own simulator process and its own ``AIRFLOW_HOME``; ``airflow dags test``
runs the DAG to its end (the deferrable ``KubernetesPodOperator`` and ``RetryingPodOperator`` both
defer, and ``dags test`` runs their triggers in-process). The answer comes from two independent
records: the metadata database (tries and their states) and the simulator's audit log (pods
created, pods whose deletion was requested, every API request).
"""

from __future__ import annotations

import textwrap
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.phases import Backend
from bench.simulator import SimulatorProcess
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase, read_tries

IMAGE = "notavalidimage"
RETRIES = 3

OURS_DAG = """
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="classic_ours", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(
        task_id="classic",
        image={image!r},
        cmds=["true"],
        retries={retries},
        retry_delay=timedelta(seconds=1),
        failure_policy={policy},
    )
"""

KPO_DAG = """
from datetime import datetime, timedelta

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

with DAG(dag_id="classic_kpo", schedule=None, start_date=datetime(2024, 1, 1)):
    KubernetesPodOperator(
        task_id="classic",
        name="classic",
        namespace="default",
        image={image!r},
        cmds=["true"],
        deferrable=True,
        retries={retries},
        retry_delay=timedelta(seconds=1),
    )
"""


def run_classic(
    workdir: Path,
    *,
    not_found_grace: float | None,
    timeout: float = 900,
    backend: Backend = SimulatorProcess,
) -> dict[str, Any]:
    """Run both DAGs side by side; ``not_found_grace`` None keeps PodStateTrigger's default (90 s)."""
    database = MigratedDatabase.create(workdir / "template")
    policy = (
        "None"
        if not_found_grace is None
        else f"FailurePolicy(grace={{'image.not_found': {not_found_grace}}})"
    )
    dags = {
        "ours": ("classic_ours", OURS_DAG.format(image=IMAGE, retries=RETRIES, policy=policy)),
        "kpo": ("classic_kpo", KPO_DAG.format(image=IMAGE, retries=RETRIES)),
    }
    scenario = {"time_scale": 1.0, "images": {IMAGE: {"pull": "not_found"}}}
    sims: dict[str, Any] = {}
    running = {}
    try:
        for side, (dag_id, source) in dags.items():
            folder = workdir / side / "dags"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{dag_id}.py").write_text(textwrap.dedent(source))
            home = AirflowHome.create(workdir / side / "home", dags_folder=folder, database=database)
            sim = sims[side] = backend(workdir / side / "sim", scenario)
            sim.start()
            running[side] = (
                home,
                dag_id,
                home.start_dag(dag_id, kubeconfig=sim.kubeconfig),
                time.monotonic(),
            )
        # Drain both outputs at once: a DAG run whose pipe is not read blocks on its own log lines.
        with ThreadPoolExecutor(max_workers=len(running)) as pool:
            futures = {
                side: pool.submit(home.finish, dag_id, proc, started, timeout)
                for side, (home, dag_id, proc, started) in running.items()
            }
            results: dict[str, DagRunResult | TimeoutError] = {}
            for side, future in futures.items():
                try:
                    results[side] = future.result()
                except TimeoutError as exc:  # reported as such, with what the records show so far
                    results[side] = exc
    finally:
        for sim in sims.values():
            sim.stop()
    out: dict[str, Any] = {"image": IMAGE, "retries": RETRIES, "not_found_grace": not_found_grace}
    for side, result in results.items():
        records = sims[side].records()
        if isinstance(result, TimeoutError):
            (workdir / side / "airflow-output.log").write_text(str(result))
            home, dag_id, _, _ = running[side]
            tries = read_tries(home.database, dag_id, "classic")
            out[side] = summarize_classic(tries, timeout, records, None)
            out[side]["timed_out"] = True
            continue
        (workdir / side / "airflow-output.log").write_text(result.output)
        out[side] = summarize_classic(result.tries("classic"), result.seconds, records, result.returncode)
    return out


def summarize_classic(
    tries: list[Any], seconds: float, records: list[dict[str, Any]], returncode: int | None
) -> dict[str, Any]:
    created = [r for r in records if r.get("kind") == "lifecycle" and r.get("change") == "created"]
    deleting = {
        r["uid"]
        for r in records
        if r.get("kind") == "lifecycle" and r.get("change") in ("deleting", "deleted")
    }
    requests = [r for r in records if r.get("kind") == "request"]
    first_create = min((r["t"] for r in created), default=None)
    last_request = max((r["t"] for r in requests), default=None)
    return {
        "returncode": returncode,
        "pods_created": len(created),
        "pods_left": sum(1 for r in created if r["uid"] not in deleting),
        "tries": [{"try": t.try_number, "state": t.state} for t in tries],
        "tries_consumed": len(tries),
        "final_state": tries[-1].state if tries else None,
        "dags_test_seconds": seconds,
        "first_pod_to_last_request_seconds": (
            last_request - first_create if first_create is not None and last_request is not None else None
        ),
        "requests": len(requests),
        "requests_by_verb": dict(sorted(Counter(f"{r['verb']} {r['resource']}" for r in requests).items())),
    }
