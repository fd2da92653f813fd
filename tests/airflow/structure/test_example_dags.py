"""Every example DAG in dags/ imports cleanly, defines the DAG its file name promises, and stays cheap.

The DAG files are parsed by Airflow's own DagBag in a subprocess with a throw-away AIRFLOW_HOME,
exactly as the DAG processor would, so an import error in any example fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO
from tools.airflow_runner import base_env

DAGS = REPO / "dags"

PARSE = """
import json, sys
HEAVY = ("kubernetes", "kubernetes_asyncio", "aiohttp")
import airflow_k8s_retry.sensors
heavy = sorted(m for m in HEAVY if m in sys.modules)
import airflow.providers.cncf.kubernetes.operators.pod
kpo_heavy = sorted(m for m in HEAVY if m in sys.modules)
import airflow_k8s_retry.operators
from airflow_k8s_retry.compat import dagbag_class
bag = dagbag_class()(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dags": {d: bag.dags[d].fileloc for d in bag.dag_ids},
    "tasks": {d: sorted(bag.dags[d].task_ids) for d in bag.dag_ids},
    "heavy": heavy,
    "kpo_heavy": kpo_heavy,
    "operator_heavy": sorted(m for m in HEAVY if m in sys.modules),
}))
"""


def test_every_example_dag_imports(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-c", PARSE, str(DAGS)],
        env=base_env(tmp_path, DAGS),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}
    files = sorted(p.stem for p in DAGS.glob("[0-9][0-9]_*.py"))
    assert len(files) >= 6
    # Each file defines the DAG named after it, and nothing else.
    assert sorted(report["dags"]) == files
    for dag_id, fileloc in report["dags"].items():
        assert Path(fileloc).stem == dag_id
        assert report["tasks"][dag_id], f"{dag_id} has no tasks"
    # Importing the sensor must not load the Kubernetes clients (parse time). The operator is a
    # KubernetesPodOperator, so it costs what importing KubernetesPodOperator costs, no more.
    assert report["heavy"] == []
    assert report["operator_heavy"] == report["kpo_heavy"]
