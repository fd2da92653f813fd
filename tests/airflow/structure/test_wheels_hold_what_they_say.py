"""The two wheels, built as a release builds them: the provider's holds no simulator and needs no
``cryptography``; the simulator's holds the simulator, its scenarios and its pytest plugin, and
nothing a DAG author cannot run or does not need (the real control plane's harness, the load
check); the provider's ``[testing]`` extra asks for the simulator's release of the same version."""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import airflow_k8s_retry
import airflow_k8s_retry_testing
from tests.support.paths import REPO

SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "LICENSE", "airflow_k8s_retry")
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    """Build both wheels from copies of their sources (nothing written into the checkout)."""
    tree = tmp_path_factory.mktemp("sources")
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / "provider" / name, ignore=IGNORED)
        else:
            (tree / "provider").mkdir(exist_ok=True)
            shutil.copy(source, tree / "provider" / name)
    shutil.copytree(REPO / "simulator", tree / "simulator", ignore=IGNORED)
    out = tree / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
         str(tree / "provider"), str(tree / "simulator")],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    found = {path.name.split("-")[0]: zipfile.ZipFile(path) for path in out.glob("*.whl")}
    assert sorted(found) == ["airflow_k8s_retry", "airflow_k8s_retry_testing"]
    return found


def metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_string(wheel.read(name).decode())


def modules(wheel: zipfile.ZipFile) -> list[str]:
    return [n for n in wheel.namelist() if n.endswith(".py")]


def test_the_providers_wheel_holds_no_simulator(wheels: dict[str, zipfile.ZipFile]) -> None:
    provider = wheels["airflow_k8s_retry"]
    names = provider.namelist()
    assert not [n for n in names if n.startswith("airflow_k8s_retry_testing/")]
    assert not [n for n in names if n.startswith("airflow_k8s_retry/testing/")]
    assert not [n for n in names if n.endswith((".yaml", ".pem"))]
    shipped = {n.removeprefix("airflow_k8s_retry/").removesuffix(".py") for n in modules(provider)}
    package = Path(airflow_k8s_retry.__file__).parent
    in_checkout = {str(p.relative_to(package).with_suffix("")) for p in package.rglob("*.py")}
    assert shipped == in_checkout


def test_the_provider_needs_no_cryptography_and_its_testing_extra_is_the_simulator(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    requires = metadata(wheels["airflow_k8s_retry"]).get_all("Requires-Dist") or []
    unconditional = [r for r in requires if "extra ==" not in r]
    assert not [r for r in unconditional if r.lower().startswith("cryptography")]
    testing = [r for r in requires if re.search(r'extra == "testing"', r)]
    assert testing == [
        f'airflow-k8s-retry-testing=={airflow_k8s_retry_testing.__version__}; extra == "testing"'
    ]
    assert airflow_k8s_retry_testing.__version__ == airflow_k8s_retry.__version__


def test_the_simulators_wheel_holds_the_simulator_its_scenarios_and_its_plugin(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    simulator = wheels["airflow_k8s_retry_testing"]
    names = set(simulator.namelist())
    shipped = {p.name for p in airflow_k8s_retry_testing.SCENARIOS.glob("*.yaml")}
    assert len(shipped) >= 7
    assert {f"airflow_k8s_retry_testing/scenarios/{name}" for name in shipped} <= names
    assert {
        "airflow_k8s_retry_testing/cluster.py",
        "airflow_k8s_retry_testing/pytest_plugin.py",
        "airflow_k8s_retry_testing/py.typed",
    } <= names
    assert not [n for n in names if n.startswith("airflow_k8s_retry/")]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "[pytest11]\nairflow_k8s_retry_testing = airflow_k8s_retry_testing.pytest_plugin" in (
        simulator.read(entry_points).decode()
    )
    requires = metadata(simulator).get_all("Requires-Dist") or []
    assert any(r.startswith("cryptography") for r in requires)
    assert not any(r.lower().startswith(("apache-airflow", "airflow-k8s-retry")) for r in requires)


def test_the_simulators_wheel_holds_no_control_plane_harness_and_no_load_check(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    """The real control plane's harness needs Go binaries the wheel does not ship (it lives in
    ``tools/controlplane``), and the load check serves one test: neither is for DAG authors."""
    simulator = wheels["airflow_k8s_retry_testing"]
    shipped = modules(simulator)
    assert not [n for n in shipped if "controlplane" in n or "loadcheck" in n]
    assert not [n for n in simulator.namelist() if n.startswith("tools/")]
    requires = metadata(simulator).get_all("Requires-Dist") or []
    assert not [r for r in requires if r.lower().startswith("psutil")], "psutil served only the load check"
    package = Path(airflow_k8s_retry_testing.__file__).parent
    in_checkout = {str(p.relative_to(package.parent)) for p in package.rglob("*.py")}
    assert set(shipped) == in_checkout


def test_the_design_page_gives_each_wheels_module_count_and_size(wheels: dict[str, zipfile.ZipFile]) -> None:
    """The design page's figures are the wheels' own: the module count exactly, the size within 10%."""
    readme = " ".join((REPO / "docs" / "design.md").read_text().split())
    said = re.search(
        r"The provider's wheel is (\d+) KB with (\d+) modules"
        r".*?the simulator's is (\d+) KB with (\d+) modules",
        readme,
    )
    assert said, "docs/design.md: the sentence giving the wheels' sizes and module counts is missing"
    for (kb, count), name in zip(
        (said.group(1, 2), said.group(3, 4)), ("airflow_k8s_retry", "airflow_k8s_retry_testing"), strict=True
    ):
        wheel = wheels[name]
        assert wheel.filename is not None
        size = Path(wheel.filename).stat().st_size / 1024
        shipped = len(modules(wheel))
        assert int(count) == shipped, f"docs/design.md: {name}'s wheel has {shipped} modules"
        assert abs(int(kb) - size) <= 0.1 * size, f"docs/design.md: {name}'s wheel is {size:.0f} KB"
