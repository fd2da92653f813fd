"""The sensor's tests share the operator's in-process fixtures (a task instance stand-in, a simulator
per test) and the watching tests' manual clock and hub settings."""

from __future__ import annotations

from tests.support.task_fixtures import context, make_cluster, ti
from tests.support.watch_fixtures import hub_settings, manual_clock

__all__ = ["context", "hub_settings", "make_cluster", "manual_clock", "ti"]
