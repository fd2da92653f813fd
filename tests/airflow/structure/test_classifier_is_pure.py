"""The classifier loads nothing heavy: no Airflow, no Kubernetes clients, no aiohttp."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("airflow", "kubernetes", "kubernetes_asyncio", "aiohttp", "yaml")


def test_importing_the_classifier_in_a_fresh_interpreter_loads_no_heavy_module() -> None:
    code = (
        "import json, sys\n"
        "import airflow_k8s_retry.classification as c\n"
        "c.classify(None, now=0.0)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = json.loads(out.stdout)
    heavy = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert not heavy, heavy
    ours = {m for m in loaded if m.startswith("airflow_k8s_retry.")}
    assert ours <= {m for m in ours if m.startswith("airflow_k8s_retry.classification")}, ours
