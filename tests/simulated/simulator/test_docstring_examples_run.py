"""Every ``>>>`` example in the simulator's docstrings runs and prints what it says (they start a
``FakeCluster``, so they run in this tier; the product's run in ``tests/unit/documentation``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import airflow_k8s_retry_testing

MODULES = sorted(
    [airflow_k8s_retry_testing.__name__]
    + [
        info.name
        for info in pkgutil.walk_packages(
            airflow_k8s_retry_testing.__path__, prefix=f"{airflow_k8s_retry_testing.__name__}."
        )
    ]
)


def count(name: str) -> int:
    module = importlib.import_module(name)
    return sum(len(test.examples) for test in doctest.DocTestFinder().find(module, name))


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_of_a_module_run(name: str) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_fake_clusters_example_is_collected() -> None:
    assert count("airflow_k8s_retry_testing.cluster") >= 3
