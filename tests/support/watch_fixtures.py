"""Fixtures of the watching and sensor tests: a throw-away Airflow home, kubeconfig files, a manual clock,
hub settings, and the triggers' two seams replaced: their clock and their task-state lookup (their
folders' conftests import them).

The seams are class attributes of ``PodStateTrigger`` (the sensor's ``PodTargetTrigger`` reads the
same clock), replaced through pytest-mock's ``mocker`` for the test alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock

import pytest
from pytest_mock import MockerFixture

from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.watch_settings import HubSettings, use_settings
from tools.airflow_home import use_throwaway_airflow_home

# Airflow reads its home when first imported; point it somewhere disposable before any test module
# imports the trigger (which imports Airflow; the modules above do not).
use_throwaway_airflow_home("airflow-k8s-retry-watching-")

KUBECONFIG_TEMPLATE = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}"}}
contexts:
- name: ctx
  context: {{cluster: c, user: u}}
- name: other
  context: {{cluster: c, user: u2}}
current-context: ctx
users:
- name: u
  user: {{token: token-one}}
- name: u2
  user: {{token: token-two}}
"""


@pytest.fixture
def kubeconfig_file(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG_TEMPLATE.format(server="http://127.0.0.1:9"))
    return path


@pytest.fixture
def manual_clock() -> Iterator[ManualClock]:
    yield ManualClock(1_800_000_000.0)


@pytest.fixture
def hub_settings() -> Iterator[Callable[..., HubSettings]]:
    """``hub_settings(backoff_cap=0.2, ...)``: every watch hub made later in the test takes these."""
    with contextlib.ExitStack() as stack:

        def choose(**knobs: Any) -> HubSettings:
            return stack.enter_context(use_settings(dataclasses.replace(HubSettings.from_env(), **knobs)))

        yield choose


@pytest.fixture
def trigger_clock(mocker: MockerFixture, manual_clock: ManualClock) -> ManualClock:
    """``manual_clock`` as the triggers' clock (the seam ``PodStateTrigger.clock``): their timers,
    deadlines and progress lines move only when the test advances it."""
    from airflow_k8s_retry.triggers import PodStateTrigger

    mocker.patch.object(PodStateTrigger, "clock", manual_clock)
    return manual_clock


@pytest.fixture
def task_state_lookup(mocker: MockerFixture) -> AsyncMock:
    """The triggers' task-state lookup (the seam ``PodStateTrigger.task_state_lookup``, this package's
    boundary with Airflow's task SDK) as a stub: the test sets what it answers (``return_value``,
    ``side_effect``) and asserts what it was asked (``await_args_list``)."""
    from airflow_k8s_retry.triggers import PodStateTrigger

    stub: AsyncMock = mocker.patch.object(PodStateTrigger, "task_state_lookup", new_callable=AsyncMock)
    return stub
