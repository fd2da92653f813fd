"""The tracker loads nothing heavy and no I/O code: the classifier, the annotation names and their
codec (pure JSON), the resourceVersion order, itself."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("airflow", "kubernetes", "kubernetes_asyncio", "aiohttp", "yaml")


def test_importing_the_tracker_in_a_fresh_interpreter_loads_no_io_module() -> None:
    code = (
        "import json, sys\n"
        "from airflow_k8s_retry.triggers.tracker import PodTracker\n"
        "PodTracker(pod_uid='u', started=0.0).apply([], [], 0.0)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = json.loads(out.stdout)
    assert not [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    ours = {m for m in loaded if m.startswith("airflow_k8s_retry.")}
    allowed = (
        "airflow_k8s_retry.classification",
        "airflow_k8s_retry.kube.naming",
        "airflow_k8s_retry.kube.ordering",
        "airflow_k8s_retry.triggers.queues",
        "airflow_k8s_retry.triggers.tracker",
    )
    # The packages themselves load too: kube/'s and triggers/' (whose PodStateTrigger loads lazily).
    packages = ("airflow_k8s_retry.kube", "airflow_k8s_retry.triggers")
    assert all(m.startswith(allowed) or m in packages for m in ours), sorted(ours)
