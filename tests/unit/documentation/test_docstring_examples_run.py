"""Every ``>>>`` example in the product's docstrings runs and prints what it says.

The examples are what a DAG author reads on the documentation site's pages; one that has drifted
from the code fails here. An example that cannot run in this tier (it needs a cluster, a socket or
a running event loop) is written as a plain ``Example::`` block, which doctest does not collect.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

import airflow_k8s_retry

#: The deprecated alias re-exports the simulator's modules with a warning; it holds no examples.
SKIPPED = {"airflow_k8s_retry.testing"}


def modules() -> list[str]:
    found = [airflow_k8s_retry.__name__]
    found += [
        info.name
        for info in pkgutil.walk_packages(airflow_k8s_retry.__path__, prefix=f"{airflow_k8s_retry.__name__}.")
        if not any(info.name == skipped or info.name.startswith(f"{skipped}.") for skipped in SKIPPED)
    ]
    return sorted(found)


MODULES = modules()


def examples(module: ModuleType) -> list[doctest.DocTest]:
    return [test for test in doctest.DocTestFinder().find(module, module.__name__) if test.examples]


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_of_a_module_run(name: str) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in examples(module):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_the_product_has_examples_to_run() -> None:
    """The collection above finds the examples (a finder that found none would pass every module)."""
    counted = {
        name: sum(len(t.examples) for t in examples(importlib.import_module(name))) for name in MODULES
    }
    assert counted["airflow_k8s_retry.classification.classifier"] >= 3
    assert counted["airflow_k8s_retry.classification.policy"] >= 2
    assert sum(counted.values()) >= 20
