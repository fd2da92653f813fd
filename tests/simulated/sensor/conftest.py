"""The sensor's tests share the operator's in-process fixtures (a task instance stand-in and its
context) and the watching tests' manual clock, hub settings and triggers' clock; the simulator is
the plugin's ``fake_cluster`` (or ``make_fake_cluster``)."""

from __future__ import annotations

from tests.support.task_fixtures import context, ti
from tests.support.watch_fixtures import hub_settings, manual_clock, trigger_clock

__all__ = ["context", "hub_settings", "manual_clock", "ti", "trigger_clock"]
