"""``airflow-k8s-retry simulate`` on an install without the ``[testing]`` extra says what to install,
in one line, instead of a traceback."""

from __future__ import annotations

import importlib.abc
import sys

import pytest

from airflow_k8s_retry import cli


class NotInstalled(importlib.abc.MetaPathFinder):
    """Answers for the simulator's distribution as an environment without it does."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname.split(".", maxsplit=1)[0] == "airflow_k8s_retry_testing":
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def test_simulate_names_the_extra_when_the_simulator_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in sys.modules if n.split(".")[0] == "airflow_k8s_retry_testing"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled(), *sys.meta_path])

    status = cli.main(["simulate", "--port", "0"])

    assert status == 2
    error = capsys.readouterr().err
    assert error == (
        "airflow-k8s-retry simulate: the simulator is not installed; "
        'pip install "airflow-k8s-retry[testing]"\n'
    )
