"""Process-wide test settings, and the tiers.

Airflow reads its configuration once per process, so every test session gets a throw-away
AIRFLOW_HOME (never the user's own) with the example DAGs switched off, before anything imports
Airflow.

Every test lives in the folder of its tier and gets the tier's marker from that folder, so
``pytest -m unit`` and ``pytest tests/unit`` select the same tests and no test goes unmarked: a
test file outside a tier folder stops the collection.

The fixtures more than one tier uses are here: the metadata database the DAG runs under real
Airflow copy (the Airflow and cluster tiers), and the real control plane's (the cluster tier and its
fidelity suite).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.airflow_home import use_throwaway_airflow_home
from tools.airflow_runner import MigratedDatabase

use_throwaway_airflow_home(replace=True)

TESTS = Path(__file__).resolve().parent
#: The tiers, cheapest first; pyproject.toml registers each as a marker with the same words.
TIERS = ("unit", "simulated", "airflow", "deployment", "cluster", "chaos", "soak")


def tier_of(path: Path) -> str | None:
    parts = path.resolve().relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = {path: tier_of(path) for path in {Path(item.path) for item in items}}  # one look per file
    unplaced = sorted(str(path.relative_to(TESTS.parent)) for path, tier in tiers.items() if tier is None)
    if unplaced:
        raise pytest.UsageError(
            f"tests outside a tier folder: {', '.join(unplaced)}; move each under tests/<tier>/ "
            f"(one of {', '.join(TIERS)})"
        )
    for item in items:
        item.add_marker(getattr(pytest.mark, str(tiers[Path(item.path)])))


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> MigratedDatabase:
    """A metadata database ``airflow db migrate`` made once per test session; each DAG run gets a
    copy of it in its own AIRFLOW_HOME, so runs go in parallel without sharing a SQLite file."""
    return MigratedDatabase.create(Path(tmp_path_factory.mktemp("airflow-template")))


# The real control plane's session fixtures (the cluster tier, the fidelity suite included).
from tests.support.cluster_session import cluster_scenario, control_plane  # noqa: E402, F401
