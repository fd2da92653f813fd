"""``airflow_k8s_retry.testing`` (the simulator's path before it became its own distribution) keeps
working for one release: the same modules, not copies, and one DeprecationWarning naming the new
path and how to install it."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator

import pytest

import airflow_k8s_retry_testing
import airflow_k8s_retry_testing.controllers.kubelet
import airflow_k8s_retry_testing.scenario

OLD = "airflow_k8s_retry.testing"


@pytest.fixture
def fresh_alias() -> Iterator[None]:
    """Forget the alias (and what it imported under the old names) so the test imports it anew."""

    def forget() -> None:
        for name in [n for n in sys.modules if n == OLD or n.startswith(OLD + ".")]:
            del sys.modules[name]
        package = importlib.import_module("airflow_k8s_retry")
        if hasattr(package, "testing"):
            delattr(package, "testing")

    forget()
    yield
    forget()


def test_importing_the_old_path_warns_once_with_the_new_one(fresh_alias: None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.import_module(OLD)
        importlib.import_module(OLD + ".scenario")
        importlib.import_module(OLD + ".controllers.kubelet")
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1
    message = str(deprecations[0].message)
    assert "import airflow_k8s_retry_testing instead" in message
    assert 'pip install "airflow-k8s-retry[testing]"' in message


def test_old_names_are_the_new_objects(fresh_alias: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from airflow_k8s_retry.testing.controllers import kubelet
        from airflow_k8s_retry.testing.scenario import ScenarioError

        from airflow_k8s_retry.testing import FakeCluster, Scenario

    assert FakeCluster is airflow_k8s_retry_testing.FakeCluster
    assert Scenario is airflow_k8s_retry_testing.Scenario
    assert ScenarioError is airflow_k8s_retry_testing.scenario.ScenarioError
    assert kubelet is airflow_k8s_retry_testing.controllers.kubelet
    assert sys.modules[OLD + ".scenario"] is airflow_k8s_retry_testing.scenario
    # The real module keeps its own identity: importlib does not leave the alias's spec on it.
    assert airflow_k8s_retry_testing.scenario.__spec__ is not None
    assert airflow_k8s_retry_testing.scenario.__spec__.name == "airflow_k8s_retry_testing.scenario"


def test_a_name_the_simulator_never_had_is_an_attribute_error(fresh_alias: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module(OLD)
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = old.NoSuchThing
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        importlib.import_module(OLD + ".no_such_module")
