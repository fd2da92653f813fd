"""The watching tests' fixtures: kubeconfig files, manual clocks, hub settings, the triggers' clock and
task-state lookup replaced."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.watch_settings import HubSettings
from tests.support.feeds import hold_hub
from tests.support.watch_fixtures import (
    hub_settings,
    kubeconfig_file,
    manual_clock,
    task_state_lookup,
    trigger_clock,
)

__all__ = [
    "held_hub",
    "hub_settings",
    "kubeconfig_file",
    "manual_clock",
    "task_state_lookup",
    "trigger_clock",
]


@pytest.fixture
def held_hub(hub_settings: Callable[..., HubSettings]) -> ManualClock:
    """The clock every hub of the test waits on (backoff, polling, the confirming GET's delay); it
    moves only when the test advances it. Watches do not time out (``feeds.WATCH_TIMEOUT``)."""
    return hold_hub(hub_settings)
