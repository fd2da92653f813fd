"""The Airflow tier's fixture: a migrated metadata database for running DAGs under real Airflow.

``airflow db migrate`` runs once per test session; each DAG run gets a copy of that database in its
own AIRFLOW_HOME, so runs can go in parallel without sharing a SQLite file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.airflow_runner import MigratedDatabase


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> MigratedDatabase:
    return MigratedDatabase.create(Path(tmp_path_factory.mktemp("airflow-template")))
