"""Airflow finds the package as a provider, and its metadata names modules that really exist."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_k8s_retry import __version__
from airflow_k8s_retry.get_provider_info import get_provider_info


def test_airflow_providers_list_shows_the_package(tmp_path: Path) -> None:
    airflow = Path(sys.executable).with_name("airflow")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run(
        [str(airflow), "providers", "list", "--output", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    providers = {p["package_name"]: p for p in json.loads(out[out.index("[") :])}
    assert providers["airflow-k8s-retry"]["version"] == __version__
    # The connection type is the cncf provider's, reused: it must be installed beside us.
    assert "apache-airflow-providers-cncf-kubernetes" in providers


def test_every_module_named_in_the_metadata_holds_its_public_class() -> None:
    info = get_provider_info()
    named = {
        kind: [m for entry in info[kind] for m in entry["python-modules"]]
        for kind in ("operators", "sensors", "triggers")
    }
    assert named == {
        "operators": ["airflow_k8s_retry.operators"],
        "sensors": ["airflow_k8s_retry.sensors"],
        "triggers": ["airflow_k8s_retry.triggers"],
    }
    assert importlib.import_module("airflow_k8s_retry.operators").RetryingPodOperator
    assert importlib.import_module("airflow_k8s_retry.sensors").PodCompletionSensor
    assert importlib.import_module("airflow_k8s_retry.triggers").PodStateTrigger
    assert "connection-types" not in info
