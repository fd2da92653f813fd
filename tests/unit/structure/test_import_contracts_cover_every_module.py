"""The import contracts in pyproject.toml name the product's modules one by one (import-linter has
no "everything but"), so a new module would escape them silently. This keeps the lists complete."""

from __future__ import annotations

import pkgutil
import tomllib

import airflow_k8s_retry
from tests.support.paths import REPO

ROOT = REPO
#: Contracts that list every top-level module of the product except the ones named here.
EXPECTED_GAPS = {
    "Only kube/ imports the Kubernetes and HTTP client libraries": {"kube"},
    "The product imports nothing from the simulator (the CLI aside)": {"cli"},
}


def top_level_modules() -> set[str]:
    return {m.name for m in pkgutil.iter_modules(airflow_k8s_retry.__path__)}


def contract(name: str) -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (found,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == name]
    return found


def test_every_product_module_is_under_the_contracts_that_list_them() -> None:
    modules = top_level_modules()
    assert {"kube", "operators", "triggers", "cli"} <= modules
    for name, gaps in EXPECTED_GAPS.items():
        found = contract(name)
        listed = found["source_modules"]
        assert isinstance(listed, list)
        named = {str(m).removeprefix("airflow_k8s_retry.") for m in listed}
        assert named == modules - gaps, f"{name}: add or remove {sorted(named ^ (modules - gaps))}"


def test_the_simulator_is_forbidden_the_whole_product() -> None:
    found = contract("The simulator imports nothing from the product")
    assert found["source_modules"] == ["airflow_k8s_retry_testing"]
    assert found["forbidden_modules"] == ["airflow_k8s_retry"]


def test_the_tooling_depends_one_way() -> None:
    """tools/ serves bench/ and tests/ and imports neither; bench/ imports nothing from tests/; tests/
    import bench/ only where they test it."""
    tools = contract("tools/ imports neither bench/ nor tests/")
    assert (tools["source_modules"], tools["forbidden_modules"]) == (["tools"], ["bench", "tests"])
    bench = contract("bench/ imports nothing from tests/")
    assert (bench["source_modules"], bench["forbidden_modules"]) == (["bench"], ["tests"])
    tests = contract("tests/ import bench/ only in the tests of bench")
    assert (tests["source_modules"], tests["forbidden_modules"]) == (["tests"], ["bench"])
    assert tests["ignore_imports"] == ["tests.*.bench.** -> bench.**"]
