"""Fixtures of the observability tests: one migrated metadata database per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.airflow_runner import MigratedDatabase


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> MigratedDatabase:
    return MigratedDatabase.create(Path(tmp_path_factory.mktemp("airflow-template")))
