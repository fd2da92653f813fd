"""Process-wide test settings that must be in place before anything imports Airflow.

Airflow reads its configuration once per process, so every test session gets a throw-away
AIRFLOW_HOME (never the user's own) with the example DAGs switched off.
"""

from __future__ import annotations

import os
import tempfile

os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-k8s-retry-home-")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

# The real control plane's session fixtures (the cluster tier and the fidelity suite share them).
from tests.support.cluster_session import cluster_scenario, control_plane  # noqa: F401
