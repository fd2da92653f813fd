"""Fixtures of the watching and sensor tests: a throw-away Airflow home, kubeconfig files, a manual clock,
hub settings (their folders' conftests import them)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

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
