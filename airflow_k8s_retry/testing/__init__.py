"""Deprecated alias of ``airflow_k8s_retry_testing``, the simulator's own distribution.

The simulator (``FakeCluster``, its scenarios, the control-plane harness) left the provider's wheel:
install it with ``pip install "airflow-k8s-retry[testing]"`` and import ``airflow_k8s_retry_testing``.
Until the alias goes (in 0.3.0), ``airflow_k8s_retry.testing`` and every module under it
(``airflow_k8s_retry.testing.scenario``, ...) are the new modules themselves, not copies, with one
``DeprecationWarning`` when the alias is first imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

_OLD = __name__
_NEW = "airflow_k8s_retry_testing"

warnings.warn(
    f"{_OLD} is deprecated and goes in 0.3.0: the simulator is the airflow-k8s-retry-testing "
    f'distribution now (pip install "airflow-k8s-retry[testing]"); import {_NEW} instead',
    DeprecationWarning,
    stacklevel=2,
)

try:
    _target = importlib.import_module(_NEW)
except ModuleNotFoundError as error:  # pragma: no cover - depends on what is installed
    if error.name != _NEW:
        raise
    raise ModuleNotFoundError(
        f'{_OLD} needs the simulator\'s distribution: pip install "airflow-k8s-retry[testing]"',
        name=_NEW,
    ) from error


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``airflow_k8s_retry.testing.X`` as the already-importable ``airflow_k8s_retry_testing.X``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_OLD + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(_NEW + spec.name.removeprefix(_OLD))
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The module ran when it was imported under its own name; importlib has just set its
        # __spec__ to the alias's, so it gets its own back.
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())

__all__ = list(getattr(_target, "__all__", ()))


def __getattr__(name: str) -> Any:
    return getattr(_target, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(dir(_target)))
