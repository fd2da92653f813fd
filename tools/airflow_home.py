"""A throw-away AIRFLOW_HOME for one test process (never the user's own), removed as it exits.

Airflow reads its home once per process, when first imported, so this runs before anything
imports Airflow. A process that finds a home already set (its parent's, or one set earlier in
the same process) keeps it unless told to replace it; only the process that made a home removes
it, when its interpreter exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def use_throwaway_airflow_home(prefix: str = "airflow-k8s-retry-home-", *, replace: bool = False) -> str:
    """Point ``AIRFLOW_HOME`` at a new temporary folder (unless one is set and ``replace`` is false)."""
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    if not replace and "AIRFLOW_HOME" in os.environ:
        return os.environ["AIRFLOW_HOME"]
    home = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    os.environ["AIRFLOW_HOME"] = home
    return home
