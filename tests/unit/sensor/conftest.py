"""The sensor's tests share the operator's in-process fixtures (a task instance stand-in and its
context) and the watching tests' manual clock."""

from __future__ import annotations

from tests.support.task_fixtures import context, ti
from tests.support.watch_fixtures import manual_clock

__all__ = ["context", "manual_clock", "ti"]
